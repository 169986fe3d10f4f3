"""Topology: hosts as boxes with their ranks, links coloured by dimension and weighted by traffic, and the
traffic matrix (rank × rank, or host × host beyond 64 ranks). A rank (beyond 16 ranks: a host) opens its
timeline. Past 256 ranks (dashboard/scale.py): the 16 hosts first in line (the analysis' host summary, worst
first) around one box for every other host, their traffic matrix with the rest summed, and the table of those
hosts; ``?host=NAME`` (or the dropdown, which finds any host by name) draws that host with them."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import polars as pl
from dash import Dash, Input, Output, State, dcc, html, no_update

from commprof.analyzers import traffic
from commprof.dashboard import ids, scale
from commprof.dashboard.cache import RunCache
from commprof.dashboard.pages.overview import _point
from commprof.dashboard.state import BadInput, as_choice, as_key, as_ranks, guarded, href
from commprof.figures import charts as figures
from commprof.figures import hosts as hosts_figures
from commprof.figures import transforms
from commprof.figures.hosts import host_matrix_figure, host_topology_figure

TITLE = "Topology"


def layout(cache: RunCache, key: str, query: dict[str, str] | None = None) -> Any:
    if scale.at_scale(cache, key):
        return _layout_at_scale(cache, key, query or {})
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


def _how(cache: RunCache, key: str, left_out: int) -> Any:
    how = " ".join((traffic.__doc__ or "").split("\n\n")[1].split()).replace("``", "") if traffic.__doc__ else ""
    note = f"{left_out} calls are not in the matrix: their process group's ranks are unknown." if left_out else ""
    return html.P(["How traffic is counted: ", how, html.Br(), note], className="muted", id=ids.TOPO_MESSAGE)


def drawn_hosts(cache: RunCache, key: str, chosen: str | None) -> pl.DataFrame:
    """The hosts drawn (figures.hosts.drawn_hosts: the analysis' first WORST_HOSTS, the chosen one last)."""
    return hosts_figures.drawn_hosts(cache.analysis(key).host_summary, chosen)


def figures_at_scale(cache: RunCache, key: str, chosen: str | None) -> tuple[Any, Any, list[str], int]:
    """(graph, traffic matrix, links left out, calls left out) of the drawn hosts: the analysis' traffic
    of those hosts apart and every other host summed (Analysis.host_traffic: no rank pair is made)."""
    a = cache.analysis(key)
    hosts, links, calls_left_out = hosts_figures.hosts_drawing(a, chosen)
    names = hosts["host"].to_list()
    total = a.host_summary.height
    graph = host_topology_figure(hosts, links, total, chosen)
    return graph, host_matrix_figure(links, names, total), list((graph.layout.meta or {}).get("left_out") or []), \
        calls_left_out


def _left_out_text(left_out: list[str]) -> str:
    return ("Not drawn (equal links are drawn all or none; the matrix below has them): " + "; ".join(left_out) + "."
            if left_out else "")


def _said(cache: RunCache, key: str, chosen: str | None) -> str:
    a = cache.analysis(key)
    total = a.host_summary.height
    worst = drawn_hosts(cache, key, chosen).filter(pl.col("host") != chosen).height if chosen else \
        min(scale.WORST_HOSTS, total)
    return (f"{a.ranks.height:,} ranks on {total:,} hosts: drawn are " + (f"{chosen} and " if chosen else "")
            + scale.worst_of(worst, total, "hosts", "slow ports, then the ranks the others wait for, then exposed comm")
            + "; every other host is summed in the middle. Pick any host to draw it with them.")


def _layout_at_scale(cache: RunCache, key: str, query: dict[str, str]) -> Any:
    a = cache.analysis(key)
    total = a.host_summary.height
    hosts = a.host_summary["host"].to_list()
    problem, chosen = "", None
    if query.get("host"):
        try:
            chosen = as_choice(query["host"], "host", hosts)[0]
        except BadInput as err:
            problem = f"{err} (showing the worst hosts)"
    graph, matrix, left_out, calls_left_out = figures_at_scale(cache, key, chosen)
    said = _said(cache, key, chosen)
    return html.Div([
        html.H2(f"{key} — topology"),
        html.P(said, className="callout", id=ids.TOPO_SCALE),
        html.Div(problem, id=ids.TOPO_PROBLEM, className="message"),
        dcc.Store(id=ids.TOPO_SHOWN, data=chosen),
        html.Div([html.Label("draw host"), dcc.Dropdown(
            id=ids.TOPO_HOST, value=chosen, clearable=True, style={"minWidth": "420px"},
            placeholder=f"the worst {min(scale.WORST_HOSTS, total)}; type a host's name to find another",
            options=scale.find(scale.host_options(cache, key), None, chosen))], className="controls"),
        html.P(_left_out_text(left_out), className="muted", id=ids.TOPO_NOTE),
        dcc.Graph(id=ids.TOPO_GRAPH, figure=graph, config={"displaylogo": False}),
        dcc.Graph(id=ids.TOPO_TRAFFIC, figure=matrix, config={"displaylogo": False}),
        scale.hosts_table(cache, key, ids.TOPO_HOSTS, chosen, here=True),
        _how(cache, key, calls_left_out),
    ])


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(Output(ids.TOPO_HOST, "options"), Input(ids.TOPO_HOST, "search_value"),
                  State(ids.TOPO_HOST, "value"), State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def search(text: Any, value: Any, key: Any) -> Any:
        """Past 256 ranks the dropdown holds the worst hosts; typing finds any other by name."""
        key = as_key(key, cache.runs)
        keep = value if isinstance(value, str) else None
        return scale.find(scale.host_options(cache, key), text, keep)

    @app.callback(Output(ids.TOPO_GRAPH, "figure"), Output(ids.TOPO_TRAFFIC, "figure"),
                  Output(ids.TOPO_NOTE, "children"), Output(ids.URL, "search", allow_duplicate=True),
                  Output(ids.TOPO_SHOWN, "data"), Output(ids.TOPO_SCALE, "children"),
                  Output(ids.TOPO_HOSTS, "children"), Input(ids.TOPO_HOST, "value"), State(ids.RUN_KEY, "data"),
                  State(ids.TOPO_SHOWN, "data"), prevent_initial_call=True)
    @guarded(7, 2)
    def pick(host: Any, key: Any, shown: Any) -> Any:
        """A host chosen (or cleared): the drawing, the matrix and the table redrawn around it, the URL says
        which."""
        if host == shown:  # the dropdown reporting its first value: nothing changed
            return (no_update,) * 7
        key = as_key(key, cache.runs)
        chosen = as_choice(host, "host", cache.analysis(key).host_summary["host"].to_list())
        name = chosen[0] if chosen else None
        graph, matrix, left_out, _ = figures_at_scale(cache, key, name)
        return (graph, matrix, _left_out_text(left_out), "?" + urlencode({"host": name}) if name else "", name,
                _said(cache, key, name), scale.hosts_table_rows(cache, key, name, here=True))

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
