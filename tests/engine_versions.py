"""The supported engine releases (requirements/engine-versions.txt), the refused ones the RL
frameworks pin (requirements/engine-refused.txt), and where their wheels are unpacked
(scripts/setup-engines.sh wheels), for the static probe and the per-version targets."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Release:
    """One supported release: engine, version, its wheel (``dist==version``), how it is tested."""

    engine: str
    version: str
    wheel: str
    tested: str
    """``pinned`` (full suite, real), ``real`` (smoke subset, real) or ``probe`` (static only)."""
    frameworks: tuple[str, ...] = ()
    """The RL frameworks whose releases pin or allow it."""

    def __str__(self) -> str:
        return f"{self.engine}@{self.version}"


def _rows(name: str) -> list[list[str]]:
    """The whitespace-separated columns of each line of ``requirements/<name>`` (comments and
    blank lines left out)."""
    lines = (REPO / "requirements" / name).read_text().splitlines()
    return [line.split() for line in lines if line.strip() and not line.startswith("#")]


SUPPORTED: list[Release] = [
    Release(engine, version, wheel, tested, tuple(f for f in frameworks.split(",") if f != "-"))
    for engine, version, wheel, tested, frameworks, *_ in _rows("engine-versions.txt")
]


@dataclass(frozen=True)
class RefusedRelease:
    """A release the plugin refuses at startup that an RL framework pins: its wheel is probed all
    the same, so that what it lacks is checked, and it may have a patch."""

    engine: str
    version: str
    wheel: str
    frameworks: tuple[str, ...]
    missing: int
    """How many of the plugin's required names the static probe finds missing in its wheel."""
    patched: bool
    """Whether ``patches/`` has its patch (the engine's own routes fixed without the plugin)."""
    served: bool = False
    """Whether its patched server runs here (a layered venv on a base venv, the last column)."""

    def __str__(self) -> str:
        return f"{self.engine}@{self.version}"


REFUSED: list[RefusedRelease] = [
    RefusedRelease(engine, version, wheel, tuple(frameworks.split(",")), int(missing), patched == "patch",
                   patched == "patch" and bool(base))
    for engine, version, wheel, frameworks, missing, patched, *base in _rows("engine-refused.txt")
]
# The refused releases whose patched server tests/patched/ runs, each only when named with
# --target <engine>@<version>-patched (make test-releases): they are no contract target.
PATCHED_TARGETS = {f"{r}-patched": r for r in REFUSED if r.served}
# Every release whose wheel the tests read: the supported ones and the refused ones.
PROBED = [*SUPPORTED, *REFUSED]


def wheels_dir() -> Path:
    """Where setup-engines.sh keeps the wheels (same rule as the script)."""
    override = os.environ.get("ENGINE_PLUGINS_WHEELS_DIR")
    if override:
        return Path(override)
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(cache) / "engine-plugins" / "wheels"


def wheel_source(release: Release | RefusedRelease) -> Path:
    """The unpacked .py files of *release*'s wheel."""
    dist = release.wheel.split("==")[0].replace("-", "_")
    return wheels_dir() / "src" / f"{dist}-{release.version}"


