"""Skew: each rank's wait per matched collective; the rank the others wait for highlighted."""

from __future__ import annotations

from typing import Any

from dash import Dash, dcc, html

from commprof.dashboard import figures, ids
from commprof.dashboard.cache import RunCache
from commprof.dashboard.style import fmt_ns

TITLE = "Skew"


def layout(cache: RunCache, key: str) -> Any:
    waits, worst = cache.skew(key)
    a = cache.analysis(key)
    if worst:
        text = (f"Straggler: rank {worst['rank']} — the others wait {fmt_ns(worst['caused_wait_ns_per_step'])} "
                f"per step for it; last to arrive at {worst['times_last']} matched collective(s).")
    elif waits.height:
        text = "No rank makes the others wait: every matched collective starts together."
    else:
        text = "No collective was matched across ranks."
    how = {"seq": "by (pg, seq) from the trace", "order": "by their order in each group (the trace has no seq)",
           "seq and order": "by (pg, seq) where the trace has it, else by their order in each group"}
    clocks = a.host_clocks
    clock_text = "" if clocks.height < 2 else " Host clocks aligned from matched end times: " + "; ".join(
        f"{r['host']} {r['offset_ns'] / 1e3:+.1f} µs (residual {r['residual_ns'] / 1e3:.1f} µs, {r['fit']})"
        for r in clocks.iter_rows(named=True)) + "."
    return html.Div([
        html.H2(f"{key} — skew"),
        html.P(text, id=ids.SKEW_STRAGGLER, className="callout"),
        html.P(f"Calls are matched across ranks {how.get(a.match_by, 'nowhere')}. A rank's wait = the latest "
               "start among the matched calls - its own start: time blocked on a later rank, not moving data."
               + clock_text, className="muted"),
        dcc.Graph(id=ids.SKEW_HEATMAP, figure=figures.skew_figure(waits, worst["rank"] if worst else None)),
    ])


def register(app: Dash, cache: RunCache) -> None:
    """Static page."""
