"""After a test fails, the target's shared server is made usable again, or restarted.

Every test of a target shares one server (a real engine takes a minute to start). A test that
fails may leave it paused, with a swap open or requests in flight; an engine may even have
stopped answering. The next tests would then fail for the wrong reason, each after its own
timeouts: one wedged server once cost a whole CI run. So after a failure the server is resumed
and aborted to idle, and if it cannot be, it is stopped, and the next test starts a new one.
"""

from __future__ import annotations

from typing import Optional

import httpx

from targets import Target

# A server that answers a control call slower than this after a failed test is taken as wedged.
ANSWER_S = 30.0
ABORT_WAIT_S = 60.0


def make_usable(target: Target, answer_s: float = ANSWER_S) -> Optional[str]:
    """Resume *target* and abort what it still runs, waiting until it is idle; None when it is
    then idle and not paused, else why it is not (the caller restarts it)."""
    exited = target.process.poll() if target.process is not None else None
    if exited is not None:
        return f"its server exited with {exited}"
    headers = {"Authorization": f"Bearer {target.api_key}"}
    try:
        with httpx.Client(base_url=target.url, headers=headers, timeout=answer_s) as http:
            steps = [
                ("POST", "/resume", None, answer_s),
                ("POST", "/abort_requests", {"wait": True, "timeout_s": ABORT_WAIT_S}, ABORT_WAIT_S + answer_s),
            ]
            for method, path, body, timeout_s in steps:
                response = http.request(method, path, json=body, timeout=timeout_s)
                if response.status_code != 200:
                    return f"{method} {path} answered {response.status_code}: {response.text[:200]}"
            loads = http.get("/v1/loads").json()
    except httpx.HTTPError as exc:
        return f"it did not answer: {exc!r}"
    if loads.get("paused") or loads.get("in_flight"):
        return f"it is not idle and resumed after a resume and an abort with wait: {loads}"
    return None
