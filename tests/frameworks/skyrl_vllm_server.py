"""vLLM started as SkyRL's ``VLLMServerActor`` starts it: in one process (the Ray actor), vLLM's
``build_app``, then ``AsyncLLMEngine.from_engine_args``, ``init_app_state`` and uvicorn serving
the app: neither ``vllm serve`` nor ``run_server``.

    python -m frameworks.skyrl_vllm_server [vLLM's serve flags]

Source: NovaSky-AI/SkyRL, ``skyrl/backends/skyrl_train/inference_servers/vllm_server_actor.py``,
``_build_and_serve_vllm_server`` (called by the actor's ``_run_server``): ``build_app(cli_args)``,
``AsyncLLMEngine.from_engine_args(engine_args=..., usage_context=OPENAI_API_SERVER)``, SkyRL's own
routes added (``/fetch_weights``, ``/skyrl/v1/generate``, ... : left out here), ``await
init_app_state(engine, app.state, cli_args)``, ``uvicorn.Server(config)`` ("serve_http tries to add
signal handlers which fails in Ray actors"). The plugin reaches that process only through
``VLLM_PLUGINS`` in its environment (a Ray actor's ``runtime_env``), which the test server sets.
"""

from __future__ import annotations

import asyncio
import sys


async def serve(args) -> None:
    """SkyRL's sequence, for the flags in *args*."""
    import uvicorn
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.engine.async_llm_engine import AsyncLLMEngine
    from vllm.entrypoints.openai.api_server import build_app, init_app_state
    from vllm.usage.usage_lib import UsageContext

    app = build_app(args)
    engine = AsyncLLMEngine.from_engine_args(engine_args=AsyncEngineArgs.from_cli_args(args),
                                             usage_context=UsageContext.OPENAI_API_SERVER)
    await init_app_state(engine, app.state, args)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host, port=args.port, log_level="info"))
    await server.serve()


def main() -> None:
    """Parse vLLM's serve flags and serve as SkyRL's actor does."""
    try:  # vLLM 0.32 on
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    args = make_arg_parser(FlexibleArgumentParser()).parse_args(sys.argv[1:])
    asyncio.run(serve(args))


if __name__ == "__main__":
    main()
