"""The report of a replay: the lines the command prints, and an HTML page with Plotly charts,
self-contained (plotly.js inlined, no CDN). Both give each policy's figures, what it does with
each job's Idle Resources mode, and queueing by job size, by quota and by mode."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from .engine import POLICIES, Result
from .metrics import LARGE_WAIT_TARGET, delays, utilization_series

# Philly's own scheduler on the same trace (acmetrace_cluster_summary.csv, row Philly): shown
# only for a trace on Philly's virtual clusters (philly_vc_nodes.csv), whatever their sizes.
PHILLY_REFERENCE = {"name": "Philly's own scheduler (AcmeTrace summary)", "jobs": 112_956,
                    "mean": 3760.604, "median": 189.0}
PHILLY_VCS = frozenset({"6214e9", "7f04ca", "11cb48", "b436b2", "ee9e8c", "e13805", "6c71a0",
                        "2869ce", "ed69ec", "103959", "0e4a51"})
BREAKDOWNS = (("total", ""), ("size", "GPUs "), ("quota", "quota "), ("mode", "mode "))
CDF_POINTS = 2000
COLORS = {"strict": "#1f77b4", "borrow": "#ff7f0e", "borrow-ckpt": "#2ca02c", "elastic": "#9467bd"}
DASHES = {"strict": "solid", "borrow": "dash", "borrow-ckpt": "dot", "elastic": "dashdot"}  # lines often coincide


def reference_for(vc_names) -> dict | None:
    """The figures of the trace's own scheduler, where the trace is one we know them for."""
    return PHILLY_REFERENCE if set(vc_names) == PHILLY_VCS else None


def policy_notes(results: list[Result], summaries: list[dict]) -> list[str]:
    """One line a policy: what it does with each job's mode, and the modes it replayed; then
    why two policies replayed alike, where they did."""
    notes = [f"{s['policy']}: {_mode_rule(s)}; replayed as {_counts(s['modes'])}"
             for s in summaries]
    by_name = dict(zip((r.policy for r in results), zip(results, summaries)))
    if "strict" in by_name:
        for name in ("borrow", "borrow-ckpt"):
            if name in by_name and _same_rows(by_name["strict"][0], by_name[name][0]):
                notes.append(f"{name} replayed every job as strict did — "
                             f"{_why_alike(by_name['strict'][1], by_name[name][1])}")
    if "elastic" in by_name:
        notes.append("elastic: every job of more than one GPU (not spot) is an elastic data-parallel job of "
                     "one-GPU workers, at least half of them (rounded up), at most all; work scales with the "
                     "GPUs held, and a resize restarts it from its last checkpoint with no start-up time")
    return notes


def backfill_rule(summaries: list[dict]) -> str:
    if summaries and summaries[0].get("backfill"):
        return ("backfill on: the head job of each VC's queue that does not fit reserves the nodes where it "
                "fits earliest, and the jobs behind it must not delay it")
    return "backfill off: smaller jobs pass a head job that does not fit"


def _mode_rule(s: dict) -> str:
    policy, traced = POLICIES[s["policy"]], s["jobs_with_trace_mode"]
    if not policy.keeps_trace_mode:
        rule = f"every job {policy.mode} (its quota's guarantee only)"
        return rule + (f"; the trace's own mode of {_jobs(traced)} is not used" if traced
                       else "")
    if traced == s["jobs_replayed"]:
        return "the trace's own mode kept for every job"
    if traced:
        return f"the trace's own mode kept for {_jobs(traced)}, {policy.mode} for the others"
    return f"every job {policy.mode} (its quota's guarantee, then idle capacity)"


def _jobs(n: int) -> str:
    return f"{n:,} job" + ("" if n == 1 else "s")


def _counts(modes: dict) -> str:
    return " · ".join(f"{mode} {n:,}" for mode, n in modes.items()) or "no jobs"


def _same_rows(a: Result, b: Result) -> bool:
    def rows(result):
        return sorted((r.job.job_id, r.first_start, r.end, r.preemptions) for r in result.jobs)
    return rows(a) == rows(b)


def _why_alike(strict: dict, other: dict) -> str:
    if strict["modes"] == other["modes"]:
        return "every job has the same mode under both"
    if not other["jobs_run_not_in_quota"]:
        return "no job needed capacity beyond its quota (none ran Not in Quota)"
    if not strict["queueing_delay_s"]["max"]:
        return ("capacity never ran short: every job started when it was submitted, in its "
                "quota or on idle capacity alike")
    return "the jobs that borrowed started and ended when they would have in their quota"


def text_report(results: list[Result], summaries: list[dict],
                reference: dict | None = None) -> list[str]:
    """The lines the replay command prints."""
    lines = [summary_line(s) for s in summaries]
    if reference:
        lines.append(f"{reference['name']}: jobs {reference['jobs']:,} | queueing mean "
                     f"{reference['mean']:,.0f} s, median {reference['median']:,.0f} s")
    lines += policy_notes(results, summaries)
    lines.append(backfill_rule(summaries))
    lines += [large_job_line(s) for s in summaries]
    lines.append("")
    lines += breakdown_lines(summaries)
    return lines


