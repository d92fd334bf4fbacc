"""The HTML report of a replay: Plotly charts, self-contained (plotly.js inlined, no CDN)."""

from __future__ import annotations

import html

import plotly.graph_objects as go
import plotly.io as pio
from plotly.subplots import make_subplots

from .engine import Result
from .metrics import delays, utilization_series

# Philly's own scheduler on the same trace (acmetrace_cluster_summary.csv, row Philly).
PHILLY_REFERENCE = {"mean": 3760.604, "median": 189.0}
CDF_POINTS = 2000
COLORS = {"strict": "#1f77b4", "borrow": "#ff7f0e", "borrow-ckpt": "#2ca02c"}
DASHES = {"strict": "solid", "borrow": "dash", "borrow-ckpt": "dot"}  # lines often coincide


def write_html(results: list[Result], summaries: list[dict], path: str,
               reference: dict | None = PHILLY_REFERENCE, title: str = "Trace replay") -> None:
    figures = [_delay_cdf(results), _utilization(results), _losses(summaries)]
    parts = [pio.to_html(fig, include_plotlyjs=(i == 0), full_html=False)
             for i, fig in enumerate(figures)]
    page = (f"<!doctype html><html><head><meta charset='utf-8'><title>{html.escape(title)}"
            "</title><style>body{font-family:sans-serif;margin:24px}"
            "table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:4px 10px;"
            "text-align:right}th:first-child,td:first-child{text-align:left}</style></head>"
            f"<body><h1>{html.escape(title)}</h1>{_table(summaries, reference)}"
            + "".join(parts) + "</body></html>")
    with open(path, "w") as f:
        f.write(page)


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
        rows.append("<tr><td>Philly's own scheduler (AcmeTrace summary)</td><td>112,956</td>"
                    f"<td></td><td>{reference['mean']:,.1f}</td><td>{reference['median']:,.0f}"
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

