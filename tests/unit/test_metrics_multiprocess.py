"""The metrics plugin under prometheus_client's multiprocess mode, the way SGLang serves /metrics:
``PROMETHEUS_MULTIPROC_DIR`` set before prometheus_client is imported, and a scrape that reads only
what the processes wrote to that directory (no callbacks, no in-process registry)."""

import os
import subprocess
import sys
import textwrap

SCRIPT = textwrap.dedent(
    """
    import asyncio
    import httpx
    from engine_plugins.host.config import Settings
    from engine_plugins.engines.stub.engine import StubEngine
    from engine_plugins.engines.stub.server import create_app
    from prometheus_client import CollectorRegistry, generate_latest, multiprocess

    def scrape():
        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)  # as SGLang's add_prometheus_middleware
        return generate_latest(registry).decode()

    async def main():
        app = create_app(StubEngine(step_s=0.001), Settings())
        transport = httpx.ASGITransport(app=app)
        async with httpx.AsyncClient(transport=transport, base_url="http://stub", timeout=60) as http:
            body = {"input_ids": [1], "sampling_params": {"max_new_tokens": 100000}}
            task = asyncio.create_task(http.post("/partial_generate", json=body))
            while (await http.get("/v1/loads")).json()["aggregate"]["total_running_reqs"] < 1:
                await asyncio.sleep(0.01)
            await http.get("/is_paused")  # any contract call refreshes the gauges
            during = scrape()
            await http.post("/update_weight_version", json={"new_version": "v2", "abort_all_requests": True})
            await task
            after = scrape()
        print(during + "=====" + after)

    asyncio.run(main())
    """
)


def test_metrics_reach_a_multiprocess_scrape(tmp_path):
    env = {k: v for k, v in os.environ.items() if not k.startswith("ENGINE_PLUGINS_")}
    env["PROMETHEUS_MULTIPROC_DIR"] = str(tmp_path)
    proc = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    during, after = proc.stdout.split("=====")
    assert "engine_plugins_requests_in_flight 1.0" in during
    assert 'engine_plugins_weight_version{version="default"} 1.0' in during
    assert 'engine_plugins_requests_aborted_total{reason="weight_version",route="/update_weight_version"} 1.0' in after
    assert "engine_plugins_partial_generations_cancelled_total 1.0" in after
    assert "engine_plugins_weight_version_updates_total 1.0" in after
    assert 'engine_plugins_weight_version{version="v2"} 1.0' in after
    assert 'engine_plugins_weight_version{version="default"} 0.0' in after, "a replaced version stays, at 0"
    assert "engine_plugins_requests_in_flight 0.0" in after
    assert "Removal of labels" not in proc.stderr
