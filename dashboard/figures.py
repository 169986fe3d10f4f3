"""Pure figure builders: polars DataFrame in, ``go.Figure`` out. No Dash, no I/O; tests call them directly."""

from __future__ import annotations

import math

import numpy as np
import plotly.graph_objects as go
import polars as pl

from commprof.dashboard import style
from commprof.dashboard.style import PART_COLOURS, PART_LABELS, UNKNOWN

PARTS = ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")
MAX_SCATTER_POINTS = 20_000
MAX_SKEW_COLUMNS = 300


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    fig.update_layout(title=title, xaxis={"visible": False}, yaxis={"visible": False},
                      annotations=[{"text": message, "showarrow": False, "font": {"size": 14}}])
    return fig


def breakdown_figure(rank_summary: pl.DataFrame) -> go.Figure:
    """Stacked bars per rank: the mean per-step ms of the five parts (they add up to the step time)."""
    if rank_summary.height == 0:
        return _empty("Step time per rank", "no steps analyzed")
    ranks = [str(r) for r in rank_summary["rank"].to_list()]
    fig = go.Figure()
    for part in PARTS:
        fig.add_trace(go.Bar(
            name=PART_LABELS[part], x=ranks, y=(rank_summary[part].cast(pl.Float64) / 1e6).to_list(),
            marker_color=PART_COLOURS[part], hovertemplate="rank %{x}<br>%{y:.3f} ms<extra>" + PART_LABELS[part]
            + "</extra>",
        ))
    fig.update_layout(barmode="stack", title="Mean step time per rank, split into its five parts",
                      xaxis_title="rank", yaxis_title="ms per step", xaxis_type="category",
                      legend={"orientation": "h", "y": -0.2}, margin={"t": 50})
    return fig


def exposed_by_figure(frame: pl.DataFrame, by: str) -> go.Figure:
    """Exposed (and overlapped) comm ms per rank-step, one bar per dimension or tier."""
    title = f"Exposed comm per {by} (mean per rank and step)"
    if frame.height == 0:
        return _empty(title, "no communication")
    colour = style.dimension_colour if by == "dimension" else style.tier_colour
    names = [str(v) for v in frame[by].to_list()]
    fig = go.Figure([
        go.Bar(name="exposed · transfer", x=names, y=(frame["exposed_transfer_ns_per_step"] / 1e6).to_list(),
               marker_color=[colour(n) for n in names], offsetgroup="exposed",
               hovertemplate="%{x}: %{y:.3f} ms exposed transfer<extra></extra>"),
        go.Bar(name="exposed · wait (late ranks)", x=names, y=(frame["exposed_wait_ns_per_step"] / 1e6).to_list(),
               marker_color=[colour(n) for n in names], marker_pattern_shape="x", offsetgroup="exposed",
               base=(frame["exposed_transfer_ns_per_step"] / 1e6).to_list(),
               hovertemplate="%{x}: %{y:.3f} ms waiting for a later rank<extra></extra>"),
        go.Bar(name="overlapped", x=names, y=(frame["overlapped_ns_per_step"] / 1e6).to_list(),
               marker_color=[colour(n) for n in names], marker_pattern_shape="/", opacity=0.45,
               offsetgroup="overlapped", hovertemplate="%{x}: %{y:.3f} ms hidden<extra></extra>"),
    ])
    fig.update_layout(barmode="group", title=title, yaxis_title="ms per step", xaxis_title=by, margin={"t": 50})
    if set(names) == {UNKNOWN}:
        hint = "pass --layout (e.g. tp=2,dp=2)" if by == "dimension" else "pass --network ib|roce|ethernet"
        fig.add_annotation(text=f"every {by} is unknown: {hint}", showarrow=False, xref="paper", yref="paper",
                           x=0.5, y=1.02, yanchor="bottom")
    return fig


def _category_style(category: str) -> tuple[str, str, float]:
    """(legend name, colour, line width px) of a timeline category."""
    if category == "compute":
        return "compute", style.COMPUTE_COLOUR, 9
    if category == "memory":
        return "memory", style.MEMORY_COLOUR, 9
    if category == "exposed":
        return "exposed part", style.EXPOSED_COLOUR, 3
    dimension = category.removeprefix("comm:")
    return f"comm · {dimension}", style.dimension_colour(dimension), 9


