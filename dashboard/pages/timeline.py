"""Timeline: one compute and one comm lane per rank (or every stream), comm coloured by dimension with its
exposed part in black.

The server aggregates to what the window can show (``transforms.lane_pieces``: each bin drawn with the time
it really holds, from analyzers/windows.py), and marks where steps start; zooming sends the new
x range back, and the figure for (run, window, ranks, lanes) is cached. The state — step, window (t0/t1 in
ms since the run's first event), ranks, lanes — is written into the URL, so a view can be linked.
"""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, State, ctx, dcc, html, no_update

from commprof.dashboard import ids, scale
from commprof.dashboard.cache import MAX_TIMELINE_RANKS, RunCache
from commprof.dashboard.state import (
    BadInput,
    as_choice,
    as_float,
    as_int,
    as_key,
    as_ranks,
    as_relayout,
    as_window_ns,
    guarded,
    parse_query,
    ranks_text,
)
from commprof.figures import transforms

TITLE = "Timeline"
WHOLE_RUN = "all"
ALL_RANKS = "all"  # ?ranks=all: the dropdown cleared (not the default ranks)
LANE_OPTIONS = [{"label": "a compute and a comm lane per rank", "value": transforms.RANK_LANES},
                {"label": "every stream / thread", "value": transforms.STREAM_LANES}]


def _steps(cache: RunCache, key: str) -> list[str]:
    return [str(s) for s in cache.timeline_base(key).steps["step"].to_list()]


def step_window(cache: RunCache, key: str, step: Any) -> tuple[int, int]:
    base = cache.timeline_base(key)
    if step not in (None, WHOLE_RUN, ""):
        number = as_int(step, "step")
        row = base.steps.filter(base.steps["step"] == number)
        if row.height == 0:
            raise BadInput(f"this run has no step {number} (steps: {', '.join(_steps(cache, key)) or 'none'})")
        return int(row["start_ns"][0]), int(row["end_ns"][0])
    return base.origin_ns, base.end_ns


def _initial(cache: RunCache, key: str, query: dict[str, str]) -> tuple[str, tuple[int, int], list[int], str, str]:
    """(step, window, ranks, lanes, message) from the URL; a bad value is reported and left at its default."""
    problems = []
    step, ranks, lanes = WHOLE_RUN, list(cache.default_ranks(key)), transforms.RANK_LANES
    window = step_window(cache, key, None)
    try:
        if query.get("step"):
            window = step_window(cache, key, query["step"])
            step = str(as_int(query["step"], "step"))
    except BadInput as err:
        problems.append(str(err))
    try:
        if query.get("ranks") == ALL_RANKS:
            ranks = []  # cleared: every rank (the first MAX_TIMELINE_RANKS drawn)
        else:
            chosen = as_ranks(query.get("ranks"), cache.analysis(key).ranks["rank"].to_list())
            ranks = chosen if chosen else ranks
    except BadInput as err:
        problems.append(str(err))
    try:
        if query.get("t0") or query.get("t1"):
            origin = cache.timeline_base(key).origin_ns
            lo = as_float(query.get("t0", (window[0] - origin) / 1e6), "t0")
            hi = as_float(query.get("t1", (window[1] - origin) / 1e6), "t1")
            window = (origin + int(min(lo, hi) * 1e6), origin + int(max(lo, hi) * 1e6))
    except BadInput as err:
        problems.append(str(err))
    try:
        if query.get("lanes"):
            lanes = as_choice(query["lanes"], "lane mode", [transforms.RANK_LANES, transforms.STREAM_LANES])[0]
    except BadInput as err:
        problems.append(str(err))
    return step, (window[0], max(window[1], window[0] + 1)), ranks, lanes, " ".join(problems)


