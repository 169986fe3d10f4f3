"""Skew: arrival delay per rank and matched collective; the straggler highlighted."""

from __future__ import annotations

from typing import Any

from dash import Dash, dcc, html

from commprof.dashboard import figures, ids
from commprof.dashboard.cache import RunCache
from commprof.dashboard.style import fmt_ns

TITLE = "Skew"


def layout(cache: RunCache, key: str) -> Any:
    delays, worst = cache.skew(key)
    text = (f"Straggler: rank {worst[0]} (mean arrival delay {fmt_ns(worst[1])})" if worst
            else "No collective was matched across ranks.")
    return html.Div([
        html.H2(f"{key} — skew"),
        html.P(text, id=ids.SKEW_STRAGGLER, className="callout"),
        html.P("Calls are matched across ranks by (pg, seq), or by (pg, op, n-th call) when the trace has no "
               "seq. Delay = the rank's start - the earliest start of the matched calls.", className="muted"),
        dcc.Graph(id=ids.SKEW_HEATMAP, figure=figures.skew_figure(delays, worst)),
    ])


def register(app: Dash, cache: RunCache) -> None:
    """Static page."""
