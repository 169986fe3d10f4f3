"""Compare two runs: step time and its parts, overlap, and exposed time, bytes and busbw per dimension and
tier, side by side with deltas; a note when the two runs are not like for like."""

from __future__ import annotations

from typing import Any
from urllib.parse import urlencode

from dash import Dash, Input, Output, State, ctx, dash_table, dcc, html, no_update

from commprof.dashboard import ids
from commprof.dashboard.cache import RunCache
from commprof.dashboard.state import as_key, guarded, parse_query
from commprof.figures import charts as figures
from commprof.figures import transforms
from commprof.figures.style import fmt_bytes, fmt_gbps, fmt_ms, fmt_pct

TITLE = "Compare"
COLUMNS = ("metric", "run A", "run B", "B − A", "change")


def _fmt(value: float | None, unit: str) -> str:
    if value is None:
        return "–"  # the run has no such dimension or tier (or nothing decided the value)
    if unit == "ms":
        return fmt_ms(value)
    if unit == "%":
        return fmt_pct(value)
    if unit == "bytes":
        return fmt_bytes(value)
    return fmt_gbps(value)


def _delta(value: float | None, unit: str) -> str:
    if value is None:
        return "–"
    if unit == "%":
        return ("+" if value >= 0 else "−") + f"{abs(value):.1f} points"
    text = _fmt(abs(value), unit)
    return ("+" if value >= 0 else "−") + text


def differences(cache: RunCache, a: str, b: str) -> list[str]:
    """Why two runs are not like for like (empty when they are)."""
    fa, fb = cache.analysis(a), cache.analysis(b)
    notes = []
    if fa.facts.world_size != fb.facts.world_size:
        notes.append(f"world sizes differ ({fa.facts.world_size} vs {fb.facts.world_size})")
    for what, col in (("backends", "backend"), ("modes", "mode"), ("GPUs", "gpu_name")):
        va = sorted(set(fa.ranks[col].drop_nulls().to_list()))
        vb = sorted(set(fb.ranks[col].drop_nulls().to_list()))
        if va != vb:
            notes.append(f"{what} differ ({', '.join(map(str, va)) or 'none'} vs {', '.join(map(str, vb)) or 'none'})")
    da = sorted(set(fa.by_dimension["dimension"].to_list()))
    db = sorted(set(fb.by_dimension["dimension"].to_list()))
    if da != db:
        notes.append(f"their groups classify into different dimensions ({', '.join(da)} vs {', '.join(db)})")
    if fa.settings.hta_compat != fb.settings.hta_compat:
        notes.append("one was analyzed with --hta-compat")
    if fa.facts.synthetic != fb.facts.synthetic:
        notes.append("one is synthetic")
    return notes


def layout(cache: RunCache, a: str | None = None, b: str | None = None) -> Any:
    keys = [k for k in cache.keys() if cache.check(k) is None]
    if len(keys) < 2:
        return html.Div([html.H2("Compare"), html.P(
            "Compare needs two runs that can be shown: start the dashboard with both, e.g. "
            "`commprof dashboard RUN_A RUN_B`.", id=ids.COMPARE_MESSAGE, className="callout")])
    problems = [f"run {which} {str(asked)[:80]!r} is not one of the runs served ({', '.join(keys)})"
                for which, asked in (("A", a), ("B", b)) if asked not in (None, "") and asked not in keys]
    a = a if a in keys else keys[0]
    b = b if b in keys and b != a else next(k for k in keys if k != a)
    message = "; ".join(problems) + f": showing {a} and {b}." if problems else ""
    return html.Div([
        html.H2("Compare two runs"),
        html.Div(message, id=ids.COMPARE_PROBLEM, className="message"),
        html.Div([html.Label("run A"), dcc.Dropdown(id=ids.COMPARE_A, options=keys, value=a, clearable=False,
                                                     style={"minWidth": "240px"}),
                  html.Label("run B"), dcc.Dropdown(id=ids.COMPARE_B, options=keys, value=b, clearable=False,
                                                     style={"minWidth": "240px"})], className="controls"),
        html.P(id=ids.COMPARE_NOTE, className="callout"),
        html.P(id=ids.COMPARE_MESSAGE, className="muted"),
        dash_table.DataTable(id=ids.COMPARE_TABLE, columns=[{"name": c, "id": c} for c in COLUMNS],
                             style_cell={"fontFamily": "system-ui, sans-serif", "fontSize": "13px",
                                         "padding": "2px 8px", "textAlign": "right"},
                             style_cell_conditional=[{"if": {"column_id": "metric"}, "textAlign": "left"}],
                             style_header={"fontWeight": "600", "backgroundColor": "#eceff1"}),
        dcc.Graph(id=ids.COMPARE_GRAPH, config={"displaylogo": False}),
    ])


def register(app: Dash, cache: RunCache) -> None:
    @app.callback(
        Output(ids.COMPARE_GRAPH, "figure"), Output(ids.COMPARE_TABLE, "data"), Output(ids.COMPARE_NOTE, "children"),
        Output(ids.COMPARE_MESSAGE, "children"),
        Input(ids.COMPARE_A, "value"), Input(ids.COMPARE_B, "value"),
    )
    @guarded(4, 3)
    def draw(a: Any, b: Any) -> Any:
        shown = [k for k in cache.keys() if cache.check(k) is None]
        a, b = as_key(a, shown), as_key(b, shown)
        deltas = transforms.compare(cache.compare_values(a), cache.compare_values(b))
        rows = [{"metric": r["metric"], "run A": _fmt(r["a"], r["unit"]),
                 "run B": _fmt(r["b"], r["unit"]), "B − A": _delta(r["delta"], r["unit"]),
                 "change": "–" if r["delta_pct"] is None or r["unit"] == "%" else
                 ("+" if r["delta_pct"] >= 0 else "−") + f"{abs(r['delta_pct']):,.1f}%"}
                for r in deltas.iter_rows(named=True)]
        notes = differences(cache, a, b)
        note = ("Not like for like: " + "; ".join(notes) + ". Read the deltas with care."
                if notes else f"{a} and {b} are comparable: same world size, backend, GPUs and dimensions.")
        text = ("Times are means per rank and step; – = the run has no such dimension or tier, or the value is "
                "unknown (e.g. bandwidth without message sizes).")
        return figures.compare_figure(deltas, a, b), rows, note, text

    @app.callback(Output(ids.URL, "search", allow_duplicate=True), Input(ids.COMPARE_A, "value"),
                  Input(ids.COMPARE_B, "value"), State(ids.URL, "search"), prevent_initial_call="initial_duplicate")
    @guarded(1, None)
    def remember(a: Any, b: Any, search: Any) -> Any:
        """Runs A and B into the URL (the page's first draw too: a bare /compare becomes a link to it)."""
        shown = [k for k in cache.keys() if cache.check(k) is None]
        wanted = "?" + urlencode({"a": as_key(a, shown), "b": as_key(b, shown)})
        asked = parse_query(search)
        if ctx.triggered_id is None and any(v not in shown for v in (asked.get("a"), asked.get("b")) if v):
            return no_update  # the first draw keeps a URL that asked for a run not served: its message says so
        return no_update if parse_query(wanted) == asked else wanted
