"""Serve the SGLang fake with the real SGLang plugin: ``python -m fakes.sglang``.

The order is SGLang's: plugins load first (``launch_server.py:79``), then ``launch_server``.
"""

from __future__ import annotations

import argparse
import logging
from types import SimpleNamespace

from engine_plugins.sglang.plugin import install
from . import http_server
from .api import fake_api


def main() -> None:
    """Parse SGLang-like flags, install the plugin on the fake, serve on loopback."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--admin-api-key", default=None)
    parser.add_argument("--tokenizer-worker-num", type=int, default=1)
    parser.add_argument("--no-deterministic-inference", dest="enable_deterministic_inference", action="store_false")
    parser.add_argument("--step-s", type=float, default=0.002, help="seconds per decode step")
    parser.add_argument("--tokenize-s", type=float, default=0.0, help="seconds a request spends tokenizing")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    serving = SimpleNamespace(
        api_key=args.api_key,
        admin_api_key=args.admin_api_key,
        tokenizer_worker_num=args.tokenizer_worker_num,
        enable_deterministic_inference=args.enable_deterministic_inference,
    )
    install(fake_api(serving))
    http_server.launch_server(args)


main()