def layout(cache: RunCache, key: str, query: dict[str, str] | None = None) -> Any:
    step, window, ranks, lanes, problem = _initial(cache, key, query or {})
    return html.Div([
        dcc.Store(id=ids.TIMELINE_WINDOW, data=list(window)), dcc.Store(id=ids.TIMELINE_FIRST, data=list(window)),
        html.Div([html.H2(f"{key} — timeline", style={"flex": "1"}),
                  html.A("Download for Perfetto (.json)", href=f"/download/{key}/perfetto.json", id=ids.PERFETTO_LINK,
                         title="The whole run as an annotated trace: open it at ui.perfetto.dev")],
                 className="controls"),
        html.Div([
            html.Label("step"), dcc.Dropdown(
                id=ids.TIMELINE_STEP, clearable=False, value=step, style={"width": "150px"},
                options=[{"label": "whole run", "value": WHOLE_RUN}] + [{"label": f"step {s}", "value": s}
                                                                         for s in _steps(cache, key)]),
            html.Label("ranks"), dcc.Dropdown(
                id=ids.TIMELINE_RANKS, multi=True, value=ranks, style={"minWidth": "320px", "maxWidth": "700px"},
                options=_rank_options(cache, key, ranks), placeholder=f"all ranks (the first {MAX_TIMELINE_RANKS} "
                "are drawn)" + ("; type a rank or a host to find it" if scale.at_scale(cache, key) else "")),
            dcc.RadioItems(id=ids.TIMELINE_LANES, options=LANE_OPTIONS, value=lanes, inline=True,
                           inputStyle={"marginRight": "4px", "marginLeft": "10px"}),
        ], className="controls"),
        html.Div([html.Span(id=ids.TIMELINE_INFO, className="muted")], className="controls"),
        html.Div(problem, id=ids.TIMELINE_MESSAGE, className="message"),
        html.Div(id=ids.TIMELINE_NOTE, className="message"),
        html.P("Default ranks: the ones that matter most — the top finding's, or the rank the others wait for "
               "and its group, then the most exposed. Drag to zoom (the server re-aggregates for the new window); "
               "double-click to reset. The URL keeps this view.", className="muted"),
        dcc.Loading(dcc.Graph(id=ids.TIMELINE_GRAPH, config={"scrollZoom": False, "displaylogo": False}),
                    delay_show=300),
    ])


def _rank_options(cache: RunCache, key: str, chosen: list[int], text: Any = None) -> list[dict[str, Any]]:
    """Every rank; past 256 ranks the worst hosts' first SEARCH_RESULTS and the chosen ones, or those a search
    finds (a dropdown of 16,384 options is half a megabyte of every page load)."""
    if not scale.at_scale(cache, key):
        return [{"label": str(r), "value": r} for r in cache.analysis(key).ranks["rank"].to_list()]
    return scale.find(scale.rank_options(cache, key), text, chosen)


