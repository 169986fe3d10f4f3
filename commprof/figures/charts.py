"""Pure figure builders: polars DataFrame in, ``go.Figure`` out. No Dash, no I/O; tests call them directly.

Units follow style.py (ms, bytes with SI prefixes, GB/s). Every figure's height is bounded so that no
canvas passes the browser's 8192-px limit, whatever the run's size; heatmaps roll ranks up to hosts beyond
``MAX_HEATMAP_RANKS``.
"""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import polars as pl

from commprof.figures import style, transforms
from commprof.figures.base import MAX_FIGURE_PX, MAX_HEATMAP_RANKS  # noqa: F401 - re-exported
from commprof.figures.base import base_layout as _base
from commprof.figures.base import empty as _empty
from commprof.figures.base import note as _note
from commprof.figures.style import PART_COLOURS, PART_LABELS, UNKNOWN
from commprof.figures.topology import (  # noqa: F401 - re-exported: pages call figures.*
    MAX_LINKS,
    RANK_LINKS_UP_TO,
    heaviest_links,
    topology_figure,
    traffic_figure,
)

PARTS = ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")
MAX_SCATTER_POINTS = 4_000
MAX_SKEW_COLUMNS = 300


def breakdown_figure(rank_summary: pl.DataFrame, title: str | None = None) -> go.Figure:
    """Stacked bars per rank: the mean per-step ms of the five parts (they add up to the step time).
    A bar's customdata is its rank (a click opens the timeline on it)."""
    title = title or "Mean step time per rank, split into its five parts (click a rank for its timeline)"
    if rank_summary.height == 0:
        return _empty(title, "no steps analyzed")
    ranks = [str(r) for r in rank_summary["rank"].to_list()]
    fig = go.Figure()
    for part in PARTS:
        fig.add_trace(go.Bar(
            name=PART_LABELS[part], x=ranks, y=(rank_summary[part].cast(pl.Float64) / 1e6).to_list(),
            marker_color=PART_COLOURS[part], customdata=rank_summary["rank"].to_list(),
            marker_line={"width": 0.5 if len(ranks) <= 64 else 0, "color": "#ffffff"},
            hovertemplate="rank %{x}<br>" + PART_LABELS[part] + " %{y:.3f} ms per step<extra></extra>",
        ))
    fig.update_layout(barmode="stack", xaxis_title="rank", yaxis_title="ms per step", xaxis_type="category",
                      bargap=0.15 if len(ranks) <= 64 else 0.0,
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right",
                              "traceorder": "normal"}, height=380)
    return _base(fig, title, margin={"t": 80, "l": 70, "r": 30, "b": 50})


def window_trend_figure(rows: list[dict[str, object]]) -> go.Figure:
    """record --every/--on-demand: step time and exposed communication per window (ms per rank-step), by the
    optimizer step each window opened at; a window's findings in its hover."""
    title = "Windows: step time and exposed communication (ms per rank-step), window by window"
    shown = [r for r in rows if r.get("step_ns") is not None]
    if not shown:
        return _empty(title, "no window with an analyzed step")
    timed = all(r.get("step") is None and r.get("seconds") is not None for r in shown)
    x = [r.get("seconds") if timed else r.get("step") for r in shown]
    names = [str(r.get("window")) for r in shown]
    found = ["<br>".join(f"{f['severity']} {f['title']}" for f in r.get("findings") or []) or "no finding"  # type: ignore[attr-defined]
             for r in shown]
    fig = go.Figure()
    for label, key, colour in (("step time", "step_ns", "#37474f"), ("exposed comm", "exposed_comm_ns", "#111111")):
        fig.add_trace(go.Scatter(
            x=x, y=[float(r[key]) / 1e6 if r.get(key) is not None else None for r in shown],  # type: ignore[arg-type]
            mode="lines+markers", name=label, line={"color": colour}, customdata=list(zip(names, found, strict=True)),
            hovertemplate=(f"%{{customdata[0]}} (step %{{x}})<br>{label} %{{y:.2f}} ms<br>%{{customdata[1]}}"
                           "<extra></extra>")))
    fig.update_layout(xaxis={"title": "seconds after the start" if timed else "optimizer step the window opened at"},
                      yaxis={"title": "ms per rank-step",
                      "rangemode": "tozero"}, height=320, legend={"orientation": "h", "y": 1.12, "x": 0})
    _base(fig, title, margin={"t": 80, "l": 70, "r": 30, "b": 60})
    return fig


