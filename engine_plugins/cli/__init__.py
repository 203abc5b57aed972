"""The ``engine-plugins`` command: ``doctor``, ``loads``, ``abort``, ``pause``, ``resume``,
``version``, ``demo`` and ``patch``. Exit codes: :mod:`.exit_codes`."""

from __future__ import annotations

import argparse
import sys
from typing import Optional, Sequence

from engine_plugins.host.config import ConfigError, load_settings
from engine_plugins.contract.schema import DEFAULT_LEASE_S
from engine_plugins.cli import exit_codes

EPILOG = """exit codes: 0 ok; 1 some server failed (or the demo failed, or patch cannot apply); 2 usage or configuration error;
3 timed out (a server did not answer, or was not idle, by the deadline); 4 doctor found problems
(doctor --url: the server does not have the contract mounted).
The API key is --api-key, else ENGINE_PLUGINS_API_KEY."""


def build_parser() -> argparse.ArgumentParser:
    """The argument parser with every subcommand."""
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--json", action="store_true", help="print JSON for scripts instead of tables")
    keyed = argparse.ArgumentParser(add_help=False, parents=[common])
    keyed.add_argument("--api-key", default=None, help="bearer key for the servers (default: ENGINE_PLUGINS_API_KEY)")
    fleet = argparse.ArgumentParser(add_help=False, parents=[keyed])
    fleet.add_argument("--timeout", type=_seconds, default=30.0, metavar="S", help="one overall deadline in seconds (default 30)")
    fleet.add_argument("--gateway", default=None, metavar="URL",
                       help="an smg gateway started with --enable-rl: act on its workers through its fan-out "
                            "(instead of server URLs; --api-key is then the gateway's key)")
    fleet.add_argument("--selector", default=None, metavar="SEL",
                       help="with --gateway: smg's label selector for the workers, e.g. engine=sglang "
                            "(default: every HTTP worker)")

    parser = argparse.ArgumentParser(prog="engine-plugins", description="RL rollout control for SGLang and vLLM servers.",
                                     epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    p = sub.add_parser("doctor", parents=[common],
                       help="check this environment (engines, entry points, configuration), or with --url a running server")
    p.add_argument("--url", default=None, metavar="URL",
                   help="ask the server at URL what the plugin mounted there (GET /v1/engine_plugins) instead")
    p.add_argument("--api-key", default=None, help="with --url: bearer key for the server (default: ENGINE_PLUGINS_API_KEY)")
    p.add_argument("--timeout", type=_seconds, default=10.0, metavar="S", help="with --url: seconds per call (default 10)")
    p = sub.add_parser("loads", parents=[fleet], help="running/waiting/total requests per server")
    p.add_argument("urls", nargs="*", metavar="URL")
    p = sub.add_parser("abort", parents=[fleet], help="abort every request (or --ids, or the stale ones); --wait: until idle")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--wait", action="store_true",
                   help="wait until the aborted requests are released (with no selector: until every server is idle)")
    which = p.add_mutually_exclusive_group()
    which.add_argument("--ids", nargs="+", default=None, metavar="ID", help="abort exactly these request ids")
    which.add_argument("--admitted-before", default=None, metavar="V",
                       help="abort the requests admitted under a weight version older than V (needs the plugin)")
    which.add_argument("--max-staleness", type=_positive_int, default=None, metavar="K",
                       help="abort the requests admitted K or more version bumps ago (needs the plugin)")
    p = sub.add_parser("pause", parents=[fleet], help="pause generation")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--mode", choices=("abort", "keep"), default="abort", help="abort: return in-flight work now; keep: freeze it until resume")
    p.add_argument("--keep-kv", action="store_true",
                   help="keep mode: the frozen requests keep their KV (clear_cache false) instead of recomputing it on resume")
    p = sub.add_parser("resume", parents=[fleet], help="resume generation")
    p.add_argument("urls", nargs="*", metavar="URL")
    p = sub.add_parser("version", parents=[fleet], help="set the weight version (in-flight requests keep going)")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("new_version", metavar="NEW")
    p.add_argument("--abort-all", action="store_true", help="abort every request first")
    p = sub.add_parser("swap-begin", parents=[fleet], help="begin a weight swap: pause until swap-commit (needs the plugin)")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--version", required=True, metavar="V", help="the version the commit applies")
    p.add_argument("--mode", choices=("keep", "abort", "wait"), default="keep", help="the pause's mode (default keep)")
    p.add_argument("--keep-kv", action="store_true", help="keep mode: the frozen requests keep their KV (clear_cache false)")
    p.add_argument("--lease", type=_seconds, default=DEFAULT_LEASE_S, metavar="S",
                   help=f"seconds before an uncommitted swap is reported expired (default {DEFAULT_LEASE_S:g})")
    p = sub.add_parser("swap-commit", parents=[fleet], help="commit the open weight swap: apply its version, resume")
    p.add_argument("urls", nargs="*", metavar="URL")
    p.add_argument("--version", required=True, metavar="V", help="the open swap's version")
    p = sub.add_parser("demo", parents=[keyed], help="a short RL-style loop on a running server (make demo starts one)")
    p.add_argument("--url", required=True, help="the server to drive")
    p.add_argument("--samples", type=_positive_int, default=8, help="samples in the batch (default 8)")
    p.add_argument("--max-new-tokens", type=_positive_int, default=1024, help="tokens per sample (default 1024)")
    p.add_argument("--abort-after", type=_seconds, default=0.3, metavar="S", help="seconds of generation before the abort (default 0.3)")
    from engine_plugins.cli.patch_command import add_parser as add_patch_parser

    add_patch_parser(sub, [common])
    return parser


def _seconds(raw: str) -> float:
    try:
        value = float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number of seconds, got {raw!r}") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"expected a positive number of seconds, got {raw!r}")
    return value


def _positive_int(raw: str) -> int:
    try:
        value = int(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {raw!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected at least 1, got {raw!r}")
    return value


def _check_servers(parser: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """A fleet command names its servers or a gateway, one of the two (a usage error otherwise)."""
    if bool(args.urls) == (args.gateway is not None):
        parser.error(f"{args.command}: give the servers' URLs or --gateway URL (one of the two)")
    if args.selector is not None and args.gateway is None:
        parser.error(f"{args.command}: --selector needs --gateway")


def main(argv: Optional[Sequence[str]] = None) -> int:
    """Run the command; returns (and, as a console script, exits with) its exit code."""
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
        if hasattr(args, "gateway"):
            _check_servers(parser, args)
    except SystemExit as exc:  # argparse: --help exits 0, a usage error 2
        return int(exc.code or 0)
    if args.command == "doctor" and args.url is None:
        from engine_plugins.cli.doctor_command import run as run_doctor

        return run_doctor(args)
    if args.command == "patch":
        from engine_plugins.cli.patch_command import run as run_patch

        return run_patch(args)
    api_key = args.api_key
    if api_key is None:
        try:
            api_key = load_settings().api_key
        except ConfigError as exc:
            print(f"engine-plugins: {exc}", file=sys.stderr)
            return exit_codes.USAGE
    if args.command == "doctor":
        from engine_plugins.cli.doctor_command import run_url

        return run_url(args, api_key)
    if args.command == "demo":
        from engine_plugins.cli.demo import run as run_demo

        return run_demo(args, api_key)
    from engine_plugins.cli.fleet_commands import run as run_fleet

    return run_fleet(args, api_key)


if __name__ == "__main__":
    sys.exit(main())
