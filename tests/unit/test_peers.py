"""The link between API server processes: calls answered, failures named, every wait bounded."""

import asyncio

import pytest

from engine_plugins import peers as peers_module
from engine_plugins.peers import PeerError, Peers

pytestmark = pytest.mark.anyio


@pytest.fixture
def link(tmp_path):
    """Three processes of one server, all in this test's event loop."""
    return [Peers("srv", i, 3, directory=tmp_path) for i in range(3)]


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
        Peers("srv", 2, 2, directory=tmp_path)


def test_the_socket_directory_is_private_to_the_user(tmp_path, monkeypatch):
    monkeypatch.setattr(peers_module.tempfile, "gettempdir", lambda: str(tmp_path))
    made = peers_module.socket_dir()
    made.chmod(0o777)
    assert peers_module.socket_dir().stat().st_mode & 0o777 == 0o700, "a directory others could enter is closed again"
    made.rmdir()
    made.symlink_to(tmp_path)
    with pytest.raises(peers_module.StartupError, match="is not a directory of this user"):
        peers_module.socket_dir()