def timeline_figure(segments: pl.DataFrame, rows: pl.DataFrame, origin_ns: int, window: tuple[int, int]
                    ) -> go.Figure:
    """Ranks × lanes; one Scattergl line trace per category, segments separated by gaps (None)."""
    fig = go.Figure()
    order = ["compute", "memory"] + sorted(c for c in segments["category"].unique().to_list()
                                          if c.startswith("comm:")) + ["exposed"]
    for category in order:
        seg = segments.filter(pl.col("category") == category)
        if seg.height == 0:
            continue
        name, colour, width = _category_style(category)
        offset = -0.32 if category == "exposed" else 0.0
        n = seg.height
        x = np.empty(3 * n, dtype=np.float64)
        x[0::3] = (seg["start_ns"].to_numpy() - origin_ns) / 1e6
        x[1::3] = (seg["end_ns"].to_numpy() - origin_ns) / 1e6
        x[2::3] = np.nan
        y = np.repeat(seg["row"].to_numpy().astype(np.float64) + offset, 3)
        y[2::3] = np.nan
        trace = go.Scattergl(x=x, y=y, mode="lines", name=name, line={"color": colour, "width": width},
                             connectgaps=False)
        if category.startswith("comm:"):
            hover = seg["hover"].fill_null("").to_list() if "hover" in seg.columns else [""] * n
            trace.update(text=[h for h in hover for _ in range(3)], hovertemplate="%{text}<extra></extra>")
        else:
            trace.update(hoverinfo="skip")
        fig.add_trace(trace)
    height = max(320, 90 + 22 * rows.height)
    lo, hi = ((window[0] - origin_ns) / 1e6, (window[1] - origin_ns) / 1e6)
    fig.update_layout(
        title="Timeline (ms since the run's first event); black underline = exposed comm",
        height=height, xaxis={"range": [lo, hi], "title": "ms"},
        yaxis={"tickvals": rows["row"].to_list(), "ticktext": rows["label"].to_list(), "autorange": "reversed",
               "fixedrange": True},
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0}, margin={"t": 80, "l": 160},
        uirevision="timeline", dragmode="zoom",
    )
    return fig


def busbw_figure(calls: pl.DataFrame) -> go.Figure:
    """Bus bandwidth of each call against its message size (log x), coloured by dimension, with a
    dashed line at each present tier's nominal peak."""
    title = "Bus bandwidth vs message size"
    pts = calls.filter(pl.col("bytes").is_not_null() & pl.col("busbw_gbps").is_not_null() & (pl.col("bytes") > 0))
    if pts.height == 0:
        return _empty(title, "no calls with a known size and bandwidth")
    if pts.height > MAX_SCATTER_POINTS:
        pts = pts.gather_every(math.ceil(pts.height / MAX_SCATTER_POINTS))
    fig = go.Figure()
    for (dimension,), part in sorted(pts.partition_by("dimension", as_dict=True).items(), key=lambda kv: str(kv[0])):
        fig.add_trace(go.Scattergl(
            x=part["bytes"].to_list(), y=part["busbw_gbps"].to_list(), mode="markers", name=f"{dimension}",
            marker={"color": style.dimension_colour(dimension), "size": 6, "opacity": 0.7},
            text=[f"{o} · pg {p} · tier {t}" for o, p, t in zip(part["op"], part["pg"], part["tier"], strict=True)],
            hovertemplate="%{text}<br>%{x:.3s}B · %{y:.2f} GB/s<extra></extra>",
        ))
    peaks = pts.filter(pl.col("peak_gbps").is_not_null()).group_by("tier").agg(pl.col("peak_gbps").max()).sort("tier")
    for tier, peak in peaks.iter_rows():
        fig.add_hline(y=peak, line_dash="dash", line_color=style.tier_colour(tier),
                      annotation_text=f"{tier} peak {peak:g} GB/s")
    if peaks.height == 0:
        fig.add_annotation(text="no tier with a known peak here (loopback/unknown): pass --peak TIER=GB/s",
                           showarrow=False, xref="paper", yref="paper", x=0.5, y=1.02, yanchor="bottom")
    fig.update_layout(title=title, xaxis={"type": "log", "title": "message size (bytes)"},
                      yaxis={"title": "busbw (GB/s)"}, legend_title="dimension", margin={"t": 60})
    return fig


