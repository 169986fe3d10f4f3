"""Timeline: ranks × lanes, comm coloured by dimension with its exposed part underlined.

The server aggregates to what the window can show (``transforms.merge_to_bins``); zooming sends the new
x range back, and the figure for (run, window, ranks) is cached.
"""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from commprof.dashboard import ids
from commprof.dashboard.cache import RunCache

TITLE = "Timeline"
WHOLE_RUN = "all"


def _step_window(cache: RunCache, key: str, step: Any) -> list[int]:
    base = cache.timeline_base(key)
    if step not in (None, WHOLE_RUN):
        row = base.steps.filter(base.steps["step"] == int(step))
        if row.height:
            return [int(row["start_ns"][0]), int(row["end_ns"][0])]
    return [base.origin_ns, base.end_ns]


def layout(cache: RunCache, key: str) -> Any:
    base = cache.timeline_base(key)
    steps = base.steps["step"].to_list()
    ranks = cache.analysis(key).ranks["rank"].to_list()
    return html.Div([
        dcc.Store(id=ids.TIMELINE_WINDOW, data=[base.origin_ns, base.end_ns]),
        html.H2(f"{key} — timeline"),
        html.Div([
            html.Label("step "), dcc.Dropdown(
                id=ids.TIMELINE_STEP, clearable=False, value=WHOLE_RUN, style={"width": "160px"},
                options=[{"label": "whole run", "value": WHOLE_RUN}] + [{"label": f"step {s}", "value": str(s)}
                                                                         for s in steps]),
            html.Label("ranks "), dcc.Dropdown(
                id=ids.TIMELINE_RANKS, multi=True, value=cache.default_ranks(key), style={"minWidth": "320px"},
                options=[{"label": str(r), "value": r} for r in ranks], placeholder="all ranks"),
            html.Span(id=ids.TIMELINE_INFO, className="muted"),
        ], className="controls"),
        html.P("Drag to zoom (the server re-aggregates for the new window); double-click to reset.",
               className="muted"),
        dcc.Loading(dcc.Graph(id=ids.TIMELINE_GRAPH, config={"scrollZoom": False}), delay_show=300),
    ])


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(
        Output(ids.TIMELINE_WINDOW, "data"),
        Input(ids.TIMELINE_STEP, "value"), Input(ids.TIMELINE_GRAPH, "relayoutData"),
        State(ids.RUN_KEY, "data"), State(ids.TIMELINE_WINDOW, "data"),
        prevent_initial_call=True,
    )
    def set_window(step: Any, relayout: dict[str, Any] | None, key: str, window: list[int] | None) -> Any:
        if key not in cache.runs:
            return no_update
        if ctx.triggered_id == ids.TIMELINE_STEP:
            return _step_window(cache, key, step)
        relayout = relayout or {}
        if relayout.get("xaxis.autorange"):
            return _step_window(cache, key, step)
        lo, hi = relayout.get("xaxis.range[0]"), relayout.get("xaxis.range[1]")
        if lo is None and isinstance(relayout.get("xaxis.range"), list):
            lo, hi = relayout["xaxis.range"]
        if lo is None or hi is None:
            return no_update
        origin = cache.timeline_base(key).origin_ns
        start, end = origin + int(float(lo) * 1e6), origin + int(float(hi) * 1e6)
        return [start, max(end, start + 1)]

    @app.callback(
        Output(ids.TIMELINE_GRAPH, "figure"), Output(ids.TIMELINE_INFO, "children"),
        Input(ids.TIMELINE_WINDOW, "data"), Input(ids.TIMELINE_RANKS, "value"), State(ids.RUN_KEY, "data"),
    )
    def draw(window: list[int], ranks: list[int] | None, key: str) -> Any:
        if key not in cache.runs or not window:
            return no_update, no_update
        chosen = tuple(sorted(int(r) for r in ranks)) if ranks else None
        fig, info = cache.timeline_figure(key, int(window[0]), int(window[1]), chosen)
        text = (f"{info['lanes']} lanes · {info['segments']} segments drawn "
                f"(≤ {info['bins']} per lane) · window {(window[1] - window[0]) / 1e6:.3f} ms")
        return fig, text
