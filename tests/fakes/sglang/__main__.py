"""Serve the SGLang fake: ``python -m fakes.sglang --port P [--api-key K] [--dp-size N] [--no-plugin]``.

The order is SGLang's: plugins load first (here the real SGLang plugin, on this fake), then the
hook registry applies their hooks, then ``launch_server``. With ``--no-plugin`` it is SGLang
without this package: its native routes only.
"""

from __future__ import annotations

import argparse
import logging
from types import SimpleNamespace

from engine_plugins.engines.sglang.plugin import install

from . import http_server
from .hook_registry import HookRegistry
from .names import fake_names


def main() -> None:
    """Parse SGLang-like flags, load the plugin on the fake (unless told not to), serve on loopback."""
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--admin-api-key", default=None)
    parser.add_argument("--tokenizer-worker-num", type=int, default=1)
    parser.add_argument("--no-deterministic-inference", dest="enable_deterministic_inference", action="store_false")
    parser.add_argument("--step-s", type=float, default=0.002, help="seconds per decode step")
    parser.add_argument("--dp-size", type=int, default=1, help="data-parallel ranks, behind a DP controller")
    parser.add_argument("--tokenize-s", type=float, default=0.0, help="seconds a request spends tokenizing")
    parser.add_argument("--aborted-answer-delay-s", type=float, default=0.05,
                        help="seconds between SGLang deleting an aborted request's state and the request's task handing on its answer")
    parser.add_argument("--no-plugin", dest="plugin", action="store_false", help="SGLang without engine-plugins")
    parser.add_argument("--legacy-loads", action="store_true", help="an older SGLang: /get_load instead of /v1/loads")
    parser.add_argument("--like-0.5.19", dest="like", action="store_const", const="0.5.19",
                        help="SGLang 0.5.19: no dispatch mark, a closed request's states only dropped, /get_load")
    parser.add_argument("--like-0.5.18", dest="like", action="store_const", const="0.5.18",
                        help="SGLang 0.5.18: as 0.5.19, and no weight version but the TokenizerManager's config value "
                             "(no update_weight_version, no per-token labels)")
    parser.add_argument("--like-0.5.17", dest="like", action="store_const", const="0.5.17",
                        help="SGLang 0.5.17: as 0.5.18, and its abort marks request states (a marked request raises "
                             "RequestAbortedError before dispatch), its sends mark dispatch, its failure path aborts")
    parser.add_argument("--like-0.5.16", dest="like", action="store_const", const="0.5.16",
                        help="SGLang 0.5.16: as 0.5.18, and the weight version in the server args (no config values)")
    parser.add_argument("--like-0.5.12", dest="like", action="store_const", const="0.5.12",
                        help="SGLang 0.5.12: as 0.5.16 (with the streaming flag in the server args), no failure path "
                             "(a request ended before dispatch keeps its state), loads as dataclasses")
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="[%(asctime)s] %(message)s")
    serving = SimpleNamespace(
        api_key=args.api_key,
        admin_api_key=args.admin_api_key,
        tokenizer_worker_num=args.tokenizer_worker_num,
        enable_deterministic_inference=args.enable_deterministic_inference,
        dp_size=args.dp_size,
    )
    if args.plugin:
        install(fake_names(serving, args.like or "0.5.23"))
        HookRegistry.apply_hooks(source="engine_plugins")
    http_server.launch_server(args)


main()
