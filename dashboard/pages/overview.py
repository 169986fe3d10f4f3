"""Overview: step-time breakdown per rank, exposed comm per dimension and tier, findings, run facts."""

from __future__ import annotations

from typing import Any

from dash import Dash, dcc, html

from commprof.dashboard import figures, ids
from commprof.dashboard.cache import RunCache
from commprof.dashboard.style import fmt_ns

TITLE = "Overview"


def _findings(cache: RunCache, key: str) -> Any:
    found = cache.findings(key)
    if found is None or found.height == 0:
        return html.P("No findings are computed for this run. Start from the exposed time by dimension and tier "
                      "below, and the skew page for late ranks.", className="muted")
    items = []
    for row in found.head(10).iter_rows(named=True):
        saving = row.get("estimated_saving_ns") or row.get("saving_ns")
        items.append(html.Li([html.B(f"[{row.get('severity', '?')}] {row.get('title', '')}"), " ",
                              str(row.get("detail") or ""),
                              f" (saves ~{fmt_ns(saving)} per step)" if saving else ""]))
    return html.Ol(items)


def layout(cache: RunCache, key: str) -> Any:
    a = cache.analysis(key)
    facts = html.Table([html.Tr([html.Th(k), html.Td(v)]) for k, v in cache.facts(key)], className="facts")
    return html.Div([
        html.H2(f"{key} — overview"),
        html.Div([html.Div(facts, id=ids.OVERVIEW_FACTS, className="card"),
                  html.Div([html.H3("Top findings"), html.Div(_findings(cache, key), id=ids.OVERVIEW_FINDINGS)],
                           className="card")], className="row"),
        dcc.Graph(id=ids.OVERVIEW_BREAKDOWN, figure=figures.breakdown_figure(a.rank_summary)),
        html.Div([
            dcc.Graph(id=ids.OVERVIEW_BY_DIMENSION, className="half",
                      figure=figures.exposed_by_figure(cache.exposed_by(key, "dimension"), "dimension")),
            dcc.Graph(id=ids.OVERVIEW_BY_TIER, className="half",
                      figure=figures.exposed_by_figure(cache.exposed_by(key, "tier"), "tier")),
        ], className="row"),
    ])


def register(app: Dash, cache: RunCache) -> None:
    """Static page: everything is built in the layout from the cache."""