def _same_ms(zoom: tuple[float, float], window: tuple[int, int], origin_ns: int) -> bool:
    """A zoom (ms since the origin) that is this window, within 2 µs (the figure's window is snapped)."""
    return all(abs(z - (w - origin_ns) / 1e6) <= 2e-3 for z, w in zip(zoom, window, strict=True))


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(Output(ids.TIMELINE_RANKS, "options"), Input(ids.TIMELINE_RANKS, "search_value"),
                  State(ids.TIMELINE_RANKS, "value"), State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def search(text: Any, value: Any, key: Any) -> Any:
        """Past 256 ranks typing finds a rank by number or by host (a smaller run lists every rank and filters
        itself)."""
        key = as_key(key, cache.runs)
        if not scale.at_scale(cache, key):
            return no_update
        return _rank_options(cache, key, [v for v in value if isinstance(v, int)] if isinstance(value, list) else [],
                             text)

    @app.callback(
        Output(ids.TIMELINE_WINDOW, "data"), Output(ids.TIMELINE_MESSAGE, "children", allow_duplicate=True),
        Input(ids.TIMELINE_STEP, "value"), Input(ids.TIMELINE_GRAPH, "relayoutData"),
        State(ids.RUN_KEY, "data"), State(ids.TIMELINE_FIRST, "data"),
        prevent_initial_call=True,
    )
    @guarded(2, 1)
    def set_window(step: Any, relayout: Any, key: Any, first: Any = None) -> Any:
        key = as_key(key, cache.runs)
        if ctx.triggered_id == ids.TIMELINE_STEP:
            return list(step_window(cache, key, step)), ""
        zoom = as_relayout(relayout)
        if zoom is None:
            return no_update, no_update
        origin = cache.timeline_base(key).origin_ns
        # plotly's "reset axes" and double-click return to the range the graph was *first* drawn with (a
        # step chosen later does not move it): that range, like autoscale, means "back to the chosen step"
        if zoom == "reset" or (first is not None and not isinstance(zoom, str)
                               and _same_ms(zoom, as_window_ns(first), origin)):
            return list(step_window(cache, key, step)), ""
        lo, hi = zoom
        start, end = origin + int(lo * 1e6), origin + int(hi * 1e6)
        return [start, max(end, start + 1)], ""

    @app.callback(
        Output(ids.TIMELINE_GRAPH, "figure"), Output(ids.TIMELINE_INFO, "children"),
        Output(ids.TIMELINE_NOTE, "children"),
        Input(ids.TIMELINE_WINDOW, "data"), Input(ids.TIMELINE_RANKS, "value"), Input(ids.TIMELINE_LANES, "value"),
        State(ids.RUN_KEY, "data"),
    )
    @guarded(3, 2)
    def draw(window: Any, ranks: Any, lanes: Any, key: Any) -> Any:
        key = as_key(key, cache.runs)
        start, end = cache.snap_window(key, *as_window_ns(window))
        mode = (as_choice(lanes, "lane mode", [transforms.RANK_LANES, transforms.STREAM_LANES]) or
                [transforms.RANK_LANES])[0]
        all_ranks = cache.analysis(key).ranks["rank"].to_list()
        chosen = as_ranks(ranks, all_ranks) or sorted(all_ranks)
        note = ""
        if len(chosen) > MAX_TIMELINE_RANKS:
            note = (f"{len(chosen)} ranks chosen: the first {MAX_TIMELINE_RANKS} are drawn "
                    f"({ranks_text(chosen[:MAX_TIMELINE_RANKS])}); pick fewer ranks to see the others.")
            chosen = chosen[:MAX_TIMELINE_RANKS]
        fig, info = cache.timeline_figure(key, start, end, tuple(chosen), mode)
        text = (f"{len(chosen)} rank(s) · {info['lanes']} lanes · {info['segments']} segments drawn "
                f"(≤ {info['bins']} per lane) · window {(end - start) / 1e6:.3f} ms")
        return fig, text, note

    @app.callback(
        Output(ids.URL, "search", allow_duplicate=True),
        Input(ids.TIMELINE_WINDOW, "data"), Input(ids.TIMELINE_RANKS, "value"), Input(ids.TIMELINE_LANES, "value"),
        State(ids.TIMELINE_STEP, "value"), State(ids.RUN_KEY, "data"), State(ids.URL, "search"),
        prevent_initial_call=True,
    )
    @guarded(1, None)
    def remember(window: Any, ranks: Any, lanes: Any, step: Any, key: Any, search: Any) -> Any:
        """The view's state into the URL (the router does not re-render on a new query string)."""
        key = as_key(key, cache.runs)
        start, end = as_window_ns(window)
        chosen = as_ranks(ranks, cache.analysis(key).ranks["rank"].to_list())
        params: dict[str, str] = {}
        whole = step_window(cache, key, None)
        in_step = step_window(cache, key, step) if step not in (None, WHOLE_RUN) else whole
        if step not in (None, WHOLE_RUN):
            params["step"] = str(as_int(step, "step"))
        # the window went through the browser as JSON numbers (53-bit): equal within a µs is equal
        if abs(start - in_step[0]) > 1000 or abs(end - in_step[1]) > 1000:
            origin = cache.timeline_base(key).origin_ns
            params["t0"], params["t1"] = f"{(start - origin) / 1e6:.3f}", f"{(end - origin) / 1e6:.3f}"
        params["ranks"] = ranks_text(chosen) if chosen else ALL_RANKS
        if lanes == transforms.STREAM_LANES:
            params["lanes"] = transforms.STREAM_LANES
        from urllib.parse import urlencode

        current = parse_query(search)
        if current == params or (current.get("ranks") not in (None, ALL_RANKS) and chosen
                                 and as_ranks(current["ranks"], chosen) == chosen
                                 and {k: v for k, v in current.items() if k != "ranks"} ==
                                 {k: v for k, v in params.items() if k != "ranks"}):
            return no_update  # the URL already says this (no new history entry)
        return "?" + urlencode(params) if params else ""
