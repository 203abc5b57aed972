"""The gateway tier's checks, the same for the stub pair and the real SGLang + vLLM pair: smg
discovers the workers and parses their ``/v1/loads``, and one fan-out of each contract operation
through ``/v1/rl/engine/...`` reaches every worker, reports per worker, and has its effect on each
engine (checked on the engine itself, not only in smg's report)."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Optional

import httpx

from contract.api import DEADLINE_S, Api
from engine_plugins.contract.schema import LoadsResult
from targets import Target

from .smg_loads import WorkerLoadResponse
from .smg_server import SmgGateway

SELECTOR = "connection_mode=http"


class Smg:
    """Calls smg's routes with its key."""

    def __init__(self, gateway: SmgGateway) -> None:
        self.gateway = gateway
        self.http = httpx.AsyncClient(base_url=gateway.url, headers=gateway.headers(), timeout=httpx.Timeout(300.0, connect=30.0))

    async def __aenter__(self) -> "Smg":
        return self

    async def __aexit__(self, *exc: Any) -> None:
        await self.http.aclose()

    async def get(self, path: str) -> dict:
        """GET one of smg's own routes; fails the test on any status but 200."""
        response = await self.http.get(path)
        assert response.status_code == 200, f"smg GET {path} -> {response.status_code} {response.text}\n{self.gateway.log_tail()}"
        return response.json()

    async def fanout(self, method: str, path: str, body: Any = None, query: Optional[dict] = None) -> dict[str, dict]:
        """One fan-out through ``/v1/rl/engine/{path}``: asserts smg's 200 with every worker
        succeeded; returns each worker's outcome (status, body) by worker URL."""
        params = {**(query or {}), "selector": SELECTOR}
        response = await self.http.request(method, f"/v1/rl/engine/{path}", params=params, json=body)
        assert response.status_code == 200, f"fan-out {method} {path} -> {response.status_code} {response.text}"
        report = response.json()
        assert report["failed"] == [] and report["total"] == report["succeeded"] == len(self.gateway.worker_urls), report
        by_url = {outcome["url"]: outcome for outcome in report["results"].values()}
        assert sorted(by_url) == sorted(self.gateway.worker_urls), report
        return by_url

    async def parsed_loads(self) -> dict[str, dict]:
        """smg's own parsed view of each worker's /v1/loads (``GET /get_loads``), by worker URL."""
        return {rank["worker"]: rank for rank in (await self.get("/get_loads"))["loads"]}


async def check_discovery(smg: Smg, expected: list[tuple[str, Target]]) -> None:
    """``GET /v1/rl/workers`` lists every worker, ready, with the engine smg detected (*expected*:
    ``(engine, target)`` pairs)."""
    listed = {w["url"]: w for w in (await smg.get("/v1/rl/workers"))["workers"]}
    assert sorted(listed) == sorted(t.url for _, t in expected), listed
    for engine, target in expected:
        worker = listed[target.url]
        assert worker["health"] == "ready" and worker["connection_mode"] == "http", worker
        assert worker["engine"] == engine, worker


async def check_loads_accepted(smg: Smg, workers: list[Target]) -> None:
    """With one generation running on each worker, smg's parsed load state shows it on each: smg
    read the plugin's ``/v1/loads`` (a refused answer is remembered as "no loads endpoint" and
    leaves the worker out of ``/get_loads``)."""
    apis = [Api(t) for t in workers]
    gens = [asyncio.create_task(api.generate(t.long_tokens, request_id=f"smg-loads-{i}")) for i, (api, t) in enumerate(zip(apis, workers))]
    try:
        for api in apis:
            await api.wait_in_flight(1)
        end = time.monotonic() + DEADLINE_S
        while True:
            parsed = await smg.parsed_loads()
            if all(parsed.get(t.url, {}).get("num_total_reqs", 0) >= 1 for t in workers):
                break
            assert time.monotonic() < end, f"smg never showed the running requests: {parsed}\n{smg.gateway.log_tail()}"
            await asyncio.sleep(0.2)
        for t in workers:
            rank = parsed[t.url]
            assert rank["num_running_reqs"] + rank["num_waiting_reqs"] == rank["num_total_reqs"] >= 1, rank
    finally:
        for api in apis:
            await api.ok("POST", "/abort_requests", {"wait": True})
        await asyncio.gather(*gens, return_exceptions=True)
        for api in apis:
            await api.__aexit__()


async def check_fanouts(smg: Smg, workers: list[Target]) -> None:
    """One fan-out each of abort with wait, loads, version bump, pause and resume."""
    apis = {t.url: Api(t) for t in workers}
    try:
        # Abort with wait: each worker's running generation comes back cancelled, each is idle.
        gens = {t.url: asyncio.create_task(apis[t.url].generate(t.long_tokens, request_id="smg-abort")) for t in workers}
        for api in apis.values():
            await api.wait_in_flight(1)
        aborted = await smg.fanout("POST", "abort_requests", {"wait": True})
        for url, outcome in aborted.items():
            body = outcome["body"]
            assert outcome["status"] == 200 and body["aborted"] == 1 and body["idle"] and not body["timed_out"], outcome
            partial = await gens[url]
            assert partial["cancelled"] and partial["finish_reason"] == "abort" and partial["cancel_reason"] == "abort", partial
            assert (await apis[url].loads())["in_flight"] == 0

        # Loads: every worker's contract answer, which smg's schema accepts too.
        loads = await smg.fanout("GET", "v1/loads")
        for url, outcome in loads.items():
            answer = LoadsResult.model_validate(outcome["body"])
            WorkerLoadResponse.model_validate(outcome["body"])
            assert answer.in_flight == 0 and not answer.paused, outcome

        # Version bump: each engine now stamps the new version.
        new = f"smg-{time.monotonic_ns()}"
        bumped = await smg.fanout("POST", "update_weight_version", {"new_version": new, "abort_all_requests": False})
        for url, outcome in bumped.items():
            assert outcome["body"]["success"] and outcome["body"]["new_version"] == new, outcome
            assert (await apis[url].loads())["weight_version"] == new

        # Pause, then resume: each engine's own /is_paused says so.
        paused = await smg.fanout("POST", "pause", {"mode": "keep"})
        for url, outcome in paused.items():
            # vLLM's answer also keeps vLLM's own "status" (docs/vllm.md).
            assert {k: outcome["body"][k] for k in ("is_paused", "mode")} == {"is_paused": True, "mode": "keep"}, outcome
            assert (await apis[url].ok("GET", "/is_paused")) == {"is_paused": True, "mode": "keep"}
        resumed = await smg.fanout("POST", "resume", {})
        for url, outcome in resumed.items():
            assert {k: outcome["body"][k] for k in ("is_paused", "mode")} == {"is_paused": False, "mode": None}, outcome
            assert (await apis[url].ok("GET", "/is_paused")) == {"is_paused": False, "mode": None}
    finally:
        for api in apis.values():
            await api.ok("POST", "/resume")
            await api.__aexit__()
