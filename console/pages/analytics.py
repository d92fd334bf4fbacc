"""Usage: GPU-hours by workspace, quota, user and source over a range of days; queueing time per quota;
preemptions and what they cost; spot spend and savings. Each as a Plotly chart, a table and a CSV.

Whose usage: quotas.services.usage_scope. The figures: jobs.usage_history and spot.spend, summed by
the database; this module only names, rounds and lays them out.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from datetime import timezone as dt_timezone
from decimal import ROUND_HALF_UP, Decimal

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpResponse
from django.utils import timezone

from console.forms import UsageRangeForm
from console.pages.base import current_workspace, page
from console.pages.billing import as_text
from jobs.usage_history import SOURCES, gpu_use, midnight, preemptions, queue_times
from quotas.models import Quota
from quotas.services import usage_scope
from spot.spend import spend_by_day

SOURCE_NAMES = list(SOURCES.values())
SOURCE_COLOURS = {"guaranteed": "#ff6a00", "idle": "#7a4fd6", "spot": "#1677ff", "public": "#1f9d55"}
PUBLIC_POOL = "public pool"
REASONS = {"Preempted": "reclaimed (Preempted)", "SpotReleased": "spot released", "NodeDrained": "node drained"}
TOP_USERS = 20


@dataclass
class Table:
    """One block of the page: its chart, and the rows its table and its CSV show alike."""

    key: str
    title: str
    help: str
    header: list[str]
    rows: list[list] = field(default_factory=list)
    figure: dict | None = None
    figure_id: str = ""

    @property
    def shown_rows(self) -> list[list[tuple[str, bool]]]:
        """Each cell as (text, is a number): money to the cent on the page, exact in the CSV."""
        return [[shown(cell) for cell in row] for row in self.rows]


def shown(cell) -> tuple[str, bool]:
    if isinstance(cell, Decimal):
        return f"{cell.quantize(Decimal('0.01'), rounding=ROUND_HALF_UP):,}", True
    if isinstance(cell, float):
        return f"{cell:,.2f}", True
    return str(cell), isinstance(cell, int)


@dataclass(frozen=True)
class Range:
    first: object  # date
    last: object
    start: datetime
    end: datetime


def chosen_range(form: UsageRangeForm) -> Range:
    first, last = form.cleaned_data["from"], form.cleaned_data["to"]
    return Range(first, last, midnight(first), midnight(last + timedelta(days=1)))


@login_required
def usage(request):
    form = UsageRangeForm(request.GET, today=timezone.now().astimezone(dt_timezone.utc).date())
    workspace = current_workspace(request)
    context = {"form": form, "workspace": workspace, "tables": []}
    if not form.is_valid():
        return page(request, "console/usage/usage.html", context, nav="usage", status=400)
    scope = usage_scope(request.user, workspace)
    chosen = chosen_range(form)
    tables = report(scope, chosen, timezone.now())
    context |= {"tables": list(tables.values()), "range": chosen, "query": request.GET.urlencode(),
                "scope_names": list(scope.workspaces.order_by("name").values_list("name", flat=True)),
                "totals": totals(tables)}
    return page(request, "console/usage/usage.html", context, nav="usage")


@login_required
def usage_csv(request, table: str):
    form = UsageRangeForm(request.GET, today=timezone.now().astimezone(dt_timezone.utc).date())
    if not form.is_valid():
        problems = "; ".join(f"{name}: {' '.join(errors)}" for name, errors in form.errors.items())
        return HttpResponse(problems, status=400, content_type="text/plain; charset=utf-8")
    chosen = chosen_range(form)
    tables = report(usage_scope(request.user, current_workspace(request)), chosen, timezone.now())
    if table not in tables:
        raise Http404(f"No usage table {table!r}; there are {', '.join(tables)}.")
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="opendlc-usage-{table}-{chosen.first}-{chosen.last}.csv"'
    writer = csv.writer(response)
    writer.writerow(tables[table].header)
    for row in tables[table].rows:
        writer.writerow([as_text(cell) if isinstance(cell, str) else cell for cell in row])
    return response


# --- the tables -----------------------------------------------------------------------------------

def report(scope, chosen: Range, now: datetime) -> dict[str, Table]:
    uses = gpu_use(scope.who, chosen.first, chosen.last, now)
    waits = queue_times(scope.jobs, chosen.start, chosen.end)
    evictions = preemptions(scope.jobs, chosen.start, chosen.end)
    names = Names(scope, uses, waits, evictions)
    tables = [
        by_group("workspaces", "GPU-hours by workspace", "workspace", uses, lambda u: names.workspace(u.workspace_id)),
        by_group("quotas", "GPU-hours by quota", "quota", uses, lambda u: names.quota(u.quota_id)),
        by_group("users", "GPU-hours by user", "user", uses, lambda u: names.user(u.user_id)),
        by_source(uses),
        queueing(waits, names),
        preempted(evictions, names),
        spend(spend_by_day(scope.who, chosen.first, chosen.last)),
    ]
    for t in tables:
        # The range in the id: console.js draws a figure again only when its id changed.
        t.figure_id = f"fig-usage-{t.key}-{chosen.first:%Y%m%d}-{chosen.last:%Y%m%d}"
    return {t.key: t for t in tables}


class Names:
    """Names for the ids the figures carry, read in one query per kind."""

    def __init__(self, scope, uses, waits, evictions):
        quota_ids = {u.quota_id for u in uses} | set(waits) | {e.quota_id for e in evictions}
        self.workspaces = dict(scope.workspaces.values_list("pk", "name"))
        self.quotas = dict(Quota.objects.filter(pk__in=quota_ids - {None}).values_list("pk", "name"))
        users = {u.user_id for u in uses}
        self.users = dict(get_user_model().objects.filter(pk__in=users).values_list("pk", "username"))

    def workspace(self, pk) -> str:
        return self.workspaces.get(pk, str(pk))

    def quota(self, pk) -> str:
        return PUBLIC_POOL if pk is None else self.quotas.get(pk, str(pk))

    def user(self, pk) -> str:
        return self.users.get(pk, str(pk))


def hours(seconds: float) -> float:
    return round(seconds / 3600, 2)


def by_group(key: str, title: str, label: str, uses, name_of) -> Table:
    """GPU-hours per group, split by source, largest first."""
    sums: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(SOURCE_NAMES, 0.0))
    for use in uses:
        sums[name_of(use)][use.source] += use.gpu_seconds
    ordered = sorted(sums.items(), key=lambda item: (-sum(item[1].values()), item[0]))
    rows = [[name, *(hours(s[src]) for src in SOURCE_NAMES), hours(sum(s.values()))] for name, s in ordered]
    table = Table(key, title, f"GPU-hours of the pods that ran in the range, per {label} and source.",
                  [label, *SOURCE_NAMES, "total"], rows)
    shown = rows[:TOP_USERS] if key == "users" else rows
    table.figure = stacked_bars(title, [r[0] for r in shown],
                                {src: [r[1 + i] for r in shown] for i, src in enumerate(SOURCE_NAMES)})
    return table


def by_source(uses) -> Table:
    sums = dict.fromkeys(SOURCE_NAMES, 0.0)
    for use in uses:
        sums[use.source] += use.gpu_seconds
    total = sum(sums.values())
    rows = [[src, hours(s), round(100 * s / total, 1) if total else 0.0] for src, s in sums.items()]
    table = Table("sources", "GPU-hours by source",
                  "guaranteed: a quota's own nodes; idle: borrowed from other quotas' idle nodes; spot and public: "
                  "the public pool, bid for or pay-as-you-go.", ["source", "GPU-hours", "share %"], rows)
    table.figure = figure("GPU-hours by source", [bar(
        SOURCE_NAMES, [r[1] for r in rows], marker={"color": [SOURCE_COLOURS[s] for s in SOURCE_NAMES]},
        hovertemplate="%{x}: %{y:.2f} GPU-h<extra></extra>")], "GPU-hours")
    return table


def queueing(waits, names: Names) -> Table:
    ordered = sorted(waits.items(), key=lambda item: names.quota(item[0]))
    rows = [[names.quota(q), w.jobs, round(w.p50_s / 60, 1), round(w.p95_s / 60, 1)] for q, w in ordered]
    table = Table("queueing", "Queueing time per quota",
                  "From submission to the job's first Running, for the jobs that first ran in the range "
                  "(nearest-rank percentiles).", ["quota", "jobs", "p50 min", "p95 min"], rows)
    labels = [r[0] for r in rows]
    table.figure = figure("Queueing time per quota", [
        bar(labels, [r[2] for r in rows], name="p50", marker={"color": "#1677ff"}),
        bar(labels, [r[3] for r in rows], name="p95", marker={"color": "#c77700"}),
    ], "minutes", barmode="group")
    return table


def preempted(evictions, names: Names) -> Table:
    ordered = sorted(evictions, key=lambda e: (names.quota(e.quota_id), e.reason))
    rows = [[names.quota(e.quota_id), REASONS.get(e.reason, e.reason), e.pods, e.jobs, hours(e.lost_gpu_seconds)]
            for e in ordered]
    table = Table("preemptions", "Preemptions and the GPU-hours they cost",
                  "Pods that ended Resource Preempted in the range, and the GPU-hours each had run since its "
                  "job's last checkpoint (or its start): work to redo.",
                  ["quota", "reason", "evicted pods", "jobs", "GPU-hours lost"], rows)
    reasons = sorted({r[1] for r in rows})
    quotas = sorted({r[0] for r in rows})
    lost = {(r[0], r[1]): r[4] for r in rows}
    table.figure = figure("GPU-hours lost to preemption", [
        bar(quotas, [lost.get((q, reason), 0) for q in quotas], name=reason) for reason in reasons
    ], "GPU-hours", barmode="stack")
    return table


def spend(days) -> Table:
    rows = [[d.day.isoformat(), d.pay_type, d.minutes, d.amount, d.on_demand_amount, d.savings] for d in days]
    table = Table("spend", "Spot spend and savings",
                  "The daily bills of spot and pay-as-you-go jobs (per node-minute, as Billing), against the same "
                  "minutes at the pay-as-you-go price.",
                  ["day", "pay type", "node-minutes", "amount", "pay-as-you-go amount", "savings"], rows)
    per_day: dict[str, list] = defaultdict(lambda: [0, 0])
    for d in days:
        per_day[d.day.isoformat()][0] += d.amount
        per_day[d.day.isoformat()][1] += d.on_demand_amount
    x = sorted(per_day)
    table.figure = figure("Spend against pay-as-you-go", [
        bar(x, [float(per_day[d][0]) for d in x], name="paid", marker={"color": "#1677ff"}),
        {"type": "scatter", "x": x, "y": [float(per_day[d][1]) for d in x], "name": "pay-as-you-go price",
         "mode": "lines+markers", "line": {"dash": "dot", "color": "#646a73"}},
    ], "amount")
    return table


def totals(tables: dict[str, Table]) -> dict:
    sources = {row[0]: row[1] for row in tables["sources"].rows}
    spent = tables["spend"].rows
    return {
        "gpu_hours": round(sum(sources.values()), 2), "sources": sources,
        "preempted_pods": sum(r[2] for r in tables["preemptions"].rows),
        "lost": round(sum(r[4] for r in tables["preemptions"].rows), 2),
        "spend": sum((r[3] for r in spent), start=0), "savings": sum((r[5] for r in spent), start=0),
    }


# --- charts, built as the Spot Market's History Price is ----------------------------------------------

def stacked_bars(title: str, labels: list[str], by_source: dict[str, list[float]]) -> dict:
    return figure(title, [
        bar(labels, values, name=src, marker={"color": SOURCE_COLOURS[src]},
            hovertemplate=f"%{{x}} · {src}: %{{y:.2f}} GPU-h<extra></extra>")
        for src, values in by_source.items()
    ], "GPU-hours", barmode="stack")


def bar(x, y, **trace) -> dict:
    return {"type": "bar", "x": list(x), "y": list(y), **trace}


def figure(title: str, traces, y_title: str, **layout) -> dict:
    """A Plotly figure as plain JSON data in plotly.js's own schema, which console.js draws. Written as
    dicts rather than through plotly.graph_objects, whose validation of seven small charts cost the
    page more than its queries; and with no template, which would repeat kilobytes of styling."""
    return {"data": list(traces), "layout": {
        "title": {"text": title, "font": {"size": 14}}, "font": {"color": "#1f2329"},
        "yaxis": {"title": {"text": y_title}, "rangemode": "tozero", "gridcolor": "#e9ecf1", "zerolinecolor": "#d0d3d9"},
        "xaxis": {"type": "category"}, "margin": {"l": 60, "r": 20, "t": 40, "b": 40}, "height": 280,
        "legend": {"orientation": "h", "y": -0.25, "traceorder": "normal"}, **layout,
    }}
