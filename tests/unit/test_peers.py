"""The link between API server processes: calls answered, failures named, every wait bounded,
every call keyed, no socket of a live server taken over, no call run after its caller gave up."""

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from engine_plugins.fanout import peers as peers_module
from engine_plugins.contract.errors import StartupError
from engine_plugins.fanout.peers import Link, PeerError, Peers, PeerSilent

pytestmark = pytest.mark.anyio


@pytest.fixture
def tmp_path():
    """A short private directory instead of pytest's: a socket's path has at most 107 bytes, which
    pytest's own passes under pytest-xdist (``.../popen-gw0/<test name>/``)."""
    with tempfile.TemporaryDirectory(prefix="peers-") as directory:
        yield Path(directory)


@pytest.fixture
def link(tmp_path):
    """Three processes of one server, all in this test's event loop."""
    link = Link.new()
    return [Peers(link, i, 3, directory=tmp_path) for i in range(3)]


async def test_a_call_reaches_every_other_process_with_its_arguments(link):
    seen = []

    async def echo(index, **args):
        seen.append((index, args))
        return {"from": index, **args}

    for p in link[1:]:
        await p.listen({"echo": lambda p=p, **args: echo(p.index, **args)})
    answers = await link[0].call_all("echo", 1.0, x=[1, 2], y=None)
    assert sorted(a["from"] for a in answers) == [1, 2]
    assert all(a["x"] == [1, 2] and a["y"] is None for a in answers)
    assert sorted(i for i, _ in seen) == [1, 2]
    for p in link[1:]:
        await p.close()


async def test_a_process_that_is_not_listening_holds_nothing_and_is_left_out(link):
    async def one(**_):
        return 1

    await link[1].listen({"one": one})  # process 2 has not started (no socket), or has stopped
    assert await link[0].call_all("one", 1.0) == [1]
    await link[1].close()
    assert not link[1].path(1).exists(), "a stopped process removes its socket"
    assert await link[0].call_all("one", 1.0) == []


async def test_a_failed_operation_is_an_error_naming_the_process(link):
    async def broken(**_):
        raise RuntimeError("no engine")

    await link[2].listen({"op": broken})
    with pytest.raises(PeerError, match=r"process 2 of 3 failed 'op': RuntimeError: no engine"):
        await link[0].call_all("op", 1.0)
    with pytest.raises(PeerError, match="KeyError"):
        await link[0].call_all("unknown", 1.0)
    await link[2].close()


async def test_a_process_that_does_not_answer_in_time_is_an_error_not_a_hang(link, monkeypatch):
    monkeypatch.setattr(peers_module, "ANSWER_MARGIN_S", 0.05)
    release = asyncio.Event()

    async def stuck(**_):
        await release.wait()

    await link[1].listen({"op": stuck})
    with pytest.raises(PeerError, match=r"process 1 of 3 did not answer 'op' within 0\.1"):
        await asyncio.wait_for(link[0].call_all("op", 0.05), 5)
    release.set()
    await link[1].close()


def test_an_index_outside_the_server_is_refused(tmp_path):
    with pytest.raises(ValueError, match="not in 0..1"):
        Peers(Link.new(), 2, 2, directory=tmp_path)


def test_the_socket_directory_is_private_to_the_user(tmp_path, monkeypatch):
    monkeypatch.setattr(peers_module.tempfile, "gettempdir", lambda: str(tmp_path))
    made = peers_module.socket_dir()
    made.chmod(0o777)
    assert peers_module.socket_dir().stat().st_mode & 0o777 == 0o700, "a directory others could enter is closed again"
    made.rmdir()
    made.symlink_to(tmp_path)
    with pytest.raises(peers_module.StartupError, match="is not a directory of this user"):
        peers_module.socket_dir()


