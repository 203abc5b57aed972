"""Print doctor's report (see :mod:`.doctor`), or with ``--url`` what a running server's plugin
mounted (``GET /v1/engine_plugins``), and pick the exit code."""

from __future__ import annotations

import asyncio
from typing import Optional

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


def run_url(args, api_key: Optional[str]) -> int:
    """Ask the server at ``args.url`` what the plugin mounted (with *api_key*, from ``--api-key``
    or ``ENGINE_PLUGINS_API_KEY``); print it (or why it is absent).

    OK when the contract is mounted; PROBLEMS when the server answers without it (it says which
    engine the server looks like and what to set); FAILED when it cannot be reached, refuses the
    key or answers something else.
    """
    from engine_plugins.client.errors import ServerError
    from engine_plugins.client.mounted import check_mounted

    try:
        found = asyncio.run(check_mounted(args.url, api_key, args.timeout))
    except ServerError as exc:
        if args.json:
            print_json({"url": exc.url, "mounted": None, "error": exc.kind, "detail": exc.message, "exit_code": exit_codes.FAILED})
        else:
            print_text(f"{exc.url}: {exc.message}", err=True)
        return exit_codes.FAILED
    code = exit_codes.OK if found.mounted else exit_codes.PROBLEMS
    if args.json:
        print_json({**found.to_dict(), "exit_code": code})
        return code
    if found.info is None:
        print_text(f"not mounted: {found.detail}")
        return code
    info = found.info
    print_text(f"mounted: {found.detail}")
    server = f", API server {info.api_server_index} of {info.api_servers}" if info.api_servers > 1 else ""
    rows = [
        ["engine", f"{info.engine} {info.engine_version or ''}".strip() + (f" (supported: {info.supported})" if info.supported else "")],
        ["routes on", f"{info.app} (it answered: the server serves it)"],
        ["answered by", f"pid {info.pid}: {info.role}{server}"],
        ["routes", ", ".join(info.routes) or "none"],
        ["replaced", ", ".join(info.replaced) or "none"],
        ["shims", "; ".join(info.shims) or "none"],
    ]
    if info.kept_native:
        rows.append(["not mounted (engine's own kept)", ", ".join(info.kept_native)])
    if not info.ready:
        rows.append(["ready", "no: the engine is not up under the contract yet (its routes answer 503)"])
    print_table("what the plugin mounted", ["", ""], rows)
    print_table("per process", ["process", "pid", "installed", "seen by this process"],
                [[p.role, p.pid or "-", "; ".join(p.installed), "yes" if p.seen else "no: that process's log line says"]
                 for p in info.processes])
    print_table("settings", ["variable", "value"], [[k, v] for k, v in info.settings.items()])
    return code
