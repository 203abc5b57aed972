"""vLLM held in-process, as verl, OpenRLHF, NeMo-RL and ROLL hold it: ``AsyncLLM.from_engine_args``
in this process and no vLLM app. The contract is served from ``engine_plugins.inprocess.attach(llm).app()``
(uvicorn on the target's port), with ``GET /health`` and a minimal ``POST /v1/completions`` (token
prompts, on the ``AsyncLLM``'s own ``generate``) beside it for the tests that send requests of the
engine's own.

    python -m frameworks.inprocess_vllm_server [vLLM's serve flags]

``--api-key`` becomes ``ENGINE_PLUGINS_API_KEY`` (no vLLM app checks keys here).
"""

from __future__ import annotations

import asyncio
import os
import sys
import uuid


def parse(argv: list[str]):
    """vLLM's serve flags, parsed by vLLM's own parser."""
    try:  # vLLM 0.32 on
        from vllm.entrypoints.launchers.cli_args import make_arg_parser
    except ImportError:
        from vllm.entrypoints.openai.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    return make_arg_parser(FlexibleArgumentParser()).parse_args(argv)


def engine_routes(app, llm) -> None:
    """``GET /health`` and ``POST /v1/completions`` (token-id prompts; a list of ids or of lists)
    on the engine's ``generate``: what a framework's own HTTP front end would call."""
    from fastapi import Request
    from fastapi.responses import JSONResponse, Response
    from vllm import SamplingParams
    from vllm.inputs import TokensPrompt

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=503 if llm.errored else 200)

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        body = await request.json()
        prompt = body["prompt"]
        prompts = prompt if prompt and isinstance(prompt[0], list) else [prompt]
        params = SamplingParams(max_tokens=body.get("max_tokens", 16), temperature=body.get("temperature", 1.0),
                                ignore_eos=body.get("ignore_eos", False), detokenize=False)
        rid = request.headers.get("X-Request-Id") or body.get("request_id") or uuid.uuid4().hex

        async def one(index: int, ids: list[int]) -> dict:
            final = None
            async for final in llm.generate(TokensPrompt(prompt_token_ids=ids), params, request_id=f"cmpl-{rid}-{index}"):
                pass
            out = final.outputs[0]
            return {"index": index, "token_ids": list(out.token_ids), "finish_reason": out.finish_reason,
                    "num_cached_tokens": final.num_cached_tokens}

        choices = await asyncio.gather(*(one(i, ids) for i, ids in enumerate(prompts)))
        return JSONResponse({"id": f"cmpl-{rid}", "object": "text_completion", "choices": choices})


async def serve(argv: list[str]) -> None:
    """Build the engine in-process, attach the contract, serve it."""
    import uvicorn
    from vllm.engine.arg_utils import AsyncEngineArgs
    from vllm.v1.engine.async_llm import AsyncLLM

    from engine_plugins.inprocess import attach

    args = parse(argv)
    keys = args.api_key if isinstance(args.api_key, list) else [args.api_key] if args.api_key else []
    if keys:
        os.environ["ENGINE_PLUGINS_API_KEY"] = keys[0]
    llm = AsyncLLM.from_engine_args(AsyncEngineArgs.from_cli_args(args))
    app = attach(llm).app()
    engine_routes(app, llm)
    server = uvicorn.Server(uvicorn.Config(app, host=args.host or "127.0.0.1", port=args.port, log_level="info"))
    try:
        await server.serve()
    finally:
        llm.shutdown()


def main() -> None:
    """Serve until stopped."""
    asyncio.run(serve(sys.argv[1:]))


if __name__ == "__main__":
    main()
