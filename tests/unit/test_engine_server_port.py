"""A test server that loses its free port to another process between the port's choice and its
own bind is launched again on a new port; any other start failure is raised at once."""

import sys
from dataclasses import replace
from pathlib import Path

import pytest

from engine_plugins.launcher.engine_server import EngineServer, EngineStartError


def server(tmp_path: Path, port=None) -> EngineServer:
    """An EngineServer whose launches the tests replace (no engine is started)."""
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    made = EngineServer("vllm", tmp_path, port=port, model_dir=model, log_path=tmp_path / "vllm.log")
    made.paths = replace(made.paths, python=Path(sys.executable))
    return made


def launches(monkeypatch, failures: list[bytes]) -> list[int]:
    """Replace the launch: each of the first launches logs one of *failures* and fails; the ports tried."""
    ports: list[int] = []

    def launch(self: EngineServer) -> EngineServer:
        ports.append(self.port)
        if len(ports) <= len(failures):
            with open(self.log_path, "ab") as log:
                log.write(failures[len(ports) - 1])
            raise EngineStartError("vllm server exited with code 1 before it was healthy")
        return self

    monkeypatch.setattr(EngineServer, "_launch", launch)
    return ports


def test_a_port_taken_before_the_bind_is_tried_again_on_a_new_one(tmp_path, monkeypatch):
    made = server(tmp_path)
    ports = launches(monkeypatch, [b"OSError: [Errno 98] Address already in use\n"])
    assert made.start() is made
    assert len(ports) == 2 and ports[0] != ports[1] and made.port == ports[1] and made.url.endswith(f":{ports[1]}")


def test_another_start_failure_is_raised_at_once(tmp_path, monkeypatch):
    made = server(tmp_path)
    # A port lost in an earlier launch of the same log does not count for this one.
    (tmp_path / "vllm.log").write_bytes(b"ERROR: [Errno 98] address already in use\n")
    ports = launches(monkeypatch, [b"RuntimeError: no model\n"])
    with pytest.raises(EngineStartError):
        made.start()
    assert len(ports) == 1


def test_a_port_the_caller_chose_is_kept(tmp_path, monkeypatch):
    made = server(tmp_path, port=1)
    ports = launches(monkeypatch, [b"ERROR: [Errno 98] address already in use\n"])
    with pytest.raises(EngineStartError):
        made.start()
    assert ports == [1]


def test_the_tries_are_bounded(tmp_path, monkeypatch):
    made = server(tmp_path)
    ports = launches(monkeypatch, [b"address already in use\n"] * 5)
    with pytest.raises(EngineStartError):
        made.start()
    assert len(ports) == 3