async def test_a_call_without_the_servers_key_is_refused_and_runs_nothing(link, tmp_path, caplog):
    ran = []

    async def pause(**args):
        ran.append(args)
        return "paused"

    await link[1].listen({"pause": pause})
    # Another server of the same user that knows the socket's path, with a key of its own.
    intruder = Peers(Link(link[1].link.name, Link.new().key), 0, 3, directory=tmp_path)
    with pytest.raises(PeerError, match="process 1 of 3 failed 'pause': refused: the call does not carry this server's key"):
        await intruder.call_all("pause", 1.0, mode="abort")
    # A process that writes to the socket itself, without a key or with a key of another type.
    for call in ({"op": "pause", "args": {"mode": "abort"}}, {"op": "pause", "args": {}, "key": 7}):
        reader, writer = await asyncio.open_unix_connection(str(link[1].path(1)))
        writer.write(json.dumps(call).encode() + b"\n")
        answer = json.loads(await reader.readline())
        writer.close()
        assert answer == {"error": "refused: the call does not carry this server's key"}
    assert ran == [], "a call without the key ran"
    assert await link[0].call_all("pause", 1.0, mode="keep") == ["paused"]
    assert ran == [{"mode": "keep"}]
    await link[1].close()


async def test_a_live_processs_socket_is_never_taken_over_and_a_dead_ones_is(link, tmp_path):
    async def one(**_):
        return 1

    await link[1].listen({"one": one})
    # A second server given the same name (or a process of the same server started twice).
    twin = Peers(link[1].link, 1, 3, directory=tmp_path)
    with pytest.raises(StartupError, match="is the socket of a live process; not taking it over"):
        await twin.listen({"one": one})
    assert await link[0].call_all("one", 1.0) == [1], "the live process's socket was removed"
    # A socket file left by a process that died (nothing listens on it any more) is replaced.
    left = link[2].path(2)
    with socket.socket(socket.AF_UNIX) as dead:
        dead.bind(str(left))
    await link[2].listen({"one": one})
    assert await link[0].call_all("one", 1.0) == [1, 1]
    for p in link[1:]:
        await p.close()


def test_each_server_gets_a_link_of_its_own_from_its_parent(monkeypatch):
    monkeypatch.setattr(peers_module, "_handed_out", None)
    parent = 4_000_000  # not a pid of this machine: the variable is set for this test only
    made = peers_module.hand_out(parent)
    try:
        assert peers_module.hand_out(parent) == made, "vLLM loads its plugins more than once per process"
        assert peers_module.handed(parent) == made and peers_module.handed(parent + 1) is None
    finally:
        monkeypatch.delenv(peers_module.LINK_ENV.format(pid=parent))
    # Two servers started alike (same parent pid inside two containers, same port) differ.
    code = "from engine_plugins.fanout.peers import hand_out; print(hand_out(1).encode())"
    links = {subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout for _ in range(2)}
    assert len(links) == 2


LISTENER = textwrap.dedent("""
    import asyncio, sys
    from pathlib import Path
    from engine_plugins.fanout.peers import Link, Peers

    async def main():
        ran = []

        async def change(**_):
            ran.append("change")
            return "changed"

        async def record(**_):
            return ran

        peers = Peers(Link(sys.argv[1], sys.argv[2]), 1, 2, directory=Path(sys.argv[3]))
        await peers.listen({"change": change, "record": record})
        print("listening", flush=True)
        await asyncio.Event().wait()

    asyncio.run(main())
""")


async def test_a_call_that_reaches_a_stopped_process_after_its_caller_gave_up_is_not_run(link, tmp_path, monkeypatch):
    monkeypatch.setattr(peers_module, "ANSWER_MARGIN_S", 0.3)
    monkeypatch.setattr(peers_module, "START_WITHIN_S", 0.15)
    key = link[0].link
    process = subprocess.Popen([sys.executable, "-c", LISTENER, key.name, key.key, str(tmp_path)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert process.stdout.readline() == "listening\n"
        process.send_signal(signal.SIGSTOP)
        answers = await link[0].call_each("change", 0.1)
        assert isinstance(answers[1], PeerSilent) and "did not answer 'change' within 0.4 s" in str(answers[1])
        process.send_signal(signal.SIGCONT)
        # The stopped process reads the call once it runs again, and must not run it.
        monkeypatch.setattr(peers_module, "START_WITHIN_S", 5.0)
        assert await link[0].call_all("record", 1.0) == [[]], "the call ran after its caller gave up"
    finally:
        process.kill()
        _, err = process.communicate()
    assert "too late to start" in err, err
