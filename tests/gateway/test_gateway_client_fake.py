"""The client's gateway mode on answers a real smg gives rarely or never on loopback: a worker
without the plugin behind smg, a worker's 5xx inside a 207, a worker smg times out, and a server
that is not smg at all. The gateway here is a fake app (no worker behind it: the worker URLs are only named) with smg's routes and answer shapes
(docs/engine-notes.md, smg); the real smg is in test_gateway_stub.py and test_gateway_real.py."""

from __future__ import annotations

import pytest
from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse

from client.servers import serve_app
from engine_plugins.client import Fleet

pytestmark = pytest.mark.anyio

WORKERS = {"w-a": "http://127.0.0.1:40001", "w-b": "http://127.0.0.1:40002", "w-c": "http://127.0.0.1:40003"}
LOADS = {"timestamp": "t", "version": "0.5.23", "loads": [{"dp_rank": 0, "num_running_reqs": 1, "num_waiting_reqs": 0, "num_total_reqs": 1}],
         "aggregate": {"total_running_reqs": 1, "total_waiting_reqs": 0, "total_reqs": 1},
         "in_flight": 1, "paused": False, "weight_version": "v1", "engine": "sglang", "in_flight_by_version": {"v1": 1}}


def fake_smg(seen: list) -> FastAPI:
    """smg's discovery and fan-out: w-a answers the contract, w-b is SGLang without the plugin
    (its native loads), w-c failed (a 500 on loads, unreachable otherwise)."""
    app = FastAPI()

    @app.get("/v1/rl/workers")
    async def workers():
        return {"protocol_version": 1, "total": 3, "workers": [
            {"id": i, "url": u, "engine": "sglang", "engine_version": "0.5.23", "health": "ready", "weight_version": None}
            for i, u in WORKERS.items()]}

    @app.api_route("/v1/rl/engine/{path:path}", methods=["GET", "POST"])
    async def fanout(path: str, request: Request):
        seen.append((request.method, path, dict(request.query_params), await request.body()))
        results = {"w-a": {"url": WORKERS["w-a"], "status": 200, "latency_ms": 3, "body": LOADS},
                   "w-b": {"url": WORKERS["w-b"], "status": 200, "latency_ms": 4, "body": {"loads": LOADS["loads"], "version": "0.5.23"}}}
        failed = [{"worker_id": "w-c", "url": WORKERS["w-c"], "error": "upstream_unreachable", "message": "connection refused", "status": None}]
        if path == "v1/loads":
            results["w-c"] = {"url": WORKERS["w-c"], "status": 500, "latency_ms": 1,
                              "body": {"error": {"message": "engine core died", "type": "internal_error"}}}
            failed = [{"worker_id": "w-c", "url": WORKERS["w-c"], "error": "upstream_error", "message": "HTTP 500", "status": 500}]
        return JSONResponse({"results": results, "failed": failed, "total": 3, "succeeded": 2}, status_code=207)

    return app


async def test_each_worker_has_its_own_result_whatever_smg_reports():
    seen: list = []
    with serve_app(fake_smg(seen)) as url:
        async with Fleet(gateway=url, api_key="k", selector="engine=sglang") as fleet:
            loads = await fleet.loads(timeout_s=5)
            resumed = await fleet.resume(timeout_s=5)
    a, b, c = loads.results
    assert [r.url for r in loads.results] == list(WORKERS.values())
    assert a.ok and a.value.in_flight == 1 and a.value.in_flight_by_version == {"v1": 1}
    assert not b.ok and b.kind == "protocol" and "is the plugin loaded" in b.error, b.error
    assert not c.ok and c.kind == "http" and "engine core died" in c.error, c.error
    assert resumed.results[2].kind == "unreachable" and "connection refused" in resumed.results[2].error
    method, path, query, body = seen[-1]
    assert (method, path, query, body) == ("POST", "resume", {"selector": "engine=sglang"}, b"{}")


async def test_a_server_that_is_not_smg_is_the_gateways_failure():
    app = FastAPI()
    app.get("/v1/rl/workers")(lambda: {"hello": "world"})
    with serve_app(app) as url:
        async with Fleet(gateway=url) as fleet:
            result = await fleet.pause("keep", timeout_s=5)
    (only,) = result.results
    assert only.url == url and only.kind == "not_found" and "--enable-rl" in only.error, only.error


def test_a_fleet_takes_urls_or_a_gateway():
    with pytest.raises(ValueError, match="not both"):
        Fleet(["http://a"], gateway="http://g")
    with pytest.raises(ValueError, match="at least one URL"):
        Fleet([])