def exposed_by_figure(frame: pl.DataFrame, by: str) -> go.Figure:
    """Exposed (wait and transfer) and overlapped comm ms per rank-step, one bar group per dimension or tier;
    a bar's customdata is its dimension/tier (a click opens the collectives filtered to it)."""
    title = f"Comm per {by} (ms per rank-step; click a bar for its collectives)"
    if frame.height == 0:
        return _empty(title, "no communication")
    colour = style.dimension_colour if by == "dimension" else style.tier_colour
    names = [str(v) for v in frame[by].to_list()]
    ms = {c: (frame[c].cast(pl.Float64) / 1e6).to_list() for c in
          ("exposed_transfer_ns_per_step", "exposed_wait_ns_per_step", "overlapped_ns_per_step")}
    colours = [colour(n) for n in names]
    fig = go.Figure([
        go.Bar(name="exposed · transfer", x=names, y=ms["exposed_transfer_ns_per_step"], marker_color=colours,
               offsetgroup="exposed", customdata=names,
               hovertemplate=f"{by} %{{x}}<br>%{{y:.3f}} ms exposed transfer per step<extra></extra>"),
        go.Bar(name="exposed · waiting for late ranks", x=names, y=ms["exposed_wait_ns_per_step"],
               marker={"color": colours, "pattern": {"shape": "x", "fgcolor": "#ffffff"}}, offsetgroup="exposed",
               base=ms["exposed_transfer_ns_per_step"], customdata=names,
               hovertemplate=f"{by} %{{x}}<br>%{{y:.3f}} ms per step waiting for a later rank<extra></extra>"),
        go.Bar(name="overlapped (hidden)", x=names, y=ms["overlapped_ns_per_step"],
               marker={"color": colours, "opacity": 0.35}, offsetgroup="overlapped", customdata=names,
               hovertemplate=f"{by} %{{x}}<br>%{{y:.3f}} ms per step hidden behind compute<extra></extra>"),
    ])
    # the bars take their dimension's (tier's) colour: the legend explains the three styles in grey
    for trace in fig.data:
        trace.showlegend = False
    for name, group, marker in (
            ("exposed · transfer", "exposed", {"color": "#616161"}),
            ("exposed · waiting for late ranks", "exposed", {"color": "#616161",
                                                             "pattern": {"shape": "x", "fgcolor": "#ffffff"}}),
            ("overlapped (hidden)", "overlapped", {"color": "#616161", "opacity": 0.35})):
        fig.add_trace(go.Bar(name=name, x=[names[0]], y=[0], marker=marker, offsetgroup=group, showlegend=True,
                             hoverinfo="skip"))
    fig.update_layout(barmode="group", yaxis_title="ms per step", xaxis={"title": by, "type": "category"},
                      legend={"orientation": "h", "y": -0.25, "x": 0}, height=380)
    _base(fig, title, margin={"t": 80, "l": 70, "r": 20, "b": 90})
    if set(names) == {UNKNOWN}:
        hint = ("start the dashboard with --layout (e.g. --layout tp=2,dp=2)" if by == "dimension"
                else "start the dashboard with --network ib|roce|ethernet")
        _note(fig, f"every {by} is unknown: {hint}")
    return fig


