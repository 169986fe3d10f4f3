"""Collectives: a filterable, sortable table per (pg, op, size) and busbw vs message size."""

from __future__ import annotations

from typing import Any

import polars as pl
from dash import Dash, Input, Output, State, dash_table, dcc, html, no_update

from commprof.dashboard import figures, ids
from commprof.dashboard.cache import RunCache

TITLE = "Collectives"
FILTERS = (("dimension", ids.COLL_FILTER_DIMENSION), ("tier", ids.COLL_FILTER_TIER),
           ("op", ids.COLL_FILTER_OP), ("pg", ids.COLL_FILTER_PG))
COLUMNS = ("pg", "dimension", "tier", "op", "bytes", "calls", "ranks", "mean_us", "exposed_us_per_step",
           "busbw_gbps")


def _filtered(frame: pl.DataFrame, chosen: dict[str, list[str] | None]) -> pl.DataFrame:
    for column, values in chosen.items():
        if values and column in frame.columns:
            frame = frame.filter(pl.col(column).cast(pl.String).is_in([str(v) for v in values]))
    return frame


def layout(cache: RunCache, key: str) -> Any:
    groups = cache.collective_groups(key)
    controls = []
    for column, cid in FILTERS:
        values = sorted({str(v) for v in groups[column].to_list()}) if groups.height else []
        controls += [html.Label(f"{column} "), dcc.Dropdown(id=cid, multi=True, options=values, value=[],
                                                             placeholder="any", style={"minWidth": "160px"})]
    return html.Div([
        html.H2(f"{key} — collectives"),
        html.Div(controls, className="controls"),
        dash_table.DataTable(
            id=ids.COLL_TABLE, columns=[{"name": c, "id": c} for c in COLUMNS],
            data=groups.to_dicts() if groups.height else [], filter_action="native", sort_action="native",
            sort_mode="multi", page_size=15, style_table={"overflowX": "auto"},
            style_cell={"fontFamily": "monospace", "fontSize": "12px", "padding": "2px 6px"},
        ),
        dcc.Graph(id=ids.COLL_SCATTER),
    ])


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(
        Output(ids.COLL_TABLE, "data"), Output(ids.COLL_SCATTER, "figure"),
        *[Input(cid, "value") for _, cid in FILTERS], State(ids.RUN_KEY, "data"),
    )
    def refilter(dimension: Any, tier: Any, op: Any, pg: Any, key: str) -> Any:
        if key not in cache.runs:
            return no_update, no_update
        chosen = {"dimension": dimension, "tier": tier, "op": op, "pg": pg}
        groups = _filtered(cache.collective_groups(key), chosen)
        calls = _filtered(cache.analysis(key).collectives, chosen)
        return (groups.to_dicts() if groups.height else []), figures.busbw_figure(calls)
