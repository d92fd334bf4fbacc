"""Spot Market: each public pool's on-demand and market price, discount, stock; History Price."""

import json

import plotly.graph_objects as go
from django.contrib.auth.decorators import login_required
from django.shortcuts import get_object_or_404, render

from console.pages.base import page
from console.pages.market_data import RANGES, history, market_rows, per_hour
from quotas.models import ResourceSpec


@login_required
def market(request):
    rows = market_rows()
    chosen = request.GET.get("spec") or (rows[0]["spec"].instance_type if rows else None)
    context = {"rows": rows}
    if chosen:
        context |= chart_context(get_object_or_404(ResourceSpec, instance_type=chosen), request.GET.get("range"))
    return page(request, "console/market/market.html", context, nav="market")


@login_required
def price_chart(request, instance_type):
    """The History Price chart partial (the Spot Market page and the Create Job modal swap it in)."""
    spec = get_object_or_404(ResourceSpec, instance_type=instance_type)
    return render(request, "console/market/market.html#chart", chart_context(spec, request.GET.get("range")))


def chart_context(spec, range_key) -> dict:
    range_key = range_key if range_key in RANGES else "1d"
    points = history(spec, RANGES[range_key])
    return {
        "chart_spec": spec, "range": range_key, "ranges": list(RANGES), "points": len(points),
        "figure": price_figure(spec, points, range_key), "figure_id": f"fig-{spec.pk}-{range_key}",
    }


def price_figure(spec, points, range_key) -> dict:
    """A Plotly figure (as plain JSON data) of the market price per hour, held between ticks."""
    times = [at.isoformat() for at, _ in points]
    on_demand = per_hour(spec.on_demand_price_per_minute)
    fig = go.Figure()
    fig.add_trace(go.Scatter(
        x=times, y=[per_hour(p) for _, p in points], name="Market price", mode="lines",
        line={"shape": "hv", "color": "#ff6a00", "width": 2}, hovertemplate="%{y:.4f} /h<extra>%{x}</extra>",
    ))
    if times:
        fig.add_trace(go.Scatter(
            x=[times[0], times[-1]], y=[on_demand, on_demand], name="On-demand", mode="lines",
            line={"dash": "dot", "color": "#646a73", "width": 1},
        ))
    fig.update_layout(
        title={"text": f"{spec.instance_type} · market price, last {range_key}", "font": {"size": 14}},
        yaxis={"title": {"text": "price per hour"}, "rangemode": "tozero"},
        margin={"l": 60, "r": 20, "t": 40, "b": 40}, height=320, template="plotly_white",
        legend={"orientation": "h", "y": -0.2}, hovermode="x unified",
    )
    return json.loads(fig.to_json())