def dimension_tier_figure(frame: pl.DataFrame) -> go.Figure:
    """Per dimension (x), one bar per tier it runs on: exposed transfer, exposed waiting for late ranks (hatched)
    and overlapped comm (faint) stacked, in ms per rank-step; the bars take their tier's colour."""
    title = "Comm per dimension and tier (ms per rank-step): exposed transfer, waiting (hatched), overlapped (faint)"
    if frame.height == 0:
        return _empty(title, "no communication")
    fig = go.Figure()
    for (tier,), part in sorted(frame.partition_by("tier", as_dict=True).items(), key=lambda kv: str(kv[0])):
        names = [str(d) for d in part["dimension"].to_list()]
        ms = {c: (part[c].cast(pl.Float64).fill_null(0.0) / 1e6).to_list() for c in
              ("exposed_transfer_ns_per_step", "exposed_wait_ns_per_step", "overlapped_ns_per_step")}
        colour = style.tier_colour(str(tier))
        below = [0.0] * len(names)
        for column, label, marker in (
                ("exposed_transfer_ns_per_step", "exposed transfer", {"color": colour}),
                ("exposed_wait_ns_per_step", "exposed waiting", {"color": colour,
                                                                 "pattern": {"shape": "x", "fgcolor": "#ffffff"}}),
                ("overlapped_ns_per_step", "overlapped", {"color": colour, "opacity": 0.35})):
            fig.add_trace(go.Bar(
                name=f"{tier} · {label}", x=names, y=ms[column], base=below, offsetgroup=str(tier), marker=marker,
                legendgroup=str(tier), hovertemplate=f"%{{x}} on {tier}<br>%{{y:.3f}} ms per step {label}"
                                                     "<extra></extra>"))
            below = [b + v for b, v in zip(below, ms[column], strict=True)]
    fig.update_layout(barmode="group", yaxis_title="ms per rank-step", xaxis={"title": "dimension", "type": "category"},
                      legend={"orientation": "h", "y": -0.25, "x": 0}, height=400)
    return _base(fig, title, margin={"t": 60, "l": 70, "r": 20, "b": 110})


def _category_style(category: str) -> tuple[str, str, float]:
    """(legend name, colour, line width px) of a timeline category."""
    if category == "compute":
        return "compute", style.COMPUTE_COLOUR, 10
    if category == "memory":
        return "memory copy", style.MEMORY_COLOUR, 10
    if category == "exposed":
        return "exposed part of comm", style.EXPOSED_COLOUR, 4
    dimension = category.removeprefix("comm:")
    return f"comm · {dimension}", style.dimension_colour(dimension), 10


# Scattergl draws on a WebGL canvas at twice the figure's pixels (plotly's plotGlPixelRatio): a timeline
# figure of at most 4,000 px keeps that canvas under the browser's 8,192-px limit.
MAX_TIMELINE_PX = 4000


