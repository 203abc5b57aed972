"""Generations held in flight from a process of their own, for the figures that time a control
call with many requests in flight: ``python -m benchmarks.hold_requests URL...``.

Commands on stdin, one per line: ``fill K`` sends K more long ``/partial_generate`` requests to
every URL and answers ``sent`` once they are all written; ``quit`` answers ``done <answered>
<failed>`` and exits. Each request has a connection of its own and its answer is read and
dropped, so that the process timing the control call neither holds ten thousand connections nor
spends its event loop on the answers an abort releases. The process runs niced: on a machine
with few cores, the server and the timed client come first.

The requests are written by hand on plain asyncio streams (HTTP/1.1, ``Connection: close``): an
HTTP client library costs more per request than the stub's own handling of it.
"""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import uuid
from urllib.parse import urlsplit

from .common import KEY, REPO

# Connections opened at once: ten thousand at a time overflow the server's listen backlog, and
# the dropped connects wait for the kernel's retries.
BATCH = 500
BODY = {"input_ids": [1, 15, 27], "sampling_params": {"max_new_tokens": 100_000}}


class Holder:
    """The requests this process holds, and how their answers went."""

    def __init__(self, urls: list[str]) -> None:
        self.addresses = [(u.hostname or "127.0.0.1", u.port or 80) for u in map(urlsplit, urls)]
        self.answered = 0
        self.failed = 0
        self.tasks: set[asyncio.Task] = set()

    async def fill(self, per_server: int) -> None:
        """Send *per_server* more requests to every server; return once all are written."""
        pending = [address for address in self.addresses for _ in range(per_server)]
        for i in range(0, len(pending), BATCH):
            written = []
            for host, port in pending[i:i + BATCH]:
                sent = asyncio.get_running_loop().create_future()
                task = asyncio.ensure_future(self._one(host, port, sent))
                self.tasks.add(task)
                task.add_done_callback(self.tasks.discard)
                written.append(sent)
            await asyncio.gather(*written)

    async def _one(self, host: str, port: int, sent: asyncio.Future) -> None:
        try:
            reader, writer = await asyncio.open_connection(host, port)
            body = json.dumps({**BODY, "request_id": f"held-{uuid.uuid4().hex}"}).encode()
            writer.write(
                f"POST /partial_generate HTTP/1.1\r\nHost: {host}:{port}\r\nAuthorization: Bearer {KEY}\r\n"
                f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode() + body
            )
            await writer.drain()
        except OSError:
            self.failed += 1
            sent.set_result(None)
            return
        sent.set_result(None)
        try:
            answer = await reader.read()
            self.answered += answer.startswith(b"HTTP/1.1 200")
            self.failed += not answer.startswith(b"HTTP/1.1 200")
        except OSError:
            self.failed += 1
        finally:
            writer.close()


class HeldRequests:
    """The timing side: this module in a process of its own, holding requests on *urls*."""

    def __init__(self, urls: list[str]) -> None:
        self.proc = subprocess.Popen([sys.executable, "-m", "benchmarks.hold_requests", *urls], cwd=REPO,
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)

    def _command(self, line: str) -> str:
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.proc.stdin.write(line + "\n")
        self.proc.stdin.flush()
        answer = self.proc.stdout.readline().strip()
        if not answer:
            raise RuntimeError(f"the request holder exited ({self.proc.poll()}) on {line!r}")
        return answer

    async def fill(self, per_server: int) -> None:
        """Send *per_server* more long generations to every server (returns once written)."""
        await asyncio.to_thread(self._command, f"fill {per_server}")

    def close(self) -> tuple[int, int]:
        """Wait for the requests' answers (abort them first) and stop: (answered 200, failed)."""
        try:
            _, answered, failed = self._command("quit").split()
            return int(answered), int(failed)
        finally:
            self.proc.wait(30)

    def __enter__(self) -> "HeldRequests":
        return self

    def __exit__(self, *exc: object) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait()


async def serve(urls: list[str]) -> None:
    """Answer the commands on stdin until ``quit``."""
    holder = Holder(urls)
    loop = asyncio.get_running_loop()
    while True:
        line = (await loop.run_in_executor(None, sys.stdin.readline)).split()
        if not line or line[0] == "quit":
            await asyncio.gather(*holder.tasks, return_exceptions=True)
            print(f"done {holder.answered} {holder.failed}", flush=True)
            return
        if line[0] == "fill":
            await holder.fill(int(line[1]))
            print("sent", flush=True)


def main() -> None:
    """Serve the commands for the URLs on the command line."""
    os.nice(10)
    asyncio.run(serve(sys.argv[1:]))


if __name__ == "__main__":
    main()
