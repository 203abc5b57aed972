"""Print doctor's report (see :mod:`.doctor`) and pick the exit code."""

from __future__ import annotations

from engine_plugins.cli import exit_codes
from engine_plugins.cli.doctor import diagnose
from engine_plugins.cli.render import print_json, print_table, print_text


def run(args) -> int:
    """Diagnose, print tables or JSON; PROBLEMS when any problem was found."""
    report = diagnose()
    code = exit_codes.PROBLEMS if report.problems else exit_codes.OK
    if args.json:
        print_json({**report.to_dict(), "exit_code": code})
        return code
    print_text(f"engine-plugins {report.package_version} in {report.python}")
    print_table("engines", ["engine", "installed", "distribution", "version", "supported", "shims"],
                [[e["engine"], "yes" if e["installed"] else "no", e["distribution"], e["version"], e["supported"],
                  "; ".join(e.get("shims", [])) or "-"] for e in report.engines])
    print_table("entry points (name engine_plugins)", ["group", "registered", "target", "enabled", "why"],
                [[e["group"], "yes" if e["registered"] else "no", e["target"], "yes" if e["enabled"] else "no", e["why"]] for e in report.entry_points])
    print_table("effective configuration", ["variable", "value"], [[k, v] for k, v in report.config.items()])
    if report.third_party_plugins:
        print_table("third-party plugins", ["name", "target", "loaded"], [[p["name"], p["target"], p["loaded"]] for p in report.third_party_plugins])
    for note in report.notes:
        print_text(f"note: {note}")
    if report.problems:
        print_table(f"{len(report.problems)} problem(s)", ["problem", "fix"], [[p["problem"], p["fix"]] for p in report.problems])
    else:
        print_text("no problems found")
    return code
