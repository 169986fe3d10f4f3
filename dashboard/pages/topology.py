"""Topology: ranks grouped by node with links coloured by tier, and the rank × rank traffic matrix."""

from __future__ import annotations

from typing import Any

from dash import Dash, dcc, html

from commprof.analyzers import traffic
from commprof.dashboard import figures, ids
from commprof.dashboard.cache import RunCache

TITLE = "Topology"


def layout(cache: RunCache, key: str) -> Any:
    a = cache.analysis(key)
    matrix, left_out = cache.traffic(key)
    note = (f"{left_out} calls are not in the matrix: their process group's ranks are unknown."
            if left_out else "")
    return html.Div([
        html.H2(f"{key} — topology"),
        dcc.Graph(id=ids.TOPO_GRAPH, figure=figures.topology_figure(a.ranks, cache.links(key))),
        dcc.Graph(id=ids.TOPO_TRAFFIC, figure=figures.traffic_figure(matrix, a.ranks["rank"].to_list())),
        html.P(["How traffic is counted: ", " ".join((traffic.__doc__ or "").split("\n\n")[1].split()),
                html.Br(), note], className="muted"),
    ])


def register(app: Dash, cache: RunCache) -> None:
    """Static page."""
