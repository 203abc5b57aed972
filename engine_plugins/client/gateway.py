"""smg's RL control plane (``smg launch --enable-rl``) as the fleet's transport: the gateway lists
its workers (``GET /v1/rl/workers``) and fans one engine call out to every worker a selector
matches (``/v1/rl/engine/{path}?selector=...``), answering with one result per worker.

smg forwards the call verbatim (method, path, query, body) with each worker's own API key, so a
worker with the plugin answers the contract exactly as it would directly. The facts this relies
on are in ``docs/engine-notes.md`` (smg), with smg's file and line.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Optional


from engine_plugins.client.errors import FailureKind, ServerError
from engine_plugins.client.transport import HttpClient, Transport

DEFAULT_SELECTOR = "connection_mode=http"
"""Every worker smg can proxy a control call to: smg reports gRPC and ZMQ workers as failures."""

# smg's own answer must arrive after the workers' answers: the fan-out's HTTP deadline is the
# operation's plus this much.
GATEWAY_MARGIN_S = 1.0

# smg's error codes for a worker it could not call, as this client's failure kinds.
_FAILURE_KINDS: dict[str, FailureKind] = {
    "upstream_unreachable": "unreachable",
    "upstream_timeout": "timeout",
    "unsupported_connection_mode": "unsupported",
    "no_control_endpoint": "unsupported",
}


@dataclass(frozen=True)
class GatewayWorker:
    """One worker as smg's discovery lists it."""

    id: str
    url: str
    engine: str
    engine_version: Optional[str]
    health: str
    weight_version: Optional[str]


@dataclass
class WorkerAnswer:
    """One worker's part of a fan-out: its JSON answer, or why there is none."""

    worker_id: str
    url: str
    body: Any = None
    error: Optional[ServerError] = None
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        """The worker answered 2xx."""
        return self.error is None


class Gateway:
    """An smg gateway with its RL control plane mounted: ``Gateway(url, http)``.

    *selector* is smg's label selector (``engine=sglang``, ``id in (a,b)``, comma for AND) naming
    the workers every operation goes to; the default is every HTTP worker.
    """

    def __init__(self, url: str, http: HttpClient, selector: str = DEFAULT_SELECTOR) -> None:
        self.transport = Transport(url, http)
        self.url = self.transport.url
        self.selector = selector

    async def workers(self, timeout_s: float) -> list[GatewayWorker]:
        """Every worker smg lists (discovery), in smg's order."""
        data = await self.transport.call("GET", "/v1/rl/workers", timeout_s=timeout_s)
        if not isinstance(data, dict) or not isinstance(data.get("workers"), list):
            raise ServerError(self.url, "protocol", f"GET /v1/rl/workers: not smg's discovery answer ({str(data)[:80]!r}); "
                              "is this smg, started with --enable-rl?")
        return [
            GatewayWorker(str(w.get("id")), str(w.get("url")), str(w.get("engine")), w.get("engine_version"),
                          str(w.get("health")), w.get("weight_version"))
            for w in data["workers"] if isinstance(w, dict)
        ]

    async def fanout(
        self, method: str, path: str, body: Any, timeout_s: float, selector: Optional[str] = None
    ) -> list[WorkerAnswer]:
        """Send one engine call to every worker *selector* (default: the gateway's) matches,
        through smg; one answer per worker, sorted by URL. A worker that answered non-2xx or could
        not be called has its :class:`ServerError` (the worker's own message when it sent one).

        Raises :class:`ServerError` (for the gateway) when smg itself refuses or cannot be reached.
        """
        started = time.monotonic()
        params = {"selector": selector or self.selector}
        # smg answers 207 when some worker failed: that is still a fan-out answer, read below.
        try:
            data = await self.transport.call(method, f"/v1/rl/engine/{path.lstrip('/')}", body, params=params,
                                             timeout_s=timeout_s + GATEWAY_MARGIN_S)
        except ServerError as exc:
            if exc.kind == "not_found" and exc.status == 404:
                raise ServerError(self.url, "not_found", f"{method} /v1/rl/engine/{path}: smg has no RL control plane here; "
                                  "start it with --enable-rl", 404) from None
            raise
        if not isinstance(data, dict) or "results" not in data:
            raise ServerError(self.url, "protocol", f"{method} /v1/rl/engine/{path}: not smg's fan-out answer ({str(data)[:80]!r})")
        return _answers(data, time.monotonic() - started)


def _answers(data: dict, seconds: float) -> list[WorkerAnswer]:
    """Every worker of a fan-out answer, successes and failures alike, sorted by URL."""
    answers: dict[str, WorkerAnswer] = {}
    for worker_id, outcome in (data.get("results") or {}).items():
        url = str(outcome.get("url", ""))
        status = int(outcome.get("status", 0))
        latency = float(outcome.get("latency_ms", 0)) / 1000
        answer = WorkerAnswer(str(worker_id), url, outcome.get("body"), seconds=latency)
        if not 200 <= status < 300:
            answer.error = _worker_error(url, status, outcome.get("body"))
        answers[str(worker_id)] = answer
    for failure in data.get("failed") or []:
        worker_id = str(failure.get("worker_id", ""))
        if worker_id in answers:  # an engine's non-2xx: already read with its body
            continue
        url = str(failure.get("url", ""))
        code = str(failure.get("error", ""))
        kind = _FAILURE_KINDS.get(code, "http")
        answers[worker_id] = WorkerAnswer(worker_id, url, None, ServerError(
            url, kind, f"through smg: {code}: {failure.get('message', '')}", failure.get("status")), seconds)
    return sorted(answers.values(), key=lambda a: (a.url, a.worker_id))


def _worker_error(url: str, status: int, body: Any) -> ServerError:
    """A worker's non-2xx answer, forwarded by smg, as the error the worker would have raised directly."""
    message = str(body)[:200]
    if isinstance(body, dict):
        error = body.get("error")
        if isinstance(error, dict) and "message" in error:
            message = str(error["message"])
        elif body.get("error") or body.get("detail"):
            message = str(body.get("error") or body.get("detail"))
    if status in (401, 403):
        return ServerError(url, "unauthorized", f"-> {status} through smg: {message} (smg sends the worker's own --api-key)", status)
    if status == 404:
        return ServerError(url, "not_found", "-> 404 through smg: this worker has no such route (is the plugin loaded?)", status)
    return ServerError(url, "http", f"-> {status} through smg: {message}", status)
