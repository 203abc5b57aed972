"""vLLM started as SkyRL starts it: its ``VLLMServerActor``, an async Ray actor that serves vLLM's
app in its own event loop: ``build_app``, then ``AsyncLLMEngine.from_engine_args``,
``init_app_state`` and uvicorn, neither ``vllm serve`` nor ``run_server``.

    python -m frameworks.skyrl_vllm_server [vLLM's serve flags]

Source: NovaSky-AI/SkyRL at 307f7dc820342366cf210707615ee06223659582,
``skyrl/backends/skyrl_train/inference_servers/vllm_server_actor.py``: ``__init__`` sets
``VLLM_SERVER_DEV_MODE=1`` (and two other variables) in the actor's environment; ``start`` runs
``_run_server`` as an asyncio task and polls ``/health`` every second; ``_build_and_serve_vllm_server``:
``build_app(cli_args)``, ``AsyncLLMEngine.from_engine_args(engine_args=..., usage_context=OPENAI_API_SERVER)``,
SkyRL's own routes added (``/reset_prefix_cache``, ``/fetch_weights``, ... : left out here), ``await
init_app_state(engine, app.state, cli_args)``, ``uvicorn.Server(config)`` ("serve_http tries to add
signal handlers which fails in Ray actors"). The plugin reaches that process only through
``VLLM_PLUGINS`` in its environment (the cluster's, or the actor's ``runtime_env``): the test
server sets it in the driver's, which Ray's workers inherit.

This process is SkyRL's driver (:mod:`frameworks.ray_host`): it starts Ray, creates the actor and
awaits its ``start``.
"""

from __future__ import annotations

import asyncio
import os
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


def parse(argv: list[str]):
    """vLLM's serve flags, parsed by vLLM's own parser."""
    try:  # vLLM 0.32 on
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser()).parse_args(argv)


class VLLMServerActor:
    """SkyRL's actor, reduced to its start: the server as a task of the actor's event loop."""

    def __init__(self, argv: list[str]) -> None:
        # SkyRL turns dev mode on for its weight-sync and sleep routes.
        os.environ["VLLM_SERVER_DEV_MODE"] = "1"
        self._args = parse(argv)
        self._task = None

    async def start(self) -> None:
        """Serve, and return once ``/health`` answers 200."""
        import httpx

        self._task = asyncio.create_task(serve(self._args))
        url = f"http://{self._args.host or '127.0.0.1'}:{self._args.port}/health"
        async with httpx.AsyncClient() as client:
            while True:
                if self._task.done():
                    raise self._task.exception() or RuntimeError("Server task exited unexpectedly")
                try:
                    if (await client.get(url, timeout=5.0)).status_code == 200:
                        return
                except httpx.HTTPError:
                    pass
                await asyncio.sleep(1.0)


def main() -> None:
    """Start Ray, create the actor, start the server in it and hold it until stopped."""
    from frameworks.ray_host import hold_until_stopped, start_ray

    ray = start_ray()
    # SkyRL asks for the server's GPUs; here the actor takes no CPU of Ray's (vLLM's engine core
    # process uses the cores).
    actor = ray.remote(num_cpus=0)(VLLMServerActor).remote(sys.argv[1:])
    ray.get(actor.start.remote())
    hold_until_stopped(lambda: ray.kill(actor))


if __name__ == "__main__":
    main()