def summary_line(s: dict) -> str:
    q = s["queueing_delay_s"]
    return (f"{s['policy']:12} jobs {s['jobs_replayed']:,} (skipped {s['jobs_skipped']}) | "
            f"queueing mean {q['mean']:,.0f} s, median {q['median']:,.0f} s, "
            f"p95 {q['p95']:,.0f} s | utilization {s['gpu_utilization']:.1%} "
            f"(useful {s['gpu_utilization_useful']:.1%}) | "
            f"preemptions {s['preemptions']:,}, GPU-hours lost {s['gpu_hours_lost']:,.1f}, "
            f"goodput {s['goodput']:.1%}{_resizes(s)} | "
            f"wall {s['wall_seconds']:.0f} s ({s['cycles']:,} cycles, "
            f"plan {s['plan_seconds']:.0f} s)")


def large_job_line(s: dict) -> str:
    """How much longer jobs of 8 GPUs or more wait than 1-GPU jobs of their own quota, worst quota
    first, against the target (metrics.large_job_wait)."""
    rows = s["large_job_wait"]
    if not rows:
        return f"{s['policy']:12} large jobs: no quota has both 1-GPU and 8-GPU-or-larger jobs that started"
    worst = rows[0]
    over = sum(1 for r in rows if r["ratio"] > LARGE_WAIT_TARGET)
    return (f"{s['policy']:12} large jobs wait {worst['ratio']:,.1f}x as long as 1-GPU jobs in {worst['quota']} "
            f"({worst['jobs_large']:,} jobs of 8+ GPUs {worst['mean_large_s']:,.0f} s, {worst['jobs_1_gpu']:,} "
            f"of 1 GPU {worst['mean_1_gpu_s']:,.0f} s); {over} of {len(rows)} quotas over the "
            f"target {LARGE_WAIT_TARGET:g}x")


def _resizes(s: dict) -> str:
    if not (s["shrinks"] or s["growths"]):
        return ""
    return (f", shrinks {s['shrinks']:,}, growths {s['growths']:,} "
            f"(GPU-hours lost to them {s['gpu_hours_lost_to_resizes']:,.1f})")


def breakdown_lines(summaries: list[dict]) -> list[str]:
    """Queueing by job size, quota and mode, the policies side by side: jobs, then the mean,
    median and p95 in seconds."""
    width = max([len(label) for label, _ in _breakdown_rows(summaries)] + [20])
    head = f"{'queueing (s)':{width}}" + "".join(
        f" | {s['policy'] + ': jobs':>18} {'mean':>9} {'median':>8} {'p95':>9}"
        for s in summaries)
    lines = [head, "-" * len(head)]
    for label, cells in _breakdown_rows(summaries):
        lines.append(f"{label:{width}}" + "".join(
            f" | {c['jobs']:>18,} {c['queueing_delay_s']['mean']:>9,.0f} "
            f"{c['queueing_delay_s']['median']:>8,.0f} {c['queueing_delay_s']['p95']:>9,.0f}"
            if c else f" | {'-':>18} {'':>9} {'':>8} {'':>9}" for c in cells))
    return lines


def _breakdown_rows(summaries: list[dict]) -> list[tuple[str, list[dict | None]]]:
    """(label, one breakdown row a policy or None) in the order of the first policy that has
    the group: sizes, quotas and modes differ between policies only in which are present."""
    out, seen = [], set()
    for by, prefix in BREAKDOWNS:
        for s in summaries:
            for row in s["breakdown"]:
                if row["by"] == by and row["group"] not in seen:
                    seen.add(row["group"])
                    out.append((f"{prefix}{row['group']}",
                                [_find(other, by, row["group"]) for other in summaries]))
        seen.clear()
    return out


def _find(summary: dict, by: str, group: str) -> dict | None:
    return next((r for r in summary["breakdown"] if (r["by"], r["group"]) == (by, group)), None)


def write_html(results: list[Result], summaries: list[dict], path: str,
               reference: dict | None = None, title: str = "Trace replay") -> None:
    figures = [_delay_cdf(results), _utilization(results), _losses(summaries)]
    parts = [pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False)
             for i, fig in enumerate(figures)]
    notes = "".join(f"<li>{html.escape(n)}</li>" for n in policy_notes(results, summaries))
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            "</title><style>body{font-family:sans-serif;margin:24px}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;"
            "text-align:right}th:first-child,td:first-child{text-align:left}</style></head>"
            f"<body><h1>{html.escape(title)}</h1>{_table(summaries, reference)}"
            f"<h2>Policies and Idle Resources modes</h2><ul>{notes}</ul>"
            "<h2>Queueing by job size, quota and Idle Resources mode</h2>"
            f"{_breakdown_table(summaries)}" + "".join(parts) + "</body></html>")
    with open(path, "w") as f:
        f.write(page)


