"""Skew: how long each rank waits for later ranks, per process group (columns named by group and
dimension), and per matched call of one group; how calls were matched, said plainly (by sequence number,
or by their order when the trace has none). ``?pg=5`` picks the group (default: the top finding's group in
the dimension it names, else the group that waits most), written back to the URL when another is chosen;
a cell of the rank × group heatmap opens the timeline of that group. Past 256 ranks (dashboard/scale.py): the
dropdown holds the groups that wait most (typing finds any other), a group's calls show at most 64 of its
ranks (those the others wait for, then those that wait most), the heatmap the 40 hosts and 30 groups that wait
most, and a table the 20 groups that wait most (the analysis' group_waits), each "N of M" said."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import polars as pl
from dash import Dash, Input, Output, State, dcc, html, no_update

from commprof.dashboard import ids, scale
from commprof.dashboard.cache import RunCache
from commprof.dashboard.state import BadInput, as_choice, as_key, guarded, href
from commprof.figures import charts as figures
from commprof.figures import transforms
from commprof.figures.style import fmt_ms, natural_key
from commprof.report.analysis_text import fmt_ms as ms_cell  # the unit is in the column's name

TITLE = "Skew"
ALL_GROUPS = "all"
MATCH_TEXT = {
    "seq": "Calls are matched across ranks by (group, sequence number) from the trace.",
    "order": "Calls are matched across ranks by their order in each group: the trace carries no sequence numbers, "
             "so a rank that skipped or added a call would shift every later match.",
    "seq and order": "Calls are matched by (group, sequence number) where the trace has it, else by their order "
                     "in each group.",
}
HEATMAP_HOSTS = 40  # past 256 ranks: rows of the host × group heatmap
HEATMAP_GROUPS = 30  # and its columns
LATE_RANKS = 16  # of a group's calls past 64 ranks: the ranks the others wait for, at most this many first


def _calls(cache: RunCache, key: str, pg: str) -> tuple[pl.DataFrame, str, str | None]:
    """The per-call heatmap's rows: one group's calls, or every call (rolled up to hosts beyond 64 ranks)."""
    waits, _ = cache.skew(key)
    if pg != ALL_GROUPS:
        calls, suffix = waits.filter(pl.col("pg").cast(pl.String) == pg), f" — {cache.group_names(key).get(pg, pg)}"
    elif waits["rank"].n_unique() <= figures.MAX_HEATMAP_RANKS:
        return waits, " — every group", None
    else:  # beyond 64 ranks: the ranks of the group that waits most (a full run's rows would be unreadable)
        top = cache.analysis(key).rank_group_waits.sort("wait_ns_per_step", descending=True).head(1)
        if top.height == 0:
            return waits.head(0), "", None
        best = str(top["pg"][0])
        calls, suffix = waits.filter(pl.col("pg").cast(pl.String) == best), (
            f" — {cache.group_names(key).get(best, best)}, the group that waits most (pick another above)")
    if scale.at_scale(cache, key):
        calls, subtitle = _worst_ranks(cache, key, calls)
        return calls, suffix, subtitle
    return calls, suffix, None


def _worst_ranks(cache: RunCache, key: str, calls: pl.DataFrame) -> tuple[pl.DataFrame, str | None]:
    """One group's calls past 256 ranks: at most 64 of its ranks, those the others wait for most (the
    analysis' stragglers table) first, then those that wait most in this group (rank_group_waits)."""
    ranks = calls["rank"].unique()
    if ranks.len() <= figures.MAX_HEATMAP_RANKS:
        return calls, None
    a = cache.analysis(key)
    pgs = calls["pg"].cast(pl.String).unique().to_list()
    late = (a.stragglers.filter(pl.col("rank").is_in(ranks.implode()) & (pl.col("caused_wait_ns_per_step") > 0))
            .sort("caused_wait_ns_per_step", "rank", descending=[True, False])["rank"].head(LATE_RANKS).to_list())
    waiting = (a.rank_group_waits.filter(pl.col("pg").is_in(pgs) & pl.col("rank").is_in(ranks.implode()))
               .sort("wait_ns_per_step", "rank", descending=[True, False])["rank"].to_list())
    keep = list(dict.fromkeys([*late, *waiting]))[:figures.MAX_HEATMAP_RANKS]
    return calls.filter(pl.col("rank").is_in(keep)), (
        f"{len(keep)} of its {ranks.len():,} ranks: those the others wait for first, then those that wait most")


def _worst_cells(cache: RunCache, key: str, cells: pl.DataFrame, by: str, pg: str) -> tuple[pl.DataFrame, str]:
    """The host × group heatmap past 256 ranks: the HEATMAP_GROUPS groups that wait most (the analysis'
    group_waits; the chosen group too) and, of their cells, the HEATMAP_HOSTS rows with the longest wait."""
    waits = cache.analysis(key).group_waits
    columns = waits.head(HEATMAP_GROUPS)["pg"].to_list()
    if pg != ALL_GROUPS and pg not in columns and pg in set(waits["pg"].to_list()):
        columns.append(pg)
    part = cells.filter(pl.col("pg").cast(pl.String).is_in(columns))
    # each group's own worst row first (else a group that waits on one host only would lose its column to
    # groups that wait everywhere), then the longest waits of all
    ranked = part.sort("wait_ns_per_step", "row", descending=[True, False])
    own = ranked.group_by("pg", maintain_order=True).first()["row"].to_list()
    rows = list(dict.fromkeys([*own, *ranked["row"].to_list()]))[:max(HEATMAP_HOSTS, len(own))]
    part = part.filter(pl.col("row").is_in(rows))
    what = "hosts" if by == "host" else "ranks"
    return part, (f"Below, per {by}: rows are " + scale.worst_of(len(rows), cells["row"].n_unique(), what,
                                                              "each group's longest wait, then the longest of all")
                  + "; columns are " + scale.worst_of(len(columns), waits.height, "groups",
                                                      "their members' mean wait per step") + ".")


