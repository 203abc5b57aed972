"""Third-party plugins: loaded from the `engine_plugins` entry-point group, narrowed by an allowlist,
checked at startup, and asked before the engine's own answers."""

import sys
import textwrap

import pytest

from engine_plugins.host.config import Settings
from engine_plugins.contract.errors import StartupError
from engine_plugins.host.dispatch import first_answer
from engine_plugins.host.plugins import make_plugin_manager
from engine_plugins.contract.schema import PauseState

pytestmark = pytest.mark.anyio


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch):
    """Install a real distribution with an `engine_plugins` entry point on sys.path."""

    def install(module_source: str, name: str = "my_plugin") -> str:
        (tmp_path / f"{name}.py").write_text(textwrap.dedent(module_source))
        dist = tmp_path / f"{name}-1.0.dist-info"
        dist.mkdir()
        (dist / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\n")
        (dist / "entry_points.txt").write_text(f"[engine_plugins]\n{name} = {name}\n")
        monkeypatch.syspath_prepend(str(tmp_path))
        monkeypatch.delitem(sys.modules, name, raising=False)
        return name

    return install


class Control:
    """Just enough of a RolloutControl for the engine's own is_paused."""

    def is_paused(self):
        return PauseState(is_paused=False)


async def is_paused(pm):
    return await first_answer(pm, "is_paused", {"control": Control(), "http_request": None})


async def test_an_allowed_plugin_answers_before_the_engine(installed_plugin):
    installed_plugin(
        """
        from engine_plugins import hookimpl

        @hookimpl
        async def is_paused():
            return {"is_paused": True, "mode": "keep"}
        """
    )
    pm = make_plugin_manager(Settings(plugins=frozenset({"my_plugin"})))
    assert await is_paused(pm) == {"is_paused": True, "mode": "keep"}


async def test_the_allowlist_narrows_what_loads(installed_plugin):
    installed_plugin("raise RuntimeError('must not be imported')\n")
    pm = make_plugin_manager(Settings(plugins=frozenset({"someone_else"})))
    assert await is_paused(pm) == PauseState(is_paused=False)


def test_a_misspelled_hook_stops_startup_with_its_name(installed_plugin):
    installed_plugin(
        """
        from engine_plugins import hookimpl

        @hookimpl
        def abort_request(request_ids):
            return None
        """
    )
    with pytest.raises(StartupError, match="abort_request"):
        make_plugin_manager(Settings())


def test_a_plugin_that_fails_to_import_stops_startup_with_its_name(installed_plugin):
    installed_plugin("import no_such_module_anywhere\n", name="broken_plugin")
    with pytest.raises(StartupError, match="broken_plugin"):
        make_plugin_manager(Settings())


def test_a_wrapper_stops_startup_with_its_name(installed_plugin):
    installed_plugin(
        """
        from engine_plugins import hookimpl

        @hookimpl(wrapper=True)
        def loads():
            return (yield)
        """,
        name="wrapping_plugin",
    )
    with pytest.raises(StartupError, match="wrapping_plugin.*'loads' is a wrapper"):
        make_plugin_manager(Settings())


def test_the_engine_answers_last_and_the_metrics_plugin_is_on_unless_the_allowlist_leaves_it_out():
    pm = make_plugin_manager(Settings())
    assert pm.get_plugin("metrics") is not None
    order = [impl.plugin_name for impl in reversed(pm.hook.abort.get_hookimpls())]
    assert order == ["metrics", "engine"]
    assert make_plugin_manager(Settings(plugins=frozenset({"other"}))).get_plugin("metrics") is None