def _breakdown_table(summaries: list[dict]) -> str:
    head = "<tr><th rowspan=2>group</th>" + "".join(
        f"<th colspan=4>{html.escape(s['policy'])}</th>" for s in summaries) + "</tr><tr>"
    head += "<th>jobs</th><th>mean (s)</th><th>median (s)</th><th>p95 (s)</th>" * len(summaries)
    rows = []
    for label, cells in _breakdown_rows(summaries):
        tds = "".join(
            f"<td>{c['jobs']:,}</td><td>{c['queueing_delay_s']['mean']:,.1f}</td>"
            f"<td>{c['queueing_delay_s']['median']:,.0f}</td>"
            f"<td>{c['queueing_delay_s']['p95']:,.0f}</td>" if c else "<td></td>" * 4
            for c in cells)
        rows.append(f"<tr><td>{html.escape(label)}</td>{tds}</tr>")
    return f"<table>{head}</tr>{''.join(rows)}</table>"


def _delay_cdf(results: list[Result]) -> go.Figure:
    fig = go.Figure()
    for result in results:
        d = delays(result)
        if not d:
            continue
        step = max(1, len(d) // CDF_POINTS)
        idx = list(range(0, len(d), step)) + [len(d) - 1]
        # A log axis has no 0: a job that started at once is drawn at 1 s.
        fig.add_trace(go.Scatter(x=[max(d[i], 1) for i in idx],
                                 y=[(i + 1) / len(d) for i in idx], mode="lines",
                                 name=result.policy, line=_line(result.policy)))
    fig.update_layout(title="Queueing delay CDF (jobs started at once are drawn at 1 s)",
                      xaxis_title="queueing delay (s, log)", yaxis_title="fraction of jobs",
                      xaxis_type="log", height=450)
    return fig


def _utilization(results: list[Result]) -> go.Figure:
    fig = go.Figure()
    for result in results:
        times, used = utilization_series(result)
        fig.add_trace(go.Scatter(x=[t / 86400 for t in times], y=[u * 100 for u in used],
                                 mode="lines", name=result.policy,
                                 line=_line(result.policy)))
    fig.update_layout(title="GPU utilization over time (6-hour means, all GPUs)",
                      xaxis_title="days since the first submission",
                      yaxis_title="GPUs in use (%)", height=450)
    return fig


def _line(policy: str) -> dict:
    return {"color": COLORS.get(policy), "dash": DASHES.get(policy, "solid"), "width": 2}


def _losses(summaries: list[dict]) -> go.Figure:
    names = [s["policy"] for s in summaries]
    colors = [COLORS.get(n) for n in names]
    fig = make_subplots(rows=1, cols=2, subplot_titles=("Preemptions", "GPU-hours lost"))
    for col, key in ((1, "preemptions"), (2, "gpu_hours_lost")):
        values = [s[key] for s in summaries]
        fig.add_trace(go.Bar(x=names, y=values, text=values, marker_color=colors,
                             showlegend=False), row=1, col=col)
    fig.update_layout(title="Preemptions and GPU-hours lost per policy", height=420)
    return fig


def _table(summaries: list[dict], reference: dict | None) -> str:
    head = ("<tr><th>scheduler</th><th>jobs</th><th>skipped</th><th>mean queueing (s)</th>"
            "<th>median (s)</th><th>p95 (s)</th><th>GPU utilization (useful)</th>"
            "<th>preemptions</th><th>GPU-hours lost</th><th>makespan (days)</th></tr>")
    rows = []
    if reference:
        rows.append(f"<tr><td>{html.escape(reference['name'])}</td>"
                    f"<td>{reference['jobs']:,}</td><td></td><td>{reference['mean']:,.1f}</td>"
                    f"<td>{reference['median']:,.0f}"
                    "</td><td></td><td></td><td></td><td></td><td></td></tr>")
    for s in summaries:
        q = s["queueing_delay_s"]
        rows.append(f"<tr><td>OpenDLC, {html.escape(s['policy'])}</td>"
                    f"<td>{s['jobs_replayed']:,}</td><td>{s['jobs_skipped']:,}</td>"
                    f"<td>{q['mean']:,.1f}</td><td>{q['median']:,.0f}</td><td>{q['p95']:,.0f}</td>"
                    f"<td>{s['gpu_utilization']:.1%} ({s['gpu_utilization_useful']:.1%})</td>"
                    f"<td>{s['preemptions']:,}</td>"
                    f"<td>{s['gpu_hours_lost']:,.1f}</td><td>{s['makespan_days']}</td></tr>")
    return f"<table>{head}{''.join(rows)}</table>"

