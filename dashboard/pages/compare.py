"""Compare two runs: step time and exposed comm per dimension and tier, side by side with deltas."""

from __future__ import annotations

from typing import Any

from dash import Dash, Input, Output, dash_table, dcc, html, no_update

from commprof.dashboard import figures, ids, transforms
from commprof.dashboard.cache import RunCache

TITLE = "Compare"


def layout(cache: RunCache, a: str | None = None, b: str | None = None) -> Any:
    keys = cache.keys()
    if len(keys) < 2:
        return html.Div([html.H2("Compare"), html.P(
            "Compare needs two runs: start the dashboard with both, e.g. `commprof dashboard RUN_A RUN_B`.",
            id=ids.COMPARE_MESSAGE, className="callout")])
    a = a if a in keys else keys[0]
    b = b if b in keys else keys[1]
    return html.Div([
        html.H2("Compare two runs"),
        html.Div([html.Label("run A "), dcc.Dropdown(id=ids.COMPARE_A, options=keys, value=a, clearable=False,
                                                      style={"minWidth": "240px"}),
                  html.Label("run B "), dcc.Dropdown(id=ids.COMPARE_B, options=keys, value=b, clearable=False,
                                                      style={"minWidth": "240px"})], className="controls"),
        html.P(id=ids.COMPARE_MESSAGE, className="callout"),
        dcc.Graph(id=ids.COMPARE_GRAPH),
        dash_table.DataTable(id=ids.COMPARE_TABLE, columns=[{"name": c, "id": c} for c in (
            "metric", "a_ms", "b_ms", "delta_ms", "delta_pct")], style_cell={"fontFamily": "monospace"}),
    ])


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(
        Output(ids.COMPARE_GRAPH, "figure"), Output(ids.COMPARE_TABLE, "data"), Output(ids.COMPARE_MESSAGE,
                                                                                        "children"),
        Input(ids.COMPARE_A, "value"), Input(ids.COMPARE_B, "value"),
    )
    def draw(a: str, b: str) -> Any:
        if a not in cache.runs or b not in cache.runs:
            return no_update, no_update, "Pick two of the runs this dashboard was started with."
        problems = [m for m in (cache.check(a), cache.check(b)) if m]
        if problems:
            return figures.compare_figure(transforms.compare(*[_empty()] * 2), a, b), [], " ".join(problems)
        deltas = transforms.compare(cache.compare_values(a), cache.compare_values(b))
        rows = [{"metric": r["metric"], "a_ms": round(r["a_ns"] / 1e6, 4), "b_ms": round(r["b_ns"] / 1e6, 4),
                 "delta_ms": round(r["delta_ns"] / 1e6, 4),
                 "delta_pct": None if r["delta_pct"] is None else round(r["delta_pct"], 1)}
                for r in deltas.iter_rows(named=True)]
        note = ("B − A; 'unknown' rows are groups whose dimension or tier nothing decided: analyze with --layout "
                "or --network to classify them.") if any("unknown" in r["metric"] for r in rows) else "B − A."
        return figures.compare_figure(deltas, a, b), rows, note


def _empty() -> Any:
    import polars as pl

    return pl.DataFrame(schema={"metric": pl.String, "value_ns": pl.Float64})
