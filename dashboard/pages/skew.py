"""Skew: how long each rank waits for later ranks, per process group (columns named by group and
dimension), and per matched call of one group; how calls were matched, said plainly (by sequence number,
or by their order when the trace has none). ``?pg=5`` picks the group; a cell opens the timeline."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Dash, Input, Output, State, dcc, html, no_update

from commprof.dashboard import figures, ids, transforms
from commprof.dashboard.cache import RunCache
from commprof.dashboard.state import BadInput, as_choice, as_int, as_key, guarded, href
from commprof.dashboard.style import fmt_ms

TITLE = "Skew"
ALL_GROUPS = "all"
MATCH_TEXT = {
    "seq": "Calls are matched across ranks by (group, sequence number) from the trace.",
    "order": "Calls are matched across ranks by their order in each group: the trace carries no sequence numbers, "
             "so a rank that skipped or added a call would shift every later match.",
    "seq and order": "Calls are matched by (group, sequence number) where the trace has it, else by their order "
                     "in each group.",
}


def _calls(cache: RunCache, key: str, pg: str) -> tuple[pl.DataFrame, str]:
    """The per-call heatmap's rows: one group's calls, or every call (rolled up to hosts beyond 64 ranks)."""
    waits, _ = cache.skew(key)
    if pg != ALL_GROUPS:
        return waits.filter(pl.col("pg").cast(pl.String) == pg), f" — {cache.group_names(key).get(pg, pg)}"
    if waits["rank"].n_unique() <= figures.MAX_HEATMAP_RANKS:
        return waits, " — every group"
    # beyond 64 ranks: the ranks of the group that waits most (a full run's rows would be unreadable)
    top = cache.analysis(key).rank_group_waits.sort("wait_ns_per_step", descending=True).head(1)
    if top.height == 0:
        return waits.head(0), ""
    best = str(top["pg"][0])
    return waits.filter(pl.col("pg").cast(pl.String) == best), (
        f" — {cache.group_names(key).get(best, best)}, the group that waits most (pick another above)")


def layout(cache: RunCache, key: str, query: dict[str, str] | None = None) -> Any:
    query = query or {}
    waits, worst = cache.skew(key)
    a = cache.analysis(key)
    names = cache.group_names(key)
    if worst:
        text = (f"Straggler: rank {worst['rank']} — the others wait {fmt_ms(worst['caused_wait_ns_per_step'])} per "
                f"step for it; it was last to arrive at {worst['times_last']} matched call(s).")
    elif waits.height:
        text = "No rank makes the others wait: every matched call starts together."
    else:
        text = "No collective was matched across ranks."
    clocks = a.host_clocks
    clock_text = "" if clocks.height < 2 else " Host clocks aligned from matched end times: " + "; ".join(
        f"{r['host']} {r['offset_ns'] / 1e6:+.4f} ms (residual {r['residual_ns'] / 1e6:.4f} ms, {r['fit']})"
        for r in clocks.head(4).iter_rows(named=True)) + (
        f"; … ({clocks.height} hosts)" if clocks.height > 4 else "") + "."
    pgs = sorted({str(p) for p in a.rank_group_waits["pg"].to_list()}, key=lambda p: (len(p), p))
    problem = ""
    try:
        pg = as_choice(query.get("pg"), "group", pgs)[0] if query.get("pg") else ALL_GROUPS
    except BadInput as err:
        problem, pg = f"{err} (showing every group)", ALL_GROUPS
    cells, by = transforms.skew_by_group(a.rank_group_waits, cache.hosts(key), names, figures.MAX_HEATMAP_RANKS)
    straggler = int(worst["rank"]) if worst else None
    calls, suffix = _calls(cache, key, pg)
    return html.Div([
        html.H2(f"{key} — skew"),
        html.P(text, id=ids.SKEW_STRAGGLER, className="callout"),
        html.P(MATCH_TEXT.get(a.match_by, "No call could be matched across ranks."), id=ids.SKEW_MATCH,
               className="callout" if a.match_by in ("order", "seq and order") else "muted"),
        html.P("A rank's wait = the latest start among the matched calls − its own start: time blocked on a later "
               "rank, not moving data." + clock_text, className="muted"),
        html.Div(problem, id=ids.SKEW_MESSAGE, className="message"),
        dcc.Graph(id=ids.SKEW_GROUPS, figure=figures.skew_group_figure(cells, by, straggler),
                  config={"displaylogo": False}),
        html.Div([html.Label("calls of group"), dcc.Dropdown(
            id=ids.SKEW_PG, clearable=False, value=pg, style={"minWidth": "320px"},
            options=[{"label": "every group", "value": ALL_GROUPS}] + [{"label": names.get(p, p), "value": p}
                                                                        for p in pgs])], className="controls"),
        dcc.Graph(id=ids.SKEW_HEATMAP, figure=figures.skew_calls_figure(calls, straggler, suffix),
                  config={"displaylogo": False}),
    ])


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(Output(ids.SKEW_HEATMAP, "figure"), Output(ids.SKEW_MESSAGE, "children", allow_duplicate=True),
                  Input(ids.SKEW_PG, "value"), State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(2, 1)
    def pick(pg: Any, key: Any) -> Any:
        key = as_key(key, cache.runs)
        pgs = [str(p) for p in cache.analysis(key).rank_group_waits["pg"].unique().to_list()]
        chosen = ALL_GROUPS if pg == ALL_GROUPS else as_choice(pg, "group", pgs)[0]
        _, worst = cache.skew(key)
        calls, suffix = _calls(cache, key, chosen)
        return figures.skew_calls_figure(calls, int(worst["rank"]) if worst else None, suffix), ""

    @app.callback(Output(ids.URL, "href", allow_duplicate=True), Input(ids.SKEW_GROUPS, "clickData"),
                  State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def drill(click: Any, key: Any) -> Any:
        """A cell opens the timeline of the group's ranks at the step of the row's longest wait."""
        key = as_key(key, cache.runs)
        points = click.get("points") if isinstance(click, dict) else None
        point = points[0] if isinstance(points, list) and points else None
        custom = point.get("customdata") if isinstance(point, dict) else None
        if not isinstance(custom, list) or len(custom) != 3:
            return no_update
        rank = as_int(custom[0], "rank")
        pg = as_choice(custom[1], "group", [str(p) for p in cache.analysis(key).process_groups["pg"].to_list()])[0]
        members = cache.analysis(key).process_groups.filter(pl.col("pg").cast(pl.String) == pg)["ranks"].to_list()
        ranks = sorted(set(members[0] if members and members[0] else []) | {rank})[:64]
        step = as_int(custom[2], "step") if custom[2] not in (None, "–") else None
        return href(key, "timeline", ranks=ranks, step=step)
