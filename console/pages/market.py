"""Spot Market: each public pool's on-demand and market price, discount, stock; History Price."""

import json
import re

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.http import HttpResponseBadRequest
from django.shortcuts import get_object_or_404, render

from console.forms import BidForm
from console.pages.base import page
from console.pages.market_data import RANGES, STOCK_MEANINGS, advise, chart_price, history, market_rows
from market.units import hourly
from quotas.models import ResourceSpec


@login_required
def market(request):
    everything = market_rows()
    # A type without an on-demand price (a local machine's) has no market: named apart, not listed at 0.
    rows = [r for r in everything if r["on_demand"]]
    unpriced = [r["spec"] for r in everything if not r["on_demand"]]
    chosen = request.GET.get("spec") or (rows[0]["spec"].instance_type if rows else None)
    context = {"rows": rows, "unpriced": unpriced, "stock_meanings": list(STOCK_MEANINGS.items())}
    status = 200
    if chosen:
        spec = get_object_or_404(ResourceSpec, instance_type=chosen)
        context |= chart_context(spec, request.GET.get("range"), advise(spec, BidForm(request.GET)))
        status = 400 if context["advice"].form.errors else 200
    return page(request, "console/market/market.html", context, nav="market", status=status)


@login_required
def price_chart(request, instance_type):
    """The History Price chart partial with the bid advisor (the Spot Market page and the Create Job
    modal swap it in); a bid in the query (bid_kind, bid_discount or bid_price_limit) is drawn."""
    spec = get_object_or_404(ResourceSpec, instance_type=instance_type)
    advice = advise(spec, BidForm(request.GET))
    return render(request, "console/market/market.html#chart", chart_context(spec, request.GET.get("range"), advice),
                  status=400 if advice.form.errors else 200)


ROLE_PREFIX = re.compile(r"^roles-\d{1,2}$")


@login_required
def bid_advice(request, instance_type):
    """The bid advisor panel of a Job Resource row: only the row's bid travels (prefix=roles-N),
    never the rest of the form."""
    spec = get_object_or_404(ResourceSpec, instance_type=instance_type)
    prefix = request.GET.get("prefix", "")
    if not ROLE_PREFIX.match(prefix):
        return HttpResponseBadRequest("prefix must name a Job Resource row, such as roles-0")
    advice = advise(spec, BidForm(request.GET, prefix=prefix))
    return render(request, "console/market/_advice.html", {"advice": advice, "chart_link": True},
                  status=400 if advice.form.errors else 200)


def chart_context(spec, range_key, advice) -> dict:
    range_key = range_key if range_key in RANGES else "1d"
    points = history(spec, RANGES[range_key])
    bid_key = f"-bid{advice.bid}".replace(".", "_") if advice.bid is not None else ""
    return {
        "chart_spec": spec, "range": range_key, "ranges": list(RANGES), "points": len(points), "advice": advice,
        "figure": price_figure(spec, points, range_key, advice.bid), "figure_id": f"fig-{spec.pk}-{range_key}{bid_key}",
    }


def price_figure(spec, points, range_key, bid=None) -> dict:
    """A Plotly figure (as plain JSON data) of the market price per hour, held between ticks, and the
    bid (per node-minute) as a line when there is one."""
    times = [at.isoformat() for at, _ in points]
    on_demand = chart_price(spec.on_demand_price_per_minute)
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=times, y=[chart_price(p) for _, p in points], name="Market price", mode="lines",
        line={"shape": "hv", "color": "#ff6a00", "width": 2}, hovertemplate="%{y:.4f} /h<extra>%{x}</extra>",
    ))
    if times:
        fig.add_trace(go.Scatter(
            x=[times[0], times[-1]], y=[on_demand, on_demand], name="On-demand", mode="lines",
            line={"dash": "dot", "color": "#646a73", "width": 1},
        ))
    if times and bid is not None:
        fig.add_trace(go.Scatter(
            x=[times[0], times[-1]], y=[chart_price(bid)] * 2, name=f"Your bid ({hourly(bid)})", mode="lines",
            line={"dash": "dash", "color": "#1f6feb", "width": 2},
        ))
    fig.update_layout(
        title={"text": f"{spec.instance_type} · market price, last {range_key}", "font": {"size": 14}},
        yaxis={"title": {"text": "price per hour"}, "rangemode": "tozero"},
        margin={"l": 60, "r": 20, "t": 40, "b": 40}, height=320, template="plotly_white",
        legend={"orientation": "h", "y": -0.2}, hovermode="x unified",
    )
    return json.loads(fig.to_json())
