"""The results of every figure that has run: ``benchmarks/results/README.md`` (the markdown
tables) and one PNG plot per figure (matplotlib), from the raw JSON the figures wrote."""

from __future__ import annotations

import platform
import statistics
from pathlib import Path
from typing import Optional

from . import fleets, prefix_cache, step_boundary, stub_scaling
from .common import RESULTS, median_interval, read_json, stats
from .vllm_api_servers import summary as api_servers_table

ENGINES = ("sglang", "vllm")
WAYS = ("plugin abort with wait", "native loop, no plugin", "native loop, with plugin")


def _med(values: list[float]) -> float:
    return statistics.median(values) if values else float("nan")


def abort_table(data: dict) -> str:
    """Figures 1 and 2 of one engine: declared idle, last answer, x decode step, native loop's
    mistakes, tokens salvaged."""
    rows = ["| in flight | way | declared idle, median / p95 (ms) | last client's answer, median / p95 (ms) | x decode step "
            "| idle declared with clients unanswered | first poll saw requests | tokens salvaged |", "|---|---|---|---|---|---|---|---|"]
    for n, fig in data["abort"].items():
        step = _med(fig["decode_step_ms"])
        for way in WAYS:
            rs = fig["ways"][way]
            idle, last = stats(r["declared_idle_ms"] for r in rs), stats(r["last_answer_ms"] for r in rs)
            early = sum(r["clients_without_answer_at_idle"] > 0 for r in rs)
            first = "-" if way == WAYS[0] else f"{sum((r['first_poll_saw'] or 0) > 0 for r in rs)}/{len(rs)}"
            generated, received = sum(r["generated_tokens"] for r in rs), sum(r["received_tokens"] for r in rs)
            share = f"{100 * received / generated:.0f}%" if generated else "-"
            rows.append(f"| {n} | {way} | {idle['median']:.0f} / {idle['p95']:.0f} | {last['median']:.0f} / {last['p95']:.0f} "
                        f"| {idle['median'] / step:.1f} (step {step:.1f} ms) | {early}/{len(rs)} | {first} | {share} |")
    return "\n".join(rows)


def bump_and_overhead_table(data: dict) -> str:
    """Figures 3 and 4 of one engine."""
    rows = ["| figure | no plugin | plugin | plugin / no plugin |", "|---|---|---|---|"]
    if data.get("bump"):
        lost = {w: (sum(r["lost"] for r in rs), sum(r["requests"] for r in rs)) for w, rs in data["bump"].items()}
        rows.append(f"| 3. requests lost on a weight-version bump | {lost['native default'][0]}/{lost['native default'][1]} "
                    f"| {lost['plugin'][0]}/{lost['plugin'][1]} | - |")
    if data.get("overhead"):
        rows += overhead_rows(data["overhead"])
    return "\n".join(rows)


def throughput_ratio(o: dict) -> tuple[dict[str, float], float, tuple[float, float]]:
    """Figure 4's throughput: each way's median tokens/s, the median of the rounds' own plugin /
    no-plugin ratios, and that median's 95% interval."""
    ratios = [p["tokens_per_s"] / n["tokens_per_s"] for n, p in zip(o["native"], o["plugin"])]
    tput = {w: _med([r["tokens_per_s"] for r in o[w]]) for w in ("native", "plugin")}
    return tput, _med(ratios), median_interval(ratios)


def cpu_per(o: dict, key: str, unit: str) -> dict[str, float]:
    """Figure 4's CPU milliseconds *key* per *unit* (requests, tokens) for each way, over all
    rounds: /proc counts CPU time in 10 ms ticks, a tenth of one round's."""
    return {w: sum(r[key] for r in o[w]) / sum(r[unit] for r in o[w]) for w in ("native", "plugin")}


def overhead_rows(o: dict) -> list[str]:
    """Figure 4: throughput (the median of the rounds' own ratios, with its 95% interval), the
    CPU time per request and per token, one short request."""
    tput, ratio, (low, high) = throughput_ratio(o)
    rows = [f"| 4. throughput, {o['requests']} requests (tokens/s, median of {len(o['native'])} rounds) | {tput['native']:.0f} "
            f"| {tput['plugin']:.0f} | {ratio:.3f} (95% interval {low:.3f}-{high:.3f}) |"]
    if all("api_cpu_ms" in r for r in o["native"] + o["plugin"]):
        api, per_token = cpu_per(o, "api_cpu_ms", "requests"), cpu_per(o, "all_cpu_ms", "tokens")
        rows.append(f"| 4. the API server's CPU per request (ms, all rounds) | {api['native']:.2f} | {api['plugin']:.2f} "
                    f"| {api['plugin'] - api['native']:+.2f} ms |")
        rows.append(f"| 4. all the server's CPU per generated token (ms, all rounds) | {per_token['native']:.3f} "
                    f"| {per_token['plugin']:.3f} | {per_token['plugin'] / per_token['native']:.3f} |")
    short = {w: _med([r["short_ms"] for r in o[w]]) for w in ("native", "plugin")}
    rows.append(f"| 4. one short request (ms, median) | {short['native']:.1f} | {short['plugin']:.1f} "
                f"| {short['plugin'] - short['native']:+.1f} ms |")
    return rows