def _positions(ranks: pl.DataFrame) -> tuple[dict[int, tuple[float, float]], list[tuple[str, float, float]]]:
    """Rank -> (x, y): each node's ranks on a circle around the node's centre; nodes on a grid."""
    hosts = ranks["host"].fill_null("?").unique(maintain_order=True).to_list()
    cols = max(1, math.ceil(math.sqrt(len(hosts))))
    pos: dict[int, tuple[float, float]] = {}
    centres = []
    for i, host in enumerate(hosts):
        cx, cy = 3.0 * (i % cols), -3.0 * (i // cols)
        centres.append((host, cx, cy))
        members = ranks.filter(pl.col("host").fill_null("?") == host)["rank"].to_list()
        for j, rank in enumerate(members):
            angle = 2 * math.pi * j / max(len(members), 1) + math.pi / 2
            r = 0.0 if len(members) == 1 else 1.0
            pos[int(rank)] = (cx + r * math.cos(angle), cy + r * math.sin(angle))
    return pos, centres


def topology_figure(ranks: pl.DataFrame, links: pl.DataFrame) -> go.Figure:
    """Ranks grouped by node (a box per host), links between ranks that share a group, coloured by tier."""
    if ranks.height == 0:
        return _empty("Topology", "no ranks")
    pos, centres = _positions(ranks)
    fig = go.Figure()
    for (tier,), part in sorted(links.partition_by("tier", as_dict=True).items(), key=lambda kv: str(kv[0])):
        xs: list[float | None] = []
        ys: list[float | None] = []
        for a, b in zip(part["a"].to_list(), part["b"].to_list(), strict=True):
            if a in pos and b in pos:
                xs += [pos[a][0], pos[b][0], None]
                ys += [pos[a][1], pos[b][1], None]
        fig.add_trace(go.Scatter(x=xs, y=ys, mode="lines", name=f"link · tier {tier}", hoverinfo="skip",
                                 line={"color": style.tier_colour(str(tier)), "width": 1.5}))
    order = sorted(pos)
    fig.add_trace(go.Scatter(
        x=[pos[r][0] for r in order], y=[pos[r][1] for r in order], mode="markers+text", name="rank",
        text=[str(r) for r in order], textposition="middle center", textfont={"size": 9, "color": "white"},
        marker={"size": 20, "color": "#333"}, hovertemplate="rank %{text}<extra></extra>",
    ))
    for host, cx, cy in centres:
        fig.add_shape(type="rect", x0=cx - 1.4, x1=cx + 1.4, y0=cy - 1.4, y1=cy + 1.4,
                      line={"color": "#888", "dash": "dot"}, layer="below")
        fig.add_annotation(x=cx, y=cy + 1.4, text=host, showarrow=False, yanchor="bottom")
    if links.height and set(links["tier"].to_list()) == {UNKNOWN}:
        fig.add_annotation(text="every link tier is unknown: pass --network ib|roce|ethernet or record NCCL logs",
                           showarrow=False, xref="paper", yref="paper",
                           x=0.5, y=1.0, yanchor="bottom")
    side = max(420, 150 * math.ceil(math.sqrt(len(centres))) + 120)
    fig.update_layout(title="Ranks by node; a link per pair of ranks in a group (ring per group)", height=side,
                      xaxis={"visible": False, "scaleanchor": "y"}, yaxis={"visible": False},
                      showlegend=True, margin={"t": 70})
    return fig


def traffic_figure(matrix: pl.DataFrame, ranks: list[int]) -> go.Figure:
    """Rank × rank heatmap of bytes per step (src row, dst column)."""
    title = "Traffic per step (row sends to column)"
    if matrix.height == 0:
        return _empty(title, "no traffic with known groups and sizes")
    index = {r: i for i, r in enumerate(ranks)}
    z = np.zeros((len(ranks), len(ranks)))
    for src, dst, b in matrix.select("src", "dst", "bytes_per_step").iter_rows():
        if src in index and dst in index:
            z[index[src], index[dst]] += b
    fig = go.Figure(go.Heatmap(z=z / 1e6, x=[str(r) for r in ranks], y=[str(r) for r in ranks],
                               colorscale="Viridis", colorbar={"title": "MB/step"},
                               hovertemplate="%{y} → %{x}: %{z:.3f} MB/step<extra></extra>"))
    fig.update_layout(title=title, xaxis={"title": "to rank", "type": "category"},
                      yaxis={"title": "from rank", "type": "category", "autorange": "reversed"},
                      height=max(420, 12 * len(ranks) + 150), margin={"t": 50})
    return fig


def skew_figure(waits: pl.DataFrame, straggler: int | None) -> go.Figure:
    """Rank × matched collective heatmap of each rank's wait (µs) for the last rank to arrive; the rank
    the others waited for most is boxed."""
    title = "Wait per rank and collective (µs blocked on the last rank to arrive)"
    if waits.height == 0:
        return _empty(title, "no collective was seen by more than one rank")
    cols = waits.group_by("key").agg(pl.col("first_ns").first(), pl.col("wait_ns").max().alias("_max"),
                                     pl.col("label").first())
    if cols.height > MAX_SKEW_COLUMNS:
        cols = cols.sort("_max", descending=True).head(MAX_SKEW_COLUMNS)
        title += f" — the {MAX_SKEW_COLUMNS} most skewed"
    cols = cols.sort("first_ns")
    ranks = sorted(waits["rank"].unique().to_list())
    col_index = {k: i for i, k in enumerate(cols["key"].to_list())}
    row_index = {r: i for i, r in enumerate(ranks)}
    z = np.full((len(ranks), len(col_index)), np.nan)
    for key, rank, wait in waits.select("key", "rank", "wait_ns").iter_rows():
        if key in col_index:
            z[row_index[rank], col_index[key]] = wait / 1e3
    labels = [f"{k} ({lab})" for k, lab in zip(cols["key"].to_list(), cols["label"].to_list(), strict=True)]
    fig = go.Figure(go.Heatmap(
        z=z, x=list(range(len(col_index))), y=[str(r) for r in ranks], colorscale="Reds",
        colorbar={"title": "µs waiting"}, customdata=np.array([labels] * len(ranks)),
        hovertemplate="rank %{y}<br>%{customdata}<br>%{z:.1f} µs waiting<extra></extra>", hoverongaps=False,
    ))
    if straggler is not None and straggler in row_index:
        fig.add_shape(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=row_index[straggler] - 0.5,
                      y1=row_index[straggler] + 0.5, line={"color": "#1f77b4", "width": 3})
        fig.add_annotation(xref="paper", x=1.0, y=str(straggler), xanchor="left", showarrow=False,
                           text=f" others wait for rank {straggler}")
    fig.update_layout(title=title, xaxis={"title": "collective (in time order)"},
                      yaxis={"title": "rank", "type": "category", "autorange": "reversed"},
                      height=max(380, 14 * len(ranks) + 160), margin={"t": 50, "r": 180})
    return fig


def compare_figure(deltas: pl.DataFrame, name_a: str, name_b: str) -> go.Figure:
    """Side-by-side ms per step of run A and run B for step time and exposed comm by dimension and tier."""
    title = f"{name_a} vs {name_b} (ms per rank-step)"
    if deltas.height == 0:
        return _empty(title, "nothing to compare")
    metrics = deltas["metric"].to_list()
    fig = go.Figure([
        go.Bar(name=name_a, y=metrics, x=(deltas["a_ns"] / 1e6).to_list(), orientation="h",
               marker_color="#4c78a8"),
        go.Bar(name=name_b, y=metrics, x=(deltas["b_ns"] / 1e6).to_list(), orientation="h",
               marker_color="#f58518", text=[_delta_text(d, p) for d, p in zip(deltas["delta_ns"],
                                                                              deltas["delta_pct"], strict=True)],
               textposition="outside"),
    ])
    fig.update_layout(barmode="group", title=title, xaxis_title="ms per step",
                      yaxis={"autorange": "reversed"}, height=max(360, 60 * len(metrics) + 120), margin={"t": 50})
    return fig


def _delta_text(delta_ns: float, pct: float | None) -> str:
    sign = "+" if delta_ns >= 0 else ""
    return f"{sign}{delta_ns / 1e6:.3f} ms" + (f" ({sign}{pct:.1f}%)" if pct is not None else "")