# The contract tests every non-pinned release runs on its real server (its target
# ``engine@version``): the fence, loads, a bump that keeps work (spans), a partial generation
# aborted mid-way, pause in keep and abort mode.
SMOKE = frozenset({
    "contract/test_abort.py::test_abort_all_covers_every_request_and_salvages_partial_tokens",
    "contract/test_abort.py::test_abort_by_id_is_exact_not_by_prefix",
    "contract/test_loads.py::test_loads_count_every_request_in_flight",
    "contract/test_weight_version.py::test_bump_keeps_in_flight_requests_and_attributes_later_tokens",
    "contract/test_partial_generate.py::test_generates_to_length_with_one_logprob_per_token",
    "contract/test_pause.py::test_pause_abort_returns_in_flight_work_and_refuses_new_work_until_resume",
    "contract/test_pause.py::test_pause_keep_holds_requests_and_continues_them_after_resume",
    "test_engine_versions.py::test_the_startup_log_names_the_version_and_its_shims",
    "contract/test_weight_swap.py::test_a_keep_swap_holds_the_requests_until_the_commit_which_applies_the_version_once",
    "sglang/test_sglang_weight_updates.py::test_an_in_place_pause_and_a_stock_disk_update_answer_200_with_one_version_and_keep_the_requests",
    # The engines' own tests of the routes the plugin replaces (drop-in, on every release).
    # (Their in-flight lifecycles run on the pinned engines: the smoke subset's pause tests above
    # cover each release's modes.)
    *(f"vllm/test_vllm_own_tests.py::{name}" for name in (
        "test_state_and_idempotency_across_cycles", "test_invalid_mode_preserves_state",
        "test_weight_info_initial_schema_and_update_is_visible", "test_weight_version_does_not_affect_generation",
        "test_invalid_update_preserves_state", "test_non_object_body_to_abort_requests_is_rejected",
        "test_valid_abort_body_is_vllms_answer")),
    *(f"sglang/test_sglang_own_tests.py::{name}" for name in (
        "test_abort_all", "test_batch_requests_with_selective_abort",
        "test_update_weight_version_is_seen_in_model_info_and_answers", "test_v1_loads_has_a_load_per_dp_rank")),
    # The engine as the frameworks launch it (frameworks/test_launchers.py) and their own calls there.
    "frameworks/test_launchers.py::test_the_contract_is_mounted_in_the_process_that_serves_and_says_so",
    "frameworks/test_launchers.py::test_a_bare_version_bump_keeps_every_request_in_flight",
    *(f"frameworks/test_slime.py::{name}" for name in (
        "test_slimes_abort_loop_declares_idle_in_one_round_with_nothing_left", "test_slimes_abort_loop_also_ends_requests_held_at_a_pause",
        "test_slime_reads_the_weight_version_from_get_weight_version",
        "test_slimes_pause_generation_aborts_running_requests_and_continue_lets_new_ones_run")),
    *(f"frameworks/test_skyrl.py::{name}" for name in (
        "test_skyrls_keep_pause_freezes_requests_that_finish_after_resume", "test_skyrls_wait_pause_drains_and_abort_pause_cuts")),
    *(f"frameworks/test_prime_rl.py::{name}" for name in (
        "test_prime_rls_keep_pause_answers_as_its_server_and_the_gauges_see_the_requests",
        "test_a_bump_and_an_abort_sent_to_one_api_process_of_prime_rls_server_cover_both")),
    *(f"frameworks/test_areal.py::{name}" for name in (
        "test_areals_pause_returns_with_every_running_request_out_and_continue_resumes",
        "test_areals_vllm_pause_aborts_every_running_request_with_its_tokens_and_the_resent_ones_finish",
        "test_a_contract_version_bump_keeps_areals_running_vllm_completions")),
    *(f"frameworks/test_miles.py::{name}" for name in (
        "test_miles_prefix_abort_aborts_exactly_that_adapters_requests_and_counts_them",
        "test_a_prefix_abort_that_names_no_prefix_is_a_400_saying_so",
        "test_miles_version_bump_keeps_in_flight_requests_and_answers_sglangs_fields",
        "test_miles_retract_pause_and_continue_let_running_requests_finish")),
})
VERSION_TARGETS = frozenset(str(r) for r in SUPPORTED if r.tested == "real")
# Those no framework pins run only when named (make test-releases), to keep make test in time.
OPT_IN_VERSION_TARGETS = frozenset(str(r) for r in SUPPORTED if r.tested == "real" and not r.frameworks)
# The targets that run only SMOKE: those, and the fake that follows vLLM 0.31 (its shims, fast).
SMOKE_ONLY = VERSION_TARGETS | {"vllm-0.31-stub", "sglang-spawned", "sglang-areal", "vllm-skyrl", "vllm-prime-rl", "vllm-areal"}
# The real servers of several API processes and of two DP ranks: the smoke subset and the tests
# about several front ends (FANOUT_TESTS); their fakes (vllm-stub-api3, sglang-stub-dp2) run the
# whole suite and its soaks, where the fan-out's races are. (The in-process targets run the whole
# contract suite: the contract must hold through the Python API.)
FANOUT_REAL = frozenset({"vllm-api2", "sglang-dp2"})
FANOUT_TESTS = ("contract/test_api_servers.py", "vllm/test_vllm_startup.py", "vllm/test_vllm_sleep.py",
                "sglang/test_sglang_dp.py", "frameworks/test_prime_rl.py")


def runs_on(target: str, nodeid: str) -> bool:
    """Whether the test with *nodeid* runs on *target*, as far as the smoke subset decides."""
    if in_smoke(nodeid) or target not in SMOKE_ONLY | FANOUT_REAL:
        return True
    return target in FANOUT_REAL and nodeid.split("tests/", 1)[-1].split("::", 1)[0] in FANOUT_TESTS


def in_smoke(nodeid: str) -> bool:
    """Whether the test with *nodeid* (``tests/...::name``, no parameters) is in :data:`SMOKE`."""
    return nodeid.split("tests/", 1)[-1].split("[", 1)[0] in SMOKE