def plots() -> list[Path]:
    """One PNG per figure that has data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    made = []
    for engine in ENGINES:
        data = read_json(f"real_{engine}")
        if not data or not data.get("abort"):
            continue
        fig, ax = plt.subplots(figsize=(7, 4))
        counts = list(data["abort"])
        for way in WAYS:
            ax.plot(counts, [_med([r["declared_idle_ms"] for r in data["abort"][n]["ways"][way]]) for n in counts], "o-", label=way)
        ax.plot(counts, [_med(data["abort"][n]["decode_step_ms"]) for n in counts], "k--", label="one decode step")
        ax.set(yscale="log", xlabel="requests in flight", ylabel="ms (median)", title=f"{engine}: abort to idle")
        ax.legend(fontsize=8)
        made.append(_save(fig, f"abort_to_idle_{engine}.png"))
    scaling = read_json("stub_scaling")
    if scaling:
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = [r["in_flight"] for r in scaling["rows"]]
        for op in stub_scaling.OPS:
            for view, style in (("server", "o-"), ("client", "s--")):
                if all(view in r for r in scaling["rows"]):
                    ax.plot(xs, [_med(r[view][op]) for r in scaling["rows"]], style, label=f"{op} ({view})")
        ax.set(xscale="log", yscale="log", xlabel="requests in flight", ylabel="ms (median)", title="stub: cost per call vs in flight")
        ax.legend(fontsize=7)
        made.append(_save(fig, "stub_scaling.png"))
    fleet = read_json("fleets")
    if fleet:
        fig, ax = plt.subplots(figsize=(7, 4))
        xs = [r["servers"] for r in fleet["rows"]]
        for way in ("client", "smg"):
            if all(r[way] for r in fleet["rows"]):
                ax.plot(xs, [_med(fleets.series(r[way])) for r in fleet["rows"]], "o-", label=way)
        ax.set(xscale="log", xlabel="stub servers", ylabel="abort until idle, ms (median)", title="fleets")
        ax.legend()
        made.append(_save(fig, "fleets.png"))
    api = read_json("vllm_api_servers")
    if api:
        fig, ax = plt.subplots(figsize=(7, 4))
        labels = [str(r["api_servers"]) for r in api["runs"]]
        for key, label in (("abort_ms", "abort with wait"), ("last_answer_ms", "last answer")):
            ax.plot(labels, [_med([x[key] for x in r["rounds"]]) for r in api["runs"]], "o-", label=label)
        ax.set(xlabel="vLLM API processes", ylabel="ms (median)", title="vLLM: several API processes")
        ax.legend()
        made.append(_save(fig, "vllm_api_servers.png"))
    boundary = read_json("step_boundary")
    if boundary:
        made.append(_save(step_boundary_plot(plt, boundary), "step_boundary.png"))
    return made


def step_boundary_plot(plt, data: list[dict]):
    """Figure 9: per engine, each row's boundary time (median, p95 as the whisker), the bar marked
    with the steps it lost samples in or failed."""
    colors = {"no plugin": "tab:red", "plugin": "tab:blue", "contract": "tab:green"}
    fig, axes = plt.subplots(1, len(data), figsize=(6 * len(data), 5), squeeze=False)
    for ax, figure in zip(axes[0], data):
        labels, medians, whiskers, shades, marks = [], [], [], [], []
        for row in figure["rows"]:
            times = [s["boundary_ms"] for s in row["steps"] if s["boundary_ms"] is not None]
            s = stats(times)
            labels.append(f"{row['framework']} ({row['mode']})")
            medians.append(s.get("median", 0))
            whiskers.append(s.get("p95", 0) - s.get("median", 0))
            shades.append(colors[row["mode"]])
            failed = sum(1 for x in row["steps"] if x["failures"])
            lost = sum(x["lost"] for x in row["steps"])
            marks.append(f"failed {failed}/{len(row['steps'])}, lost {lost}")
        ys = list(range(len(labels)))
        ax.barh(ys, medians, xerr=[[0] * len(ys), whiskers], color=shades)
        for y, median, mark in zip(ys, medians, marks):
            ax.text(median, y, f"  {mark}", va="center", fontsize=7)
        ax.set_yticks(ys, labels, fontsize=7)
        ax.invert_yaxis()
        # From 10 ms on both panels, so that a bar's length compares across the engines.
        ax.set(xscale="log", xlim=(10, None), xlabel="boundary, ms (median; whisker p95)", title=f"{figure['engine']}: the step boundary")
    return fig


def _save(fig, name: str) -> Path:
    path = RESULTS / name
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return path


def releases_table(data: list[dict]) -> str:
    """Figure 10: figure 4 per SGLang release (throughput and CPU per token, plugin / no plugin)."""
    rows = ["| release | throughput, no plugin / plugin (tokens/s, median) | plugin / no plugin (95% interval) "
            "| the API server's CPU per request, no plugin / plugin (ms) | all the server's CPU per token, plugin / no plugin |", "|---|---|---|---|---|"]
    for figure in data:
        o = figure["overhead"]
        tput, ratio, (low, high) = throughput_ratio(o)
        api, per_token = cpu_per(o, "api_cpu_ms", "requests"), cpu_per(o, "all_cpu_ms", "tokens")
        rows.append(f"| {figure['release']} | {tput['native']:.0f} / {tput['plugin']:.0f} | {ratio:.3f} "
                    f"({low:.3f}-{high:.3f}) | {api['native']:.2f} / {api['plugin']:.2f} | {per_token['plugin'] / per_token['native']:.3f} |")
    return "\n".join(rows)


def markdown(command: Optional[str] = None) -> str:
    """Every table, with the machine and the command."""
    parts = ["# Benchmark results", "",
             f"Machine: {_cpu()}, {_cores()} cores, Python {platform.python_version()}, {platform.system()} {platform.release()}."]
    if command:
        parts.append(f"Command: `{command}`.")
    for section in sections().values():
        parts += ["", section]
    return "\n".join(parts) + "\n"


def sections() -> dict[str, str]:
    """The tables of each figure that has results, under its heading, by name (``real_sglang``,
    ``real_vllm``, ``stub_scaling``, ``fleets``, ``vllm_api_servers``, ``prefix_cache``,
    ``step_boundary``): the results' README and the docs' benchmarks page both show these."""
    out: dict[str, list[str]] = {}
    for engine in ENGINES:
        data = read_json(f"real_{engine}")
        if data:
            parts = [f"## {engine}: figures 1-4 ({data['rounds']} rounds)", ""]
            if data.get("abort"):
                parts += ["Figures 1 and 2, abort to idle and tokens salvaged:", "", abort_table(data), ""]
            out[f"real_{engine}"] = parts + [bump_and_overhead_table(data)]
    scaling = read_json("stub_scaling")
    if scaling:
        out["stub_scaling"] = [f"## Figure 5: stub, one step every {scaling['step_s']} s, median / p95 (ms), {scaling['rounds']} rounds", "",
                               stub_scaling.table(scaling)]
    fleet = read_json("fleets")
    if fleet:
        out["fleets"] = [f"## Figure 6: fleets of stubs (one step every {fleet.get('step_s', 0.004)} s), {fleet['requests_per_server']} requests each, {fleet['rounds']} rounds", "", fleets.table(fleet)]
    api = read_json("vllm_api_servers")
    if api:
        how = ", both servers up and the rounds alternating" if api.get("alternating") else ", one server after the other"
        out["vllm_api_servers"] = [f"## Figure 7: vLLM with several API processes, {api['requests']} requests, {len(api['runs'][0]['rounds'])} rounds{how}",
                                   "", api_servers_table(api["runs"])]
    prefix = read_json("prefix_cache")
    if prefix:
        out["prefix_cache"] = [f"## Figure 8: the prefix cache scoped by weight version and not, {prefix[0]['rounds']} rounds alternating "
                               f"(a round: a bump, {prefix[0]['groups']} prompts of {prefix[0]['prompt_tokens']} tokens sharing "
                               f"{prefix[0]['system_tokens']}, {prefix[0]['samples']} samples each, then the last round's prompt again)",
                               "", prefix_cache.table(prefix)]
    boundary = read_json("step_boundary")
    if boundary:
        first = boundary[0]
        parts = [f"## Figure 9: the step boundary, framework by framework ({first['rounds']} steps per row, rows "
                 f"interleaved per step; a step: {first['batch']} + {first['oversample']} requests, max_new_tokens lognormal "
                 f"around {first['max_new_tokens']['median']} capped at {first['max_new_tokens']['cap']}, the boundary once "
                 f"{first['batch']} have finished)"]
        for figure in boundary:
            parts += ["", f"### {figure['engine']} ({figure['seconds']:.0f} s with the servers' start)", "",
                      step_boundary.table(figure), "", "What failed first, per row and kind:", "",
                      *(step_boundary.first_failures(figure) or ["- nothing"])]
        out["step_boundary"] = parts
    releases = read_json("sglang_releases")
    if releases:
        o = releases[0]["overhead"]
        out["sglang_releases"] = [f"## Figure 10: SGLang's figure 4 per release ({o['requests']} requests, "
                                  f"{len(o['native'])} rounds alternating per release)",
                                  "", releases_table(releases)]
    return {name: "\n".join(parts) for name, parts in out.items()}


def _cpu() -> str:
    """The CPU's model name (Linux), else the architecture."""
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.machine()


def _cores() -> int:
    import os

    return len(os.sched_getaffinity(0))


def write(command: Optional[str] = None) -> list[Path]:
    """Write the markdown and the plots; the paths written."""
    RESULTS.mkdir(parents=True, exist_ok=True)
    path = RESULTS / "README.md"
    path.write_text(markdown(command))
    return [path, *plots()]


if __name__ == "__main__":
    for p in write():
        print(p)
