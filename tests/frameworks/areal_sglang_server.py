"""SGLang started as AReaL starts it: its own ``launch_server`` module, run by
``subprocess.Popen``, which calls SGLang's ``Engine._launch_subprocesses`` and
``_setup_and_run_http_server`` itself instead of ``sglang.launch_server``.

    python -m frameworks.areal_sglang_server [the flags of python -m sglang.launch_server]

Source: inclusionAI/AReaL at 35af6f0e0c1306be0323ba341d1564e69ca3d687,
``areal/experimental/inference_service/sglang/launch_server.py:17-96`` (``areal_launch_server`` and its
``__main__``): ``Engine._launch_subprocesses(server_args=..., init_tokenizer_manager_func=init_tokenizer_manager,
run_scheduler_process_func=areal_run_scheduler_process, run_detokenizer_process_func=run_detokenizer_process)``,
a return when this node has no TokenizerManager, AReaL's weight-update endpoints registered on
SGLang's module-level ``app``, then ``_setup_and_run_http_server(server_args, tokenizer_manager,
template_manager, port_args, scheduler_infos, subprocess_watchdog, execute_warmup_func=_execute_server_warmup)``;
the ``__main__`` ends with ``kill_process_tree(os.getpid(), include_parent=False)``. Left out:
AReaL's scheduler process function (SGLang's own ``run_scheduler_process`` in its place) and its
weight-update endpoints and RPC proxy (awex/rdt backends, GPU only). AReaL pins SGLang 0.5.10,
which the plugin refuses; the test runs it on 0.5.12, the nearest supported release (from 0.5.19
on ``_launch_subprocesses`` returns a sixth value, which AReaL's code does not unpack).
"""

from __future__ import annotations

import os
import sys


def areal_launch_server(server_args) -> None:
    """AReaL's launch: SGLang's subprocesses, then SGLang's HTTP server set-up, called directly."""
    from sglang.srt.entrypoints.engine import Engine, init_tokenizer_manager
    from sglang.srt.entrypoints.http_server import _execute_server_warmup, _setup_and_run_http_server
    from sglang.srt.managers.detokenizer_manager import run_detokenizer_process
    from sglang.srt.managers.scheduler import run_scheduler_process

    tokenizer_manager, template_manager, port_args, scheduler_init_result, subprocess_watchdog = Engine._launch_subprocesses(
        server_args=server_args,
        init_tokenizer_manager_func=init_tokenizer_manager,
        run_scheduler_process_func=run_scheduler_process,
        run_detokenizer_process_func=run_detokenizer_process,
    )
    if tokenizer_manager is None:
        return
    _setup_and_run_http_server(server_args, tokenizer_manager, template_manager, port_args,
                               scheduler_init_result.scheduler_infos, subprocess_watchdog,
                               execute_warmup_func=_execute_server_warmup)


if __name__ == "__main__":
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils import kill_process_tree

    server_args = prepare_server_args(sys.argv[1:])
    try:
        areal_launch_server(server_args)
    finally:
        kill_process_tree(os.getpid(), include_parent=False)
