"""Skew: how long each rank waits for later ranks, per process group (columns named by group and
dimension), and per matched call of one group; how calls were matched, said plainly (by sequence number,
or by their order when the trace has none). ``?pg=5`` picks the group (default: the top finding's group in
the dimension it names, else the group that waits most), written back to the URL when another is chosen;
a cell of the rank × group heatmap opens the timeline of that group."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import polars as pl
from dash import Dash, Input, Output, State, dcc, html, no_update

from commprof.dashboard import ids
from commprof.dashboard.cache import RunCache
from commprof.dashboard.state import BadInput, as_choice, as_key, guarded, href
from commprof.figures import charts as figures
from commprof.figures import transforms
from commprof.figures.style import fmt_ms, natural_key

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


def _default_group(cache: RunCache, key: str, pgs: list[str]) -> str:
    """The group a first look should open: the top finding's (in the dimension it names), else the group
    that waits most; "every group" when nothing waits."""
    for finding in cache.findings(key)[:1]:
        for pg in cache.finding_groups(key, finding):
            if pg in pgs:
                return pg
    top = cache.analysis(key).rank_group_waits.sort("wait_ns_per_step", descending=True).head(1)
    return str(top["pg"][0]) if top.height and top["wait_ns_per_step"][0] > 0 else ALL_GROUPS


def layout(cache: RunCache, key: str, query: dict[str, str] | None = None) -> Any:
    query = query or {}
    waits, worst = cache.skew(key)
    a = cache.analysis(key)
    names = cache.group_names(key)
    judged = next((f for f in cache.findings(key) if getattr(f, "id", "") == "straggler" and f.ranks), None)
    if worst:
        text = (f"Most waited on: rank {worst['rank']} — the others wait {fmt_ms(worst['caused_wait_ns_per_step'])} "
                f"per step for it; it was last to arrive at {worst['times_last']} matched call(s).")
        if judged is not None:
            text += f" The straggler rule names rank {judged.ranks[0]} ({judged.severity}): {judged.title}."
    elif waits.height:
        text = "No rank makes the others wait: every matched call starts together."
    else:
        text = "No collective was matched across ranks."
    clocks = a.host_clocks
    clock_text = "" if clocks.height < 2 else " Host clocks aligned from matched end times: " + "; ".join(
        f"{r['host']} {r['offset_ns'] / 1e6:+.4f} ms (residual {r['residual_ns'] / 1e6:.4f} ms, {r['fit']})"
        for r in clocks.head(4).iter_rows(named=True)) + (
        f"; … ({clocks.height} hosts)" if clocks.height > 4 else "") + "."
    pgs = sorted({str(p) for p in a.rank_group_waits["pg"].to_list()}, key=natural_key)
    problem = ""
    try:
        pg = as_choice(query.get("pg"), "group", [*pgs, ALL_GROUPS])[0] if query.get("pg") else \
            _default_group(cache, key, pgs)
    except BadInput as err:
        pg = _default_group(cache, key, pgs)
        problem = f"{err} (showing {names.get(pg, pg) if pg != ALL_GROUPS else 'every group'})"
    cells, by = transforms.skew_by_group(a.rank_group_waits, cache.hosts(key), names, figures.MAX_HEATMAP_RANKS)
    straggler = int(worst["rank"]) if worst else None
    calls, suffix = _calls(cache, key, pg)
    return html.Div([
        html.H2(f"{key} — skew"),
        html.P(text, id=ids.SKEW_STRAGGLER, className="callout"),
        html.Div(problem, id=ids.SKEW_MESSAGE, className="message"),
        dcc.Store(id=ids.SKEW_SHOWN, data=pg),  # the group the page was drawn with
        # the chosen group first: it is what a finding's link or a click came for
        html.Div([html.Label("calls of group"), dcc.Dropdown(
            id=ids.SKEW_PG, clearable=False, value=pg, style={"minWidth": "420px"},
            options=[{"label": "every group", "value": ALL_GROUPS}] + [
                {"label": f"{names.get(p, p)} · {d}", "value": p} for p, d in _dimensions(a, pgs)])],
            className="controls"),
        dcc.Graph(id=ids.SKEW_HEATMAP, figure=figures.skew_calls_figure(calls, straggler, suffix),
                  config={"displaylogo": False}),
        html.P(MATCH_TEXT.get(a.match_by, "No call could be matched across ranks."), id=ids.SKEW_MATCH,
               className="callout" if a.match_by in ("order", "seq and order") else "muted"),
        html.P("A rank's wait = the latest start among the matched calls − its own start: time blocked on a later "
               "rank, not moving data." + clock_text, className="muted"),
        dcc.Graph(id=ids.SKEW_GROUPS, figure=figures.skew_group_figure(cells, by, straggler),
                  config={"displaylogo": False}),
    ])


def _dimensions(a: Any, pgs: list[str]) -> list[tuple[str, str]]:
    dims = dict(zip(a.process_groups["pg"].cast(pl.String).to_list(), a.process_groups["dimension"].to_list(),
                    strict=True))
    return [(p, str(dims.get(p) or "unknown")) for p in pgs]


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(Output(ids.SKEW_HEATMAP, "figure"), Output(ids.SKEW_MESSAGE, "children", allow_duplicate=True),
                  Output(ids.URL, "search", allow_duplicate=True), Output(ids.SKEW_SHOWN, "data"),
                  Input(ids.SKEW_PG, "value"), State(ids.RUN_KEY, "data"), State(ids.SKEW_SHOWN, "data"),
                  prevent_initial_call=True)
    @guarded(4, 1)
    def pick(pg: Any, key: Any, shown: Any) -> Any:
        if pg == shown:  # the dropdown reporting its first value (Dash 4 does on mount): nothing changed
            return no_update, no_update, no_update, no_update
        key = as_key(key, cache.runs)
        pgs = [str(p) for p in cache.analysis(key).rank_group_waits["pg"].unique().to_list()]
        chosen = ALL_GROUPS if pg == ALL_GROUPS else as_choice(pg, "group", pgs)[0]
        _, worst = cache.skew(key)
        calls, suffix = _calls(cache, key, chosen)
        return figures.skew_calls_figure(calls, int(worst["rank"]) if worst else None, suffix), "", \
            "?" + urlencode({"pg": chosen}), chosen

    @app.callback(Output(ids.URL, "href", allow_duplicate=True), Input(ids.SKEW_GROUPS, "clickData"),
                  State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def drill(click: Any, key: Any) -> Any:
        """A cell opens the timeline of its group's ranks at the step of the cell's longest wait. The cell
        is read from the click's x (column) and y (row): plotly's heatmap clicks carry no per-cell data."""
        key = as_key(key, cache.runs)
        points = click.get("points") if isinstance(click, dict) else None
        point = points[0] if isinstance(points, list) and points else None
        if not isinstance(point, dict) or not isinstance(point.get("x"), str) or point.get("y") is None:
            return no_update
        a = cache.analysis(key)
        cells, _ = transforms.skew_by_group(a.rank_group_waits, cache.hosts(key), cache.group_names(key),
                                            figures.MAX_HEATMAP_RANKS)
        cell = cells.filter((pl.col("column") == point["x"]) & (pl.col("row") == str(point["y"])))
        if cell.height == 0:
            raise BadInput(f"no cell at {str(point['x'])[:40]!r} × {str(point['y'])[:40]!r}")
        rank, pg, step = int(cell["rank"][0]), str(cell["pg"][0]), cell["max_wait_step"][0]
        members = a.process_groups.filter(pl.col("pg").cast(pl.String) == pg)["ranks"].to_list()
        ranks = sorted(set(members[0] if members and members[0] is not None else []) | {rank})[:64]
        return href(key, "timeline", ranks=ranks, step=None if step is None else int(step))