def worst_groups_table(cache: RunCache, key: str) -> Any:
    """The groups that wait most (the analysis' group_waits, its order), each a link to its calls."""
    waits = cache.analysis(key).group_waits
    names = cache.group_names(key)
    rows = waits.head(scale.WORST_GROUPS).to_dicts()
    head = ["group", "dim", "tier", "ranks", "mean wait ms/step", "longest ms/step (rank)", "matched calls"]
    body = [html.Tr([html.Td(html.A(names.get(r["pg"], r["pg"]), href=href(key, "skew", pg=r["pg"])), className="text"),
                     html.Td(r["dimension"], className="text"), html.Td(r["tier"], className="text"),
                     html.Td(f"{r['ranks']:,}"), html.Td(ms_cell(r["wait_ns_per_step"])),
                     html.Td(f"{ms_cell(r['max_wait_ns_per_step'])} ({r['max_wait_rank']})"),
                     html.Td(f"{r['matched_calls']:,}")]) for r in rows]
    title = "Groups that wait most: " + scale.worst_of(len(rows), waits.height, "groups",
                                                       "their members' mean wait for later ranks per step")
    return html.Div([html.H3(title), html.Div(html.Table(
        [html.Thead(html.Tr([html.Th(c, className="text" if i < 3 else "") for i, c in enumerate(head)])),
         html.Tbody(body)], className="grid"), className="scroll")], id=ids.SKEW_WORST_GROUPS)


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
    big = scale.at_scale(cache, key)
    said = None
    if big:
        cells, said = _worst_cells(cache, key, cells, by, pg)
    straggler = int(worst["rank"]) if worst else None
    calls, suffix, subtitle = _calls(cache, key, pg)
    options = (scale.find(scale.group_options(cache, key), None, None if pg == ALL_GROUPS else pg) if big else
               [{"label": f"{names.get(p, p)} · {d}", "value": p} for p, d in _dimensions(a, pgs)])
    return html.Div([
        html.H2(f"{key} — skew"),
        html.P(text, id=ids.SKEW_STRAGGLER, className="callout"),
        html.Div(problem, id=ids.SKEW_MESSAGE, className="message"),
        dcc.Store(id=ids.SKEW_SHOWN, data=pg),  # the group the page was drawn with
        # the chosen group first: it is what a finding's link or a click came for
        html.Div([html.Label("calls of group"), dcc.Dropdown(
            id=ids.SKEW_PG, clearable=False, value=pg, style={"minWidth": "420px"},
            options=[{"label": "every group", "value": ALL_GROUPS}] + options)]
            + ([html.Span(f"listed: the {min(scale.SEARCH_RESULTS, len(pgs))} of {len(pgs):,} groups that wait "
                          "most; type a group's number or name to find another", className="muted")] if big else []),
            className="controls"),
        dcc.Graph(id=ids.SKEW_HEATMAP, figure=figures.skew_calls_figure(calls, straggler, suffix, subtitle=subtitle),
                  config={"displaylogo": False}),
        html.P(MATCH_TEXT.get(a.match_by, "No call could be matched across ranks."), id=ids.SKEW_MATCH,
               className="callout" if a.match_by in ("order", "seq and order") else "muted"),
        html.P("A rank's wait = the latest start among the matched calls − its own start: time blocked on a later "
               "rank, not moving data." + clock_text, className="muted"),
        html.P(said, className="muted", id=ids.SKEW_SCALE) if said else None,
        dcc.Graph(id=ids.SKEW_GROUPS, figure=figures.skew_group_figure(cells, by, straggler),
                  config={"displaylogo": False}),
        worst_groups_table(cache, key) if big else None,
    ])


def _dimensions(a: Any, pgs: list[str]) -> list[tuple[str, str]]:
    dims = dict(zip(a.process_groups["pg"].cast(pl.String).to_list(), a.process_groups["dimension"].to_list(),
                    strict=True))
    return [(p, str(dims.get(p) or "unknown")) for p in pgs]


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(Output(ids.SKEW_PG, "options"), Input(ids.SKEW_PG, "search_value"), State(ids.SKEW_PG, "value"),
                  State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def search(text: Any, value: Any, key: Any) -> Any:
        """Past 256 ranks the dropdown holds the groups that wait most; typing finds any other by number or
        name (a smaller run's dropdown lists every group and filters itself)."""
        key = as_key(key, cache.runs)
        if not scale.at_scale(cache, key):
            return no_update
        keep = value if isinstance(value, str) and value != ALL_GROUPS else None
        return [{"label": "every group", "value": ALL_GROUPS}] + scale.find(scale.group_options(cache, key), text,
                                                                            keep)

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
        calls, suffix, subtitle = _calls(cache, key, chosen)
        return figures.skew_calls_figure(calls, int(worst["rank"]) if worst else None, suffix, subtitle=subtitle), \
            "", \
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
