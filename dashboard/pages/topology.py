"""Topology: hosts as boxes with their ranks, links coloured by dimension and weighted by traffic, and the
traffic matrix (rank × rank, or host × host beyond 64 ranks). A rank (beyond 16 ranks: a host) opens its
timeline."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, dcc, html, no_update

from commprof.analyzers import traffic
from commprof.dashboard import ids
from commprof.dashboard.cache import RunCache
from commprof.dashboard.pages.overview import _point
from commprof.dashboard.state import as_key, as_ranks, guarded, href
from commprof.figures import charts as figures
from commprof.figures import transforms

TITLE = "Topology"


def layout(cache: RunCache, key: str, query: dict[str, str] | None = None) -> Any:
    a = cache.analysis(key)
    hosts = cache.hosts(key)
    host_links = transforms.host_traffic(a.traffic, hosts)
    note = (f"{a.traffic_left_out} calls are not in the matrix: their process group's ranks are unknown."
            if a.traffic_left_out else "")
    how = " ".join((traffic.__doc__ or "").split("\n\n")[1].split()).replace("``", "") if traffic.__doc__ else ""
    graph = figures.topology_figure(a.ranks, a.traffic, host_links)
    left_out = (graph.layout.meta or {}).get("left_out") or []
    return html.Div([
        html.H2(f"{key} — topology"),
        html.P("Not drawn (equal links are drawn all or none; the matrix below has them): " + "; ".join(left_out)
               + ".", className="callout", id=ids.TOPO_LEFT_OUT) if left_out else None,
        dcc.Graph(id=ids.TOPO_GRAPH, figure=graph, config={"displaylogo": False}),
        dcc.Graph(id=ids.TOPO_TRAFFIC, figure=figures.traffic_figure(a.traffic, a.ranks["rank"].to_list(), hosts),
                  config={"displaylogo": False}),
        html.P(["How traffic is counted: ", how, html.Br(), note], className="muted", id=ids.TOPO_MESSAGE),
    ])


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(Output(ids.URL, "href", allow_duplicate=True), Input(ids.TOPO_GRAPH, "clickData"),
                  State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def drill(click: Any, key: Any) -> Any:
        key = as_key(key, cache.runs)
        point = _point(click)
        if point is None:
            return no_update
        hosts = cache.hosts(key)
        if isinstance(point, str) and point in hosts.values():  # a host (ranks rolled up): its ranks
            return href(key, "timeline", ranks=sorted(r for r, h in hosts.items() if h == point)[:64])
        return href(key, "timeline", ranks=as_ranks([point], cache.analysis(key).ranks["rank"].to_list()))
