"""``engine-plugins patch --check | --apply``: the patch in ``patches/`` for the installed engine
(see :mod:`engine_plugins.engines.patching`), checked as a dry run or applied, and what it changed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from engine_plugins.engines import patching
from engine_plugins.cli import exit_codes
from engine_plugins.cli.render import print_json, print_table, print_text


def add_parser(sub, parents) -> None:
    """The ``patch`` subcommand's arguments."""
    p = sub.add_parser("patch", parents=parents, help="check or apply the engine patch (patches/) for the installed engine")
    action = p.add_mutually_exclusive_group(required=True)
    action.add_argument("--check", action="store_true", help="dry run: say whether the patch applies, change nothing")
    action.add_argument("--apply", action="store_true", help="apply the patch to the installed engine")
    p.add_argument("--engine", choices=tuple(patching.DISTRIBUTIONS), default=None,
                   help="the engine to patch (default: the only one installed)")
    p.add_argument("--python", default=None, metavar="PATH",
                   help="the engine's interpreter, e.g. its venv's bin/python (default: this one)")
    p.add_argument("--patches-dir", type=Path, default=patching.PATCHES_DIR, metavar="DIR",
                   help=f"where the patches are (default {patching.PATCHES_DIR})")


def run(args: argparse.Namespace) -> int:
    """Find the engine and its patch, check or apply it, print the report. OK when the patch
    applies, was applied or is already applied; FAILED when it cannot be (no engine, no patch for
    the version, a conflict)."""
    try:
        engine = patching.select_engine(patching.installed_engines(args.python), args.engine)
        patch = patching.patch_for(engine.engine, engine.version, args.patches_dir)
        report = patching.apply(engine, patch) if args.apply else patching.check(engine, patch)
    except patching.PatchError as exc:
        if args.json:
            print_json({"error": str(exc), "exit_code": exit_codes.FAILED})
        else:
            print(f"engine-plugins patch: {exc}", file=sys.stderr)
        return exit_codes.FAILED
    code = exit_codes.FAILED if report.state == "conflict" else exit_codes.OK
    if args.json:
        print_json({**report.to_dict(), "exit_code": code})
        return code
    print_table("engine patch", ["engine", "version", "installed in", "patch", "state"],
                [[engine.engine, engine.version, str(engine.site), patch.name, report.state]])
    print_table("files" if not report.changed else "files changed", ["file"], [[f] for f in report.files])
    print_text({
        "applies": "the patch applies cleanly; nothing was changed (run with --apply to apply it)",
        "applied": f"applied: {len(report.changed)} file(s) changed; restart the engine to use them "
                   f"(undo: patch -p1 -R -d {engine.site} -i {patch})",
        "already-applied": "the patch is already applied; nothing was changed",
        "conflict": f"the patch does not apply to this install (is it modified?); nothing was changed:\n{report.output}",
    }[report.state])
    return code
