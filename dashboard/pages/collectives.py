"""Collectives: a filterable, sortable table per (group, op, size) and busbw vs message size.

Filters come from the URL (``?dimension=dp&tier=ib&op=all_reduce&pg=5``; several values comma-separated)
so that the overview's links land on the filtered table; a group's name opens the timeline of its ranks.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

import polars as pl
from dash import Dash, Input, Output, State, dash_table, dcc, html, no_update
from dash.dash_table.Format import Format, Scheme

from commprof.dashboard import ids, scale
from commprof.dashboard.cache import RunCache
from commprof.dashboard.state import BadInput, as_choice, as_key, guarded, href
from commprof.figures import charts as figures

TITLE = "Collectives"
FILTERS = (("dimension", ids.COLL_FILTER_DIMENSION), ("tier", ids.COLL_FILTER_TIER),
           ("op", ids.COLL_FILTER_OP), ("pg", ids.COLL_FILTER_PG))


def _number(places: int) -> Format:
    return Format(precision=places, scheme=Scheme.fixed).group(True)


COLUMNS = [
    {"name": "group (opens its timeline)", "id": "group_link", "presentation": "markdown"},
    {"name": "dimension", "id": "dimension"}, {"name": "tier", "id": "tier"}, {"name": "op", "id": "op"},
    {"name": "message size", "id": "size"},
    {"name": "calls", "id": "calls", "type": "numeric"}, {"name": "ranks", "id": "ranks", "type": "numeric"},
    {"name": "mean duration (ms)", "id": "mean_ms", "type": "numeric", "format": _number(2)},
    {"name": "exposed per step (ms)", "id": "exposed_ms_per_step", "type": "numeric", "format": _number(2)},
    {"name": "busbw (GB/s)", "id": "busbw_gbps", "type": "numeric", "format": _number(2)},
    {"name": "efficiency (%)", "id": "efficiency_pct", "type": "numeric", "format": _number(1)},
]


def _filtered(frame: pl.DataFrame, chosen: dict[str, list[str]]) -> pl.DataFrame:
    for column, values in chosen.items():
        if values and column in frame.columns:
            frame = frame.filter(pl.col(column).cast(pl.String).is_in([str(v) for v in values]))
    return frame


def _options(groups: pl.DataFrame, column: str) -> list[str]:
    return sorted({str(v) for v in groups[column].to_list()}) if groups.height else []


def _group_options(cache: RunCache, key: str, present: list[str]) -> list[tuple[str, str]]:
    """(pg, label) of the groups with collectives in the table, the ones that wait most first (the skew page's
    order and labels), then the others by name: what the group filter finds past 256 ranks by typing."""
    here = set(present)
    ranked = [(pg, label) for pg, label in scale.group_options(cache, key) if pg in here]
    names, seen = cache.group_names(key), {pg for pg, _ in ranked}
    return ranked + [(pg, names.get(pg, pg)) for pg in present if pg not in seen]


def _rows(cache: RunCache, key: str, groups: pl.DataFrame) -> list[dict[str, Any]]:
    if groups.height == 0:
        return []
    pgs = cache.analysis(key).process_groups
    members = {str(pg): list(r or []) for pg, r in zip(pgs["pg"].to_list(), pgs["ranks"].to_list(), strict=True)}
    out = []
    for row in groups.drop("bytes").to_dicts():
        ranks = members.get(str(row["pg"])) or []
        target = href(key, "timeline", ranks=sorted(ranks)[:64]) if ranks else href(key, "timeline")
        row["group_link"] = f"[{row['group']}]({target})"
        out.append(row)
    return out


def layout(cache: RunCache, key: str, query: dict[str, str] | None = None) -> Any:
    query = query or {}
    groups = cache.collective_groups(key)
    controls, problems = [], []
    big = scale.at_scale(cache, key)
    for column, cid in FILTERS:
        options = _options(groups, column)
        labels = cache.group_names(key) if column == "pg" else {}
        try:
            value = as_choice([v for v in query.get(column, "").split(",") if v], column, options)
        except BadInput as err:
            problems.append(f"{err} (filter left empty)")
            value = []
        if column == "pg" and big:  # past 256 ranks: the groups that wait most and the chosen, any other by typing
            listed = scale.find(_group_options(cache, key, options), None, value)
            hint = [html.Span(f"groups listed: the {min(scale.SEARCH_RESULTS, len(options))} of {len(options):,} "
                              "that wait most; type a group's number or name to find another", className="muted")]
        else:
            listed, hint = [{"label": labels.get(o, o), "value": o} for o in options], []
        controls += [html.Label(column if column != "pg" else "group"), dcc.Dropdown(
            id=cid, multi=True, value=value, placeholder="any", style={"minWidth": "170px"}, options=listed), *hint]
    return html.Div([
        html.H2(f"{key} — collectives"),
        html.Div(controls, className="controls"),
        html.Div(" ".join(problems), id=ids.COLL_MESSAGE, className="message"),
        html.P("One row per process group, op and message size, over the analyzed steps; exposed = comm time "
               "with no compute running, per rank-step of the group's ranks.", className="muted"),
        dash_table.DataTable(
            id=ids.COLL_TABLE, columns=COLUMNS, data=[], filter_action="native", sort_action="native",
            sort_mode="multi", page_size=15, style_table={"overflowX": "auto"},
            markdown_options={"link_target": "_self"},
            style_cell={"fontFamily": "system-ui, sans-serif", "fontSize": "13px", "padding": "2px 8px"},
            style_header={"fontWeight": "600", "backgroundColor": "#eceff1", "whiteSpace": "normal", "height": "auto"},
            style_cell_conditional=[{"if": {"column_id": c}, "textAlign": "left"}
                                    for c in ("group_link", "dimension", "tier", "op", "size")],
        ),
        dcc.Graph(id=ids.COLL_SCATTER, config={"displaylogo": False}),
    ])


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(
        Output(ids.COLL_TABLE, "data"), Output(ids.COLL_SCATTER, "figure"),
        Output(ids.COLL_MESSAGE, "children"),
        *[Input(cid, "value") for _, cid in FILTERS], State(ids.RUN_KEY, "data"),
    )
    @guarded(3, 2)
    def refilter(dimension: Any, tier: Any, op: Any, pg: Any, key: Any) -> Any:
        key = as_key(key, cache.runs)
        groups = cache.collective_groups(key)
        chosen = {column: as_choice(value, column, _options(groups, column))
                  for (column, _), value in zip(FILTERS, (dimension, tier, op, pg), strict=True)}
        shown = _filtered(groups, chosen)
        calls = _filtered(cache.analysis(key).collectives, chosen)
        return _rows(cache, key, shown), figures.busbw_figure(calls, cache.group_names(key)), no_update

    @app.callback(Output(ids.COLL_FILTER_PG, "options"), Input(ids.COLL_FILTER_PG, "search_value"),
                  State(ids.COLL_FILTER_PG, "value"), State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def search(text: Any, value: Any, key: Any) -> Any:
        """Past 256 ranks the group filter holds the groups that wait most and the chosen ones; typing finds any
        other by number or name (a smaller run's lists every group and filters itself)."""
        key = as_key(key, cache.runs)
        if not scale.at_scale(cache, key):
            return no_update
        present = _options(cache.collective_groups(key), "pg")
        return scale.find(_group_options(cache, key, present), text, value if isinstance(value, list) else [])

    @app.callback(Output(ids.URL, "search", allow_duplicate=True), *[Input(cid, "value") for _, cid in FILTERS],
                  State(ids.RUN_KEY, "data"), prevent_initial_call=True)
    @guarded(1, None)
    def remember(dimension: Any, tier: Any, op: Any, pg: Any, key: Any) -> Any:
        """The filters into the URL (a reload or a shared link shows the same rows)."""
        key = as_key(key, cache.runs)
        groups = cache.collective_groups(key)
        params = {column: ",".join(as_choice(value, column, _options(groups, column)))
                  for (column, _), value in zip(FILTERS, (dimension, tier, op, pg), strict=True)}
        params = {k: v for k, v in params.items() if v}
        return "?" + urlencode(params) if params else ""