def timeline_lane_px(lanes: int) -> int:
    return 22 if lanes <= 64 else max(6, min(14, (MAX_TIMELINE_PX - 130) // max(lanes, 1)))


def timeline_figure(segments: pl.DataFrame, rows: pl.DataFrame, origin_ns: int, window: tuple[int, int],
                    steps: pl.DataFrame | None = None) -> go.Figure:
    """Ranks × lanes; one Scattergl line trace per category, segments separated by gaps (NaN).

    Rows are drawn at y = 0, 1, 2 … in their order (whatever their ids in the run), the y range is pinned
    to exactly those lanes, and the height grows with the lanes up to MAX_FIGURE_PX."""
    position = {int(r): i for i, r in enumerate(rows["row"].to_list())}
    fig = go.Figure()
    present = set(segments["category"].unique().to_list()) if segments.height else set()
    order = [c for c in ("compute", "memory") if c in present] + sorted(
        c for c in present if c.startswith("comm:")) + (["exposed"] if "exposed" in present else [])
    for category in order:
        seg = segments.filter(pl.col("category") == category)
        name, colour, width = _category_style(category)
        offset = 0.3 if category == "exposed" else 0.0  # just under the comm bar (y grows downwards)
        n = seg.height
        x = np.empty(3 * n, dtype=np.float64)
        x[0::3] = (seg["start_ns"].to_numpy() - origin_ns) / 1e6
        x[1::3] = (seg["end_ns"].to_numpy() - origin_ns) / 1e6
        x[2::3] = np.nan
        lane = np.array([position[int(r)] for r in seg["row"].to_list()], dtype=np.float64)
        y = np.repeat(lane + offset, 3)
        y[2::3] = np.nan
        trace = go.Scattergl(x=x, y=y, mode="lines", name=name, line={"color": colour, "width": width},
                             connectgaps=False)
        if category.startswith("comm:"):
            hover = seg["hover"].fill_null("").to_list() if "hover" in seg.columns else [""] * n
            # many lanes: the text once per segment (at its start), or the payload passes 5 MB at 256 lanes
            spots = (1, 1, 0) if rows.height <= 64 else (1, 0, 0)
            trace.update(text=[h if spot else "" for h in hover for spot in spots],
                         hovertemplate="%{text}<extra></extra>")
        else:
            trace.update(hoverinfo="skip")
        fig.add_trace(trace)
    lanes = max(rows.height, 1)
    height = min(MAX_TIMELINE_PX, 130 + timeline_lane_px(lanes) * lanes)
    lo, hi = ((window[0] - origin_ns) / 1e6, (window[1] - origin_ns) / 1e6)
    fig.update_layout(
        height=height, xaxis={"range": [lo, hi], "title": "ms since the run's first event", "side": "bottom"},
        yaxis={"tickvals": list(range(rows.height)), "ticktext": rows["label"].to_list(),
               "range": [lanes - 0.5, -0.5], "autorange": False, "fixedrange": True, "showgrid": False,
               "zeroline": False, "tickfont": {"size": 11 if lanes <= 64 else 9}},
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0},
        # the server sets the window (a zoom, a step, a reset to the step): a constant uirevision would keep
        # the browser's last zoom (a reset showed the whole run while the dropdown said the step)
        uirevision=f"{window[0]}-{window[1]}",
        dragmode="zoom", showlegend=True,
    )
    _mark_steps(fig, steps, origin_ns, window)
    return _base(fig, "Timeline — one compute and one comm lane per rank; black = exposed comm, drawn to scale",
                 margin={"t": 70, "l": 190, "r": 20, "b": 50})


def _mark_steps(fig: go.Figure, steps: pl.DataFrame | None, origin_ns: int, window: tuple[int, int]) -> None:
    """A dashed line where each step starts (and the last one ends) inside the window, named at the top of
    the plot when the step is wide enough on screen for its name (no label over another)."""
    if steps is None or steps.height == 0:
        return
    lo, hi = window
    span = max(hi - lo, 1)
    for step, start, end in steps.select("step", "start_ns", "end_ns").iter_rows():
        for at in (start, end):
            if lo <= at <= hi:
                fig.add_vline(x=(at - origin_ns) / 1e6, line={"color": "#37474f", "width": 1, "dash": "dash"})
        shown_lo, shown_hi = max(start, lo), min(end, hi)
        if (shown_hi - shown_lo) / span >= 0.08:
            fig.add_annotation(x=(shown_lo - origin_ns) / 1e6, xref="x", xanchor="left", y=1, yref="paper",
                               yanchor="top", text=f"step {step}", showarrow=False, bgcolor="rgba(255,255,255,0.8)",
                               font={"size": 11, "color": "#37474f"})


def busbw_figure(calls: pl.DataFrame, group_names: dict[str, str] | None = None) -> go.Figure:
    """Bus bandwidth of each call against its message size (log x), coloured by dimension, with a
    dashed line at each present tier's nominal peak."""
    title = "Bus bandwidth of each call vs its message size"
    pts = calls.filter(pl.col("bytes").is_not_null() & pl.col("busbw_gbps").is_not_null() & (pl.col("bytes") > 0))
    if pts.height == 0:
        return _empty(title, "no calls with a known size and bandwidth")
    if pts.height > MAX_SCATTER_POINTS:  # every k-th call: the cloud's shape at a payload the browser draws fast
        title += f" — {math.ceil(pts.height / math.ceil(pts.height / MAX_SCATTER_POINTS)):,} of {pts.height:,} calls"
        pts = pts.gather_every(math.ceil(pts.height / MAX_SCATTER_POINTS))
    names = group_names or {}
    pts = pts.with_columns(pl.format(
        "rank {} · {} · {}<br>dimension {} · tier {}<br>{}", "rank", "op",
        pl.col("pg").cast(pl.String).replace(names), "dimension", "tier",
        transforms.size_text("bytes")).alias("_text"))
    fig = go.Figure()
    for (dimension,), part in sorted(pts.partition_by("dimension", as_dict=True).items(), key=lambda kv: str(kv[0])):
        fig.add_trace(go.Scattergl(
            x=part["bytes"].to_list(), y=part["busbw_gbps"].to_list(), mode="markers", name=f"{dimension}",
            marker={"color": style.dimension_colour(dimension), "size": 6, "opacity": 0.7},
            text=part["_text"].to_list(), hovertemplate="%{text} · busbw %{y:.2f} GB/s<extra></extra>",
        ))
    peaks = pts.filter(pl.col("peak_gbps").is_not_null()).group_by("tier").agg(pl.col("peak_gbps").max()).sort("tier")
    for tier, peak in peaks.iter_rows():
        fig.add_hline(y=peak, line_dash="dash", line_color=style.tier_colour(tier),
                      annotation_text=f"{tier} peak {peak:g} GB/s", annotation_position="top left")
    fig.update_layout(xaxis={"type": "log", "title": "message size (bytes)", "exponentformat": "SI"},
                      yaxis={"title": "busbw (GB/s)"}, legend_title="dimension", height=420)
    _base(fig, title, margin={"t": 80, "l": 70, "r": 30, "b": 60})
    if peaks.height == 0:
        _note(fig, "no tier with a known peak here (loopback/unknown): start the dashboard with --peak TIER=GB/s")
    return fig


def skew_group_figure(cells: pl.DataFrame, by: str, straggler: int | None) -> go.Figure:
    """Rank (or host) × process group: each row's wait per step for later ranks in that group (ms).
    Columns "tp · pg 1" in dimension then numeric group order, rows in numeric order; a click is read from
    its x (column) and y (row) by the page (plotly's heatmap clicks carry no per-cell customdata)."""
    title = "Wait for later ranks per step (ms), per " + ("rank" if by == "rank" else "host (its worst rank)") + \
        " and process group (click a cell: the timeline of that group)"
    if cells.height == 0:
        return _empty(title, "no collective was matched across ranks")
    ordered = cells.select("column", "dimension", "pg").unique()
    columns = [c for _, _, c in sorted(zip(ordered["dimension"].to_list(), ordered["pg"].to_list(),
                                           ordered["column"].to_list(), strict=True),
                                       key=lambda t: (str(t[0]), style.natural_key(t[1])))]
    rows = sorted(set(cells["row"].to_list()), key=style.natural_key)
    ci = {c: i for i, c in enumerate(columns)}
    ri = {r: i for i, r in enumerate(rows)}
    z = np.full((len(rows), len(columns)), np.nan)
    names = np.full((len(rows), len(columns)), "", dtype=object)
    for row, column, wait, group, rank in cells.select("row", "column", "wait_ns_per_step", "group",
                                                       "rank").iter_rows():
        z[ri[row], ci[column]] = wait / 1e6
        names[ri[row], ci[column]] = f"{group}" + (f" · its worst rank {rank}" if by == "host" else "")
    fig = go.Figure(go.Heatmap(
        z=z, x=columns, y=rows, colorscale="Reds", zmin=0, customdata=names,
        colorbar={"title": {"text": "ms per step", "side": "right"}},
        hoverongaps=False, hovertemplate=(f"{by} %{{y}}<br>%{{customdata}}<br>%{{z:.3f}} ms per step waiting"
                                          "<br>(click: timeline of this group)<extra></extra>")))
    longest = max((len(c) for c in columns), default=10)
    height = min(MAX_FIGURE_PX, max(300, (16 if len(rows) <= 64 else 12) * len(rows) + 140 + 6 * longest))
    fig.update_layout(xaxis={"title": "dimension · process group", "type": "category", "automargin": True,
                             "tickangle": -90 if len(columns) > 12 else 0},
                      yaxis={"title": by, "type": "category", "autorange": "reversed", "automargin": True},
                      height=height)
    _base(fig, title, margin={"t": 60, "l": 80, "r": 30, "b": 40})
    if straggler is not None and by == "rank" and str(straggler) in ri:
        i = ri[str(straggler)]
        fig.add_shape(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=i - 0.5, y1=i + 0.5,
                      line={"color": "#1565c0", "width": 3})
        _note(fig, f"boxed: rank {straggler}, the rank the others wait for most")
    return fig


def skew_calls_figure(waits: pl.DataFrame, straggler: int | None, title_suffix: str = "",
                      max_columns: int = MAX_SKEW_COLUMNS, subtitle: str | None = None) -> go.Figure:
    """Rank × matched call (in time order) of each rank's wait (ms) for the last rank to arrive; the rank
    the others waited for most is boxed. Hover names the call's group, dimension, op and step; ``subtitle``:
    a line under the title (which ranks are shown of how many)."""
    title = "Wait per rank and matched call (ms blocked on the last rank to arrive)" + title_suffix
    if waits.height == 0:
        return _empty(title, "no collective was seen by more than one rank")
    cols = waits.group_by("key").agg(pl.col("first_ns").first(), pl.col("wait_ns").max().alias("_max"),
                                     pl.col("label").first(), pl.col("step").first())
    # ties (calls of several DP groups that start together) broken by key: group_by's order is random
    if cols.height > max_columns:
        cols = cols.sort("_max", "key", descending=[True, False]).head(max_columns)
        title += f" — the {max_columns} most skewed calls"
    cols = cols.sort("first_ns", "key")
    ranks = sorted(waits["rank"].unique().to_list())
    col_index = {k: i for i, k in enumerate(cols["key"].to_list())}
    row_index = {r: i for i, r in enumerate(ranks)}
    z = np.full((len(ranks), len(col_index)), np.nan)
    for key, rank, wait in waits.select("key", "rank", "wait_ns").iter_rows():
        if key in col_index:
            z[row_index[rank], col_index[key]] = wait / 1e6
    labels = [f"{lab} · step {s} · call {k}" for k, lab, s in zip(cols["key"].to_list(), cols["label"].to_list(),
                                                                  cols["step"].to_list(), strict=True)]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(len(col_index))), y=[str(r) for r in ranks], colorscale="Reds", zmin=0,
        colorbar={"title": {"text": "ms waiting", "side": "right"}}, customdata=np.array([labels] * len(ranks)),
        hovertemplate="rank %{y}<br>%{customdata}<br>%{z:.3f} ms waiting<extra></extra>", hoverongaps=False,
    ))
    if straggler is not None and straggler in row_index:
        fig.add_shape(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=row_index[straggler] - 0.5,
                      y1=row_index[straggler] + 0.5, line={"color": "#1565c0", "width": 3})
    height = min(MAX_FIGURE_PX, max(360, 14 * len(ranks) + 160))
    fig.update_layout(xaxis={"title": "matched call, in time order (hover for its group)"},
                      yaxis={"title": "rank", "type": "category", "autorange": "reversed"}, height=height)
    if subtitle is None:
        return _base(fig, title)
    _base(fig, title, margin={"t": 80, "l": 70, "r": 30, "b": 60})
    _note(fig, subtitle)
    return fig


