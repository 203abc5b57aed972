"""Output for the CLI: readable tables (rich when installed, plain text otherwise) or JSON."""

from __future__ import annotations

import json
import sys
from typing import Any, Callable, Optional, Sequence

try:  # rich is optional: the engines' own environments may not have it
    from rich.console import Console
    from rich.table import Table
except ImportError:  # pragma: no cover - depends on the environment
    Console = None  # type: ignore[assignment,misc]
    Table = None  # type: ignore[assignment,misc]


def print_json(data: Any) -> None:
    """One JSON document on stdout."""
    print(json.dumps(data, indent=2, default=str))


def print_table(title: str, headers: Sequence[str], rows: Sequence[Sequence[Any]]) -> None:
    """A table on stdout: rich's when available, aligned plain text otherwise."""
    cells = [["" if c is None else str(c) for c in row] for row in rows]
    if Console is not None:
        table = Table(title=title, title_justify="left")
        for header in headers:
            table.add_column(header, overflow="fold")
        for row in cells:
            table.add_row(*row)
        console().print(table)
        return
    widths = [max([len(h)] + [len(r[i]) for r in cells]) for i, h in enumerate(headers)]
    print(title)
    print("  ".join(h.ljust(w) for h, w in zip(headers, widths)))
    for row in cells:
        print("  ".join(c.ljust(w) for c, w in zip(row, widths)))


def print_text(text: str, err: bool = False) -> None:
    """A line of text (stderr with *err*)."""
    print(text, file=sys.stderr if err else sys.stdout)


_console: Optional[Any] = None


def console() -> Any:
    """The shared rich console (wide enough for URLs even when not a terminal)."""
    global _console
    if _console is None or _console.file is not sys.stdout:
        _console = Console(file=sys.stdout, width=None if sys.stdout.isatty() else 160)
    return _console


def has_rich() -> bool:
    """Whether rich is installed."""
    return Console is not None


Column = tuple[str, Callable[[Any], Any]]
