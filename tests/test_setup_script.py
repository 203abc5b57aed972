"""The set-up scripts' pip calls work with the pip this machine has, so that a first run with
empty caches does not stop on a usage error that every warm run skips (pip 23.2's `download` has
no --root-user-action, while its `install` has).

Cheap: it reads the scripts and asks pip for each subcommand's options; nothing is installed."""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from functools import cache
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
SCRIPTS = [REPO / "scripts" / "setup-engines.sh", REPO / "Makefile"]
# `<anything>pip SUBCOMMAND ...` or `python -m pip SUBCOMMAND ...`, up to the end of the command.
PIP_CALL = re.compile(r"(?:^|[\s\"'/)])pip\"?\s+(install|download|uninstall|check|show)\b([^|;&\n]*)")


def pip_calls(text: str) -> list[tuple[str, list[str]]]:
    """Every pip call in *text*: its subcommand and the options it passes (``--name`` or ``-x``).

    Comment lines are skipped; continuation lines are joined first."""
    text = text.replace("\\\n", " ")
    calls = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for match in PIP_CALL.finditer(line):
            try:
                words = shlex.split(match.group(2), comments=True)
            except ValueError:  # an unbalanced quote of the surrounding shell code
                words = match.group(2).split()
            options = [w.split("=", 1)[0] for w in words if re.fullmatch(r"--?[A-Za-z][-A-Za-z]*(=.*)?", w)]
            calls.append((match.group(1), options))
    return calls


@cache
def accepted_options(subcommand: str) -> str:
    """The help text of ``pip SUBCOMMAND`` of the pip in use (the one the scripts run by default)."""
    return subprocess.run([sys.executable, "-m", "pip", subcommand, "--help"], capture_output=True,
                          text=True, check=True).stdout


def test_the_parser_sees_the_calls_and_options_it_must_check():
    calls = pip_calls('"$PYTHON" -m pip download -q --no-deps -d "$DIR" "$spec" 2>&1\n'
                      '# pip install --not-checked\n'
                      '"$venv/bin/pip" uninstall -y -q torchvision || true\n')
    assert calls == [("download", ["-q", "--no-deps", "-d"]), ("uninstall", ["-y", "-q"])]


@pytest.mark.parametrize("script", SCRIPTS, ids=lambda p: p.name)
def test_every_option_a_script_passes_to_pip_is_one_that_subcommand_accepts(script):
    calls = pip_calls(script.read_text())
    assert calls, f"no pip call found in {script.name}: the parser no longer matches the script"
    unknown = [(sub, option) for sub, options in calls for option in options
               if not re.search(rf"(^|[\s,]){re.escape(option)}([\s,=]|$)", accepted_options(sub), re.M)]
    assert unknown == [], f"{script.name} passes options that this pip does not accept: {unknown}"


def test_the_setup_script_passes_no_pip_option_through_a_shared_array():
    # A shared array of flags is how --root-user-action reached `pip download`: each call spells out
    # its own options, so that the test above sees them.
    text = (REPO / "scripts" / "setup-engines.sh").read_text()
    assert not re.search(r"pip\"?\s+\w+[^\n]*\"\$\{[A-Z_]*FLAGS", text)


def test_the_engine_set_up_sees_no_python_path_venv_or_install_changing_pip_variable_of_its_caller(tmp_path):
    """``make demo`` runs the set-up with PYTHONPATH at the checkout, whose egg-info then looked like
    a half-installed engine-plugins to the vLLM venv's ``pip check``: the set-up runs in an
    environment of its own."""
    leaking = {"PYTHONPATH": str(REPO), "PYTHONHOME": str(tmp_path / "home"), "VIRTUAL_ENV": str(REPO / ".venv"),
               "PIP_USER": "1", "PIP_NO_DEPS": "1", "PIP_TARGET": str(tmp_path / "target"), "ENGINE_PLUGINS_ROUTE_PREFIX": "/x"}
    kept = {"PIP_FIND_LINKS": str(tmp_path / "wheels"), "PIP_CACHE_DIR": str(tmp_path / "pip-cache"),
            "XDG_CACHE_HOME": str(tmp_path / "cache"), "ENGINE_PLUGINS_ENGINES_DIR": str(tmp_path / "engines"),
            "HOME": str(tmp_path), "PATH": os.environ["PATH"]}
    done = subprocess.run([str(REPO / "scripts" / "clean-env.sh"), "env"], env={**leaking, **kept},
                          capture_output=True, text=True, check=True)
    seen = dict(line.split("=", 1) for line in done.stdout.splitlines())
    assert seen == kept


def test_the_engine_set_up_runs_itself_in_that_environment():
    text = (REPO / "scripts" / "setup-engines.sh").read_text()
    code = [line for line in text.splitlines() if not line.lstrip().startswith("#")]
    first = next(i for i, line in enumerate(code) if "clean-env.sh" in line)
    # Before anything else the script does (only `set` comes earlier).
    assert all(line.strip() in ("", "set -Eeuo pipefail") or line.startswith("if [[ -z ${ENGINE_PLUGINS_SETUP_CLEAN")
               for line in code[1:first]), code[:first]


def test_the_fresh_machine_check_runs_the_readmes_first_commands_in_the_readmes_order():
    readme = (REPO / "README.md").read_text()
    table = readme.split("<!-- first-run:", 1)[1].split("\n\n", 1)[0]
    commands = re.findall(r"^\| `([^`]+)` \|", table, re.M)
    script = (REPO / "scripts" / "fresh-machine-check.sh").read_text()
    steps = re.findall(r"^(?:if \(\( FULL \)\); then )?step \S+ (.+?)(?:; fi)?$", script, re.M)
    assert commands[:2] == ["make demo", "make demo ENGINE=sglang"], "the README's first command is make demo"
    assert steps == commands, (steps, commands)
    # Every first run is a measured time, not a blank left to fill.
    assert not re.search(r"\b(FIRST|DISK)_[A-Z_]+\b", table), table
