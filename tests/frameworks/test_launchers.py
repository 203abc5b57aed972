"""The engine as the frameworks launch it serves the contract: SGLang spawned from a Ray actor as
a ``multiprocessing`` child running ``launch_server`` by slime's, miles' and NeMo-RL's launch code
(``frameworks/spawned_sglang.py``), where the plugin once mounted nothing and a bare version bump
aborted every request again, and SGLang started by AReaL's own launch module, which calls SGLang's
private set-up functions instead of ``launch_server`` (``frameworks/areal_sglang_server.py``).
The pinned server and its fake, started by hand, run the same tests.
"""

from __future__ import annotations

import asyncio
import re
import uuid

import pytest

from contract.api import Api
from engine_plugins.client.mounted import check_mounted
from engine_plugins.host.http_api import CONTRACT_ROUTES
from targets import doctor_url

from .native import client, sglang_generate

pytestmark = [pytest.mark.anyio, pytest.mark.targets("sglang", "sglang-stub", "sglang-spawned", "sglang-areal")]


async def test_the_contract_is_mounted_in_the_process_that_serves_and_says_so(target):
    async with Api(target) as api:
        paused = await api.http.get("/is_paused")
        loads = await api.loads()
    assert paused.status_code == 200 and paused.json()["is_paused"] is False, paused.text
    assert "in_flight" in loads, "/v1/loads is SGLang's own: the contract is not mounted"
    # What doctor --url reads (GET /v1/engine_plugins), and the one startup line per process that says the same.
    found = await check_mounted(target.url, target.api_key)
    info = found.info
    assert found.mounted and info.engine == "sglang" and info.app.endswith("http_server.app"), found
    report = await asyncio.to_thread(doctor_url, target)
    assert report["exit_code"] == 0 and report["mounted"] and report["info"]["pid"] == info.pid, report
    # The whole contract: every route of it is on the app this server serves.
    missing = [f"{r.method} {r.path}" for r in CONTRACT_ROUTES if f"{r.method} {r.path}" not in info.routes]
    assert not missing and "GET /v1/engine_plugins" in info.routes, missing
    assert any("TokenizerManager." in p for p in info.processes[0].installed)
    if target.name == "sglang-spawned":
        # slime's, miles' and NeMo-RL's launch code spawns the process that serves.
        assert "multiprocessing child of pid" in info.role, info.role
    log = target.log_tail()
    # The HTTP server process: one line saying what it mounted, on which app, in which process.
    mounted = [line for line in log.splitlines() if re.search(r"engine_plugins: SGLang \S+.*: contract mounted on ", line)]
    assert len(mounted) == 1 and f"in pid {info.pid} ({info.role})" in mounted[0], log[-3000:]
    if target.real and tuple(map(int, info.engine_version.split("."))) >= (0, 5, 22):
        # SGLang's scheduler process, which the plugin hooks from 0.5.22 on: its own line, its own pid.
        scheduler = [line for line in log.splitlines() if re.search(r"engine_plugins: SGLang \S+ scheduler pid", line)]
        assert len(scheduler) == 1 and "Scheduler.abort_request" in scheduler[0], log[-3000:]


async def test_a_bare_version_bump_keeps_every_request_in_flight(target):
    n, version = 6, f"bare-{uuid.uuid4().hex[:8]}"
    async with client(target) as http, Api(target) as api:
        tasks = [sglang_generate(http, target.finish_tokens) for _ in range(n)]
        await api.wait_in_flight(n, running=True)
        # SGLang's own default aborts every request here (abort_all_requests=True).
        response = await http.post("/update_weight_version", json={"new_version": version})
        response.raise_for_status()
        outs = await asyncio.gather(*tasks)
    assert response.json()["success"] is True
    assert [o["meta_info"]["finish_reason"]["type"] for o in outs] == ["length"] * n
    assert all(o["meta_info"]["weight_version"] == version for o in outs), "later tokens carry the new version"
