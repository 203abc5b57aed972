"""The docs' tables that come from code or from results, written into the pages between markers:

    <!-- generated: NAME (python -m tools.docs_tables) -->
    ...
    <!-- end generated: NAME -->

``python -m tools.docs_tables`` rewrites every block from its source; ``--check`` changes nothing
and exits 1 naming each block that is stale, unknown or missing. The sources: the configuration
table from ``engine_plugins/host/config.py``, the metrics table from
``engine_plugins/metrics/instruments.py``, the benchmark tables from ``benchmarks/results/*.json``
through ``benchmarks/report.py`` (the same tables as ``benchmarks/results/README.md``).
"""

from __future__ import annotations

import argparse
import dataclasses
import re
import sys
from pathlib import Path
from typing import Callable

REPO = Path(__file__).resolve().parent.parent
PAGES = (REPO / "README.md", *sorted((REPO / "docs").glob("*.md")))
BLOCK = re.compile(
    r"(<!-- generated: (?P<name>[\w/]+) \(python -m tools\.docs_tables\) -->\n)(?P<body>.*?)(<!-- end generated: (?P=name) -->)",
    re.DOTALL,
)


def _cell(text: str) -> str:
    """Text made safe for one markdown table cell."""
    return text.replace("|", "\\|").replace("\n", " ")


def _shown_default(value: object) -> str:
    """A setting's default as the configuration table shows it."""
    if value is None:
        return "unset"
    if value == "":
        return "empty"
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    return f"`{value}`"


def configuration_table() -> str:
    """Every ``ENGINE_PLUGINS_*`` variable the plugins read: its default and what it does."""
    from engine_plugins.host import config

    defaults = {f.name: f.default for f in dataclasses.fields(config.Settings)}
    rows = ["| variable | default | meaning |", "|---|---|---|"]
    for field_name, (var, _) in config._PARSERS.items():
        rows.append(f"| `{var}` | {_shown_default(defaults[field_name])} | {_cell(config.MEANINGS[var])} |")
    return "\n".join(rows)


def metrics_table() -> str:
    """Every metric of the metrics plugin: its name as scraped, type, labels and meaning."""
    from engine_plugins.metrics import instruments

    made = instruments.get()
    if made is None:
        raise SystemExit("the metrics table needs prometheus_client (pip install -e '.[test]')")
    rows = ["| metric | type | labels | what |", "|---|---|---|---|"]
    for field_name, what in instruments.DESCRIPTIONS.items():
        metric = getattr(made, field_name)
        # prometheus_client keeps a counter's name without the suffix every scrape shows.
        name = metric._name + ("_total" if metric._type == "counter" else "")
        labels = ", ".join(f"`{label}`" for label in metric._labelnames)
        rows.append(f"| `{name}` | {metric._type} | {labels} | {_cell(what)} |")
    return "\n".join(rows)


def benchmark_tables() -> dict[str, Callable[[], str]]:
    """One block per figure section of ``benchmarks/results/README.md``, named ``bench/<section>``."""
    from benchmarks import report

    cache: dict[str, str] = {}

    def section(name: str) -> Callable[[], str]:
        def make() -> str:
            if not cache:
                cache.update(report.sections())
            if name not in cache:
                raise SystemExit(f"no results for bench/{name} in benchmarks/results/")
            return cache[name]

        return make

    return {f"bench/{name}": section(name) for name in
            ("real_sglang", "real_vllm", "stub_scaling", "fleets", "vllm_api_servers", "prefix_cache", "step_boundary", "sglang_releases")}


def blocks() -> dict[str, Callable[[], str]]:
    """Every generated block, by name: the function that writes its text."""
    return {"configuration": configuration_table, "metrics": metrics_table, **benchmark_tables()}


def render(text: str, makers: dict[str, Callable[[], str]]) -> tuple[str, list[str]]:
    """*text* with every block rewritten, and the names of the blocks it holds."""
    found: list[str] = []

    def replace(match: re.Match) -> str:
        name = match["name"]
        found.append(name)
        if name not in makers:
            raise SystemExit(f"unknown generated block {name!r}: known are {', '.join(makers)}")
        return f"{match.group(1)}{makers[name]().rstrip()}\n{match.group(4)}"

    return BLOCK.sub(replace, text), found


def run(check: bool) -> list[str]:
    """Rewrite the pages (or, with *check*, only compare them); the problems found."""
    makers = blocks()
    problems, seen = [], []
    for page in PAGES:
        old = page.read_text()
        new, found = render(old, makers)
        seen += found
        if new != old:
            if check:
                stale = [n for n in found if render_one(old, n) != render_one(new, n)]
                problems.append(f"{page.relative_to(REPO)}: stale {', '.join(stale)}")
            else:
                page.write_text(new)
                print(f"rewrote {page.relative_to(REPO)}")
    problems += [f"block {name!r} is in no page" for name in makers if name not in seen]
    problems += [f"block {name!r} is in more than one place" for name in set(seen) if seen.count(name) > 1]
    return problems


def render_one(text: str, name: str) -> str:
    """The body of block *name* in *text*."""
    for match in BLOCK.finditer(text):
        if match["name"] == name:
            return match["body"]
    return ""


def main(argv: list[str] | None = None) -> int:
    """``python -m tools.docs_tables [--check]``."""
    parser = argparse.ArgumentParser(prog="python -m tools.docs_tables", description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 if a generated table is stale")
    args = parser.parse_args(argv)
    problems = run(args.check)
    for problem in problems:
        print(problem, file=sys.stderr)
    if problems and args.check:
        print("run `python -m tools.docs_tables` to rewrite them", file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