def compare_figure(deltas: pl.DataFrame, name_a: str, name_b: str) -> go.Figure:
    """Side-by-side ms per rank-step of run A and run B (the ms metrics of the compare table)."""
    title = f"{name_a} vs {name_b} (ms per rank-step)"
    ms = deltas.filter(pl.col("unit") == "ms") if deltas.height else deltas
    if ms.height == 0:
        return _empty(title, "nothing to compare")
    metrics = ms["metric"].to_list()
    fig = go.Figure([
        go.Bar(name=name_a, y=metrics, x=(ms["a"] / 1e6).to_list(), orientation="h", marker_color="#455a64",
               hovertemplate="%{y}: %{x:.3f} ms<extra>" + name_a + "</extra>"),
        go.Bar(name=name_b, y=metrics, x=(ms["b"] / 1e6).to_list(), orientation="h", marker_color="#ffab40",
               hovertemplate="%{y}: %{x:.3f} ms<extra>" + name_b + "</extra>"),
    ])
    fig.update_layout(barmode="group", xaxis_title="ms per rank-step", yaxis={"autorange": "reversed",
                                                                              "automargin": True},
                      height=min(MAX_FIGURE_PX, max(360, 34 * len(metrics) + 140)),
                      legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 1, "xanchor": "right"})
    return _base(fig, title, margin={"t": 80, "l": 70, "r": 30, "b": 50})
