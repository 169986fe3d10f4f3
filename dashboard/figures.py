"""Pure figure builders: polars DataFrame in, ``go.Figure`` out. No Dash, no I/O; tests call them directly.

Units follow style.py (ms, bytes with SI prefixes, GB/s). Every figure's height is bounded so that no
canvas passes the browser's 8192-px limit, whatever the run's size; heatmaps roll ranks up to hosts beyond
``MAX_HEATMAP_RANKS``.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl

from commprof.dashboard import style
from commprof.dashboard.style import PART_COLOURS, PART_LABELS, UNKNOWN

PARTS = ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")
MAX_SCATTER_POINTS = 20_000
MAX_SKEW_COLUMNS = 300
MAX_HEATMAP_RANKS = 64
MAX_FIGURE_PX = 6000
RANK_LINKS_UP_TO = 16  # ranks: beyond, the topology draws host-to-host links only
MAX_LINKS = 48  # links drawn at most (the heaviest)
FONT = {"family": "system-ui, sans-serif", "size": 12}


def _base(fig: go.Figure, title: str, **layout: Any) -> go.Figure:
    layout.setdefault("margin", {"t": 60, "l": 70, "r": 30, "b": 60})
    fig.update_layout(template=style.TEMPLATE, title={"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
                      font=FONT, hoverlabel={"font_size": 12}, **layout)
    return fig


def _empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    return _base(fig, title, xaxis={"visible": False}, yaxis={"visible": False}, height=260,
                 annotations=[{"text": message, "showarrow": False, "font": {"size": 14}}])


def _note(fig: go.Figure, text: str) -> None:
    """A one-line note under the title (inside the top margin, so it never covers the plot)."""
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0, xanchor="left", y=1.0,
                       yanchor="bottom", yshift=4, font={"size": 12, "color": "#555"})


def breakdown_figure(rank_summary: pl.DataFrame) -> go.Figure:
    """Stacked bars per rank: the mean per-step ms of the five parts (they add up to the step time).
    A bar's customdata is its rank (a click opens the timeline on it)."""
    title = "Mean step time per rank, split into its five parts (click a rank for its timeline)"
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


def timeline_figure(segments: pl.DataFrame, rows: pl.DataFrame, origin_ns: int, window: tuple[int, int]
                    ) -> go.Figure:
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
            trace.update(text=[h for h in hover for _ in range(3)], hovertemplate="%{text}<extra></extra>")
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
        legend={"orientation": "h", "y": 1.0, "yanchor": "bottom", "x": 0}, uirevision="timeline",
        dragmode="zoom", showlegend=True,
    )
    return _base(fig, "Timeline — one compute and one comm lane per rank; black = exposed comm",
                 margin={"t": 70, "l": 130, "r": 20, "b": 50})


def busbw_figure(calls: pl.DataFrame, group_names: dict[str, str] | None = None) -> go.Figure:
    """Bus bandwidth of each call against its message size (log x), coloured by dimension, with a
    dashed line at each present tier's nominal peak."""
    title = "Bus bandwidth of each call vs its message size"
    pts = calls.filter(pl.col("bytes").is_not_null() & pl.col("busbw_gbps").is_not_null() & (pl.col("bytes") > 0))
    if pts.height == 0:
        return _empty(title, "no calls with a known size and bandwidth")
    if pts.height > MAX_SCATTER_POINTS:
        pts = pts.gather_every(math.ceil(pts.height / MAX_SCATTER_POINTS))
    names = group_names or {}
    fig = go.Figure()
    for (dimension,), part in sorted(pts.partition_by("dimension", as_dict=True).items(), key=lambda kv: str(kv[0])):
        text = [f"rank {r} · {o} · {names.get(str(p), p)}<br>dimension {dimension} · tier {t}<br>{style.fmt_bytes(b)}"
                for r, o, p, t, b in zip(part["rank"], part["op"], part["pg"], part["tier"], part["bytes"],
                                         strict=True)]
        fig.add_trace(go.Scattergl(
            x=part["bytes"].to_list(), y=part["busbw_gbps"].to_list(), mode="markers", name=f"{dimension}",
            marker={"color": style.dimension_colour(dimension), "size": 6, "opacity": 0.7}, text=text,
            hovertemplate="%{text} · busbw %{y:.2f} GB/s<extra></extra>",
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


Box = tuple[str, float, float, float, float]  # host, x0, y0, x1, y1


def _host_layout(ranks: pl.DataFrame, ring: bool) -> tuple[dict[int, tuple[float, float]], list[Box]]:
    """Rank -> (x, y) inside its host's box (on a small circle when ``ring``, so that links between ranks
    of one host stay apart; else on a grid); boxes in a row up to 3 hosts, else on a circle."""
    hosts = ranks["host"].fill_null("?").unique(maintain_order=True).to_list()
    per_host = max(int(ranks.group_by(pl.col("host").fill_null("?")).len()["len"].max() or 1), 1)  # type: ignore[arg-type]
    inner = max(1, math.ceil(math.sqrt(per_host)))
    side = (2.6 if per_host > 1 else 1.2) if ring else inner + 1.0
    n = len(hosts)
    if n <= 3:
        corners = [((side + 2.0) * i, 0.0) for i in range(n)]
    else:
        radius = max(n * (side * 1.45 + 1.2) / (2 * math.pi), side * 1.3)
        corners = [(radius * math.cos(math.pi / 2 - 2 * math.pi * i / n) - side / 2,
                    radius * math.sin(math.pi / 2 - 2 * math.pi * i / n) - side / 2) for i in range(n)]
    pos: dict[int, tuple[float, float]] = {}
    boxes: list[Box] = []
    for host, (x0, y0) in zip(hosts, corners, strict=True):
        boxes.append((host, x0, y0, x0 + side, y0 + side))
        members = ranks.filter(pl.col("host").fill_null("?") == host)["rank"].to_list()
        for j, rank in enumerate(members):
            if ring:
                angle = math.pi / 2 - 2 * math.pi * j / max(len(members), 1)
                r = 0.0 if len(members) == 1 else side / 2 - 0.4
                pos[int(rank)] = (x0 + side / 2 + r * math.cos(angle), y0 + side / 2 + r * math.sin(angle))
            else:
                pos[int(rank)] = (x0 + 1.0 + j % inner, y0 + side - 1.0 - j // inner)
    return pos, boxes


def _width(bytes_per_step: float, top: float) -> float:
    return 1.0 + 7.0 * math.sqrt(max(bytes_per_step, 0.0) / top) if top > 0 else 1.0


def _link_pairs(traffic: pl.DataFrame, host_links: pl.DataFrame, rank_level: bool) -> pl.DataFrame:
    """a, b (ranks or hosts, a < b), dimension, tier, bytes_per_step: both directions summed."""
    if rank_level:
        frame, src, dst = traffic, "src", "dst"
    else:
        frame, src, dst = host_links.filter(pl.col("src_host") != pl.col("dst_host")), "src_host", "dst_host"
    return (frame.with_columns(pl.min_horizontal(src, dst).alias("a"), pl.max_horizontal(src, dst).alias("b"))
            .group_by("a", "b", "dimension", "tier").agg(pl.col("bytes_per_step").sum()).sort("a", "b", "dimension"))


def topology_figure(ranks: pl.DataFrame, traffic: pl.DataFrame, host_links: pl.DataFrame) -> go.Figure:
    """Hosts as boxes with their ranks inside; links coloured by dimension and as thick as their traffic
    per step. Up to RANK_LINKS_UP_TO ranks a link joins two ranks, beyond that two hosts (the sum of their
    ranks' traffic; traffic inside a host is then written under its box)."""
    title = "Hosts and their ranks; links coloured by dimension, width = bytes per step"
    if ranks.height == 0:
        return _empty(title, "no ranks")
    rank_level = ranks.height <= RANK_LINKS_UP_TO
    pos, boxes = _host_layout(ranks, rank_level)
    centre = {h: ((x0 + x1) / 2, (y0 + y1) / 2) for h, x0, y0, x1, y1 in boxes}
    where: dict[Any, tuple[float, float]] = {**pos} if rank_level else {**centre}
    pairs = _link_pairs(traffic, host_links, rank_level)
    all_links = pairs.height
    if all_links > MAX_LINKS:  # a full mesh of 32 hosts is a solid disk: keep the heaviest, say so
        pairs = pairs.sort("bytes_per_step", "a", "b", descending=[True, False, False]).head(MAX_LINKS)
    top = float(pairs["bytes_per_step"].max() or 0.0) if pairs.height else 0.0  # type: ignore[arg-type]
    dims = sorted(set(pairs["dimension"].to_list())) if pairs.height else []
    fig = go.Figure()
    shown: set[str] = set()
    what = "rank " if rank_level else ""
    for row in pairs.iter_rows(named=True):
        a, b = where.get(row["a"]), where.get(row["b"])
        if a is None or b is None:
            continue
        k = dims.index(row["dimension"])
        bend = 0.12 * (k - (len(dims) - 1) / 2) + (0.08 if rank_level else 0.0)
        dx, dy = b[0] - a[0], b[1] - a[1]
        mid = ((a[0] + b[0]) / 2 - dy * bend, (a[1] + b[1]) / 2 + dx * bend)
        text = (f"{what}{row['a']} ↔ {what}{row['b']}<br>dimension {row['dimension']} · tier {row['tier']}<br>"
                f"{style.fmt_bytes(row['bytes_per_step'])} per step")
        fig.add_trace(go.Scatter(
            x=[a[0], mid[0], b[0]], y=[a[1], mid[1], b[1]], mode="lines", line={
                "color": style.dimension_colour(row["dimension"]), "width": _width(row["bytes_per_step"], top),
                "shape": "spline"}, opacity=0.8, name=f"{row['dimension']}", legendgroup=row["dimension"],
            showlegend=row["dimension"] not in shown, text=[text] * 3, hovertemplate="%{text}<extra></extra>"))
        shown.add(row["dimension"])
    inside: dict[str, list[str]] = {}
    if not rank_level and host_links.height:
        own = (host_links.filter(pl.col("src_host") == pl.col("dst_host"))
               .group_by("src_host", "dimension", "tier").agg(pl.col("bytes_per_step").sum())
               .sort("src_host", "dimension"))
        for r in own.iter_rows(named=True):
            inside.setdefault(r["src_host"], []).append(
                f"{r['dimension']} ({r['tier']}) {style.fmt_bytes(r['bytes_per_step'])}/step inside")
    written = len(boxes) <= 8  # beyond, a host's own traffic is in its box's hover (no room to write it)
    for host, x0, y0, x1, y1 in boxes:  # boxes over the links, ranks over the boxes
        own = "<br>".join(inside.get(host, [])) or "no traffic inside"
        fig.add_trace(go.Scatter(x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines", fill="toself",
                                 fillcolor="rgba(245,247,248,0.92)", line={"color": "#78909c", "width": 1},
                                 showlegend=False, hoveron="fills", text=f"{host}<br>{own}",
                                 hovertemplate="%{text}<extra></extra>"))
        fig.add_annotation(x=x0, y=y1, text=f"<b>{host}</b>", showarrow=False, xanchor="left", yanchor="bottom",
                           font={"size": 11 if len(boxes) <= 16 else 9})
        if host in inside and written:
            fig.add_annotation(x=x0, y=y0, text="<br>".join(inside[host]), showarrow=False, xanchor="left",
                               yanchor="top", font={"size": 9, "color": "#455a64"}, align="left")
    if rank_level:  # links between ranks of one host run inside its box: the box goes under them
        n_boxes = len(boxes)
        fig.data = fig.data[-n_boxes:] + fig.data[:-n_boxes]
    order = sorted(pos)
    host_of = dict(zip(ranks["rank"].to_list(), ranks["host"].fill_null("?").to_list(), strict=True))
    fig.add_trace(go.Scatter(
        x=[pos[r][0] for r in order], y=[pos[r][1] for r in order], name="rank",
        mode="markers+text" if len(order) <= 64 else "markers", showlegend=False,
        text=[str(r) for r in order], textposition="middle center", customdata=order,
        textfont={"size": 9 if len(order) <= 64 else 7, "color": "white"},
        marker={"size": 22 if len(order) <= 64 else 14, "color": "#37474f", "symbol": "square"},
        hovertext=[f"rank {r} on {host_of.get(r, '?')} (click for its timeline)" for r in order],
        hovertemplate="%{hovertext}<extra></extra>",
    ))
    notes = []
    if pairs.height and set(pairs["tier"].to_list()) == {UNKNOWN}:
        notes.append("every link tier is unknown: start the dashboard with --network ib|roce|ethernet")
    if inside and not written:
        notes.append("hover a host's box for the traffic inside it")
    if all_links > MAX_LINKS:
        notes.append(f"the {MAX_LINKS} heaviest of {all_links} links drawn (the matrix below has them all)")
    if len(order) > 64:
        notes.append("hover a square for its rank")
    if notes:
        _note(fig, "; ".join(notes))
    xs = [v for b in boxes for v in (b[1], b[3])]
    ys = [v for b in boxes for v in (b[2], b[4])]
    span_x, span_y = max(xs) - min(xs), max(ys) - min(ys)
    scale = 520 if len(boxes) <= 3 else 900
    height = min(MAX_FIGURE_PX, max(420, int(130 + scale * span_y / max(span_x, span_y, 1e-9))))
    fig.update_layout(height=height, hovermode="closest", legend={"title": "links by dimension"},
                      xaxis={"visible": False, "range": [min(xs) - 0.6, max(xs) + 0.6]},
                      yaxis={"visible": False, "scaleanchor": "x", "range": [min(ys) - 1.6, max(ys) + 0.9]})
    return _base(fig, title, margin={"t": 60, "l": 20, "r": 20, "b": 20})


def traffic_figure(matrix: pl.DataFrame, ranks: list[int], hosts: dict[int, str]) -> go.Figure:
    """Heatmap of bytes per step, row sends to column: rank × rank up to MAX_HEATMAP_RANKS ranks, else
    host × host (the sum of the analysis' rank-pair rows)."""
    title = "Traffic per step (row sends to column)"
    if matrix.height == 0:
        return _empty(title, "no traffic with known groups and sizes")
    if len(ranks) <= MAX_HEATMAP_RANKS:
        labels = [str(r) for r in ranks]
        src = matrix["src"].cast(pl.String)
        dst = matrix["dst"].cast(pl.String)
        what = "rank"
    else:
        labels = list(dict.fromkeys(hosts.get(r, "?") for r in ranks))
        src = matrix["src"].replace_strict(hosts, default="?", return_dtype=pl.String)
        dst = matrix["dst"].replace_strict(hosts, default="?", return_dtype=pl.String)
        what = "host"
        title += f" — {len(ranks)} ranks summed per host"
    index = {name: i for i, name in enumerate(labels)}
    z = np.zeros((len(labels), len(labels)))
    for s, d, b in zip(src.to_list(), dst.to_list(), matrix["bytes_per_step"].to_list(), strict=True):
        if s in index and d in index:
            z[index[s], index[d]] += b
    # log colour: a dp link of a few MB stays visible beside a tp link of a GB
    z_log = np.where(z > 0, np.log10(np.maximum(z, 1.0)), np.nan)
    text = np.vectorize(lambda v: style.fmt_bytes(v) if v > 0 else "none")(z)
    lo = math.floor(float(np.nanmin(z_log))) if np.isfinite(z_log).any() else 0
    hi = math.ceil(float(np.nanmax(z_log))) if np.isfinite(z_log).any() else 1
    ticks = list(range(lo, max(hi, lo + 1) + 1))
    fig = go.Figure(go.Heatmap(
        z=z_log, x=labels, y=labels, colorscale="Blues", zmin=lo, zmax=max(hi, lo + 1), customdata=text,
        colorbar={"title": {"text": "bytes per step", "side": "right"}, "tickvals": ticks,
                  "ticktext": [style.fmt_bytes(10.0 ** t) for t in ticks]},
        hoverongaps=False, hovertemplate=f"{what} %{{y}} → {what} %{{x}}<br>%{{customdata}} per step<extra></extra>"))
    side = min(MAX_FIGURE_PX, max(440, 14 * len(labels) + 170))
    long_ticks = what == "host" and max((len(x) for x in labels), default=0) * len(labels) > 120
    fig.update_layout(xaxis={"title": f"to {what}", "type": "category", "tickangle": -90 if long_ticks else 0,
                             "automargin": True},
                      yaxis={"title": f"from {what}", "type": "category", "autorange": "reversed"}, height=side)
    return _base(fig, title)


def skew_group_figure(cells: pl.DataFrame, by: str, straggler: int | None) -> go.Figure:
    """Rank (or host) × process group: each row's wait per step for later ranks in that group (ms).
    Columns are named by group and dimension; a cell's customdata is (rank, pg) for the drill-down."""
    title = "Wait for later ranks per step (ms), per " + ("rank" if by == "rank" else "host (its worst rank)") + \
        " and process group"
    if cells.height == 0:
        return _empty(title, "no collective was matched across ranks")
    ordered = cells.select("column", "dimension", "pg").unique() if "dimension" in cells.columns else None
    columns = (ordered.sort("dimension", pl.col("pg").str.len_chars(), "pg")["column"].to_list()
               if ordered is not None else sorted(set(cells["column"].to_list())))
    rows = (sorted(set(cells["row"].to_list()), key=int) if by == "rank"
            else list(dict.fromkeys(cells.sort("rank")["row"].to_list())))
    ci = {c: i for i, c in enumerate(columns)}
    ri = {r: i for i, r in enumerate(rows)}
    z = np.full((len(rows), len(columns)), np.nan)
    custom = np.empty((len(rows), len(columns), 3), dtype=object)
    for r in cells.iter_rows(named=True):
        i, j = ri[r["row"]], ci[r["column"]]
        z[i, j] = r["wait_ns_per_step"] / 1e6
        custom[i, j] = (int(r["rank"]), str(r["pg"]), "–" if r["max_wait_step"] is None else int(r["max_wait_step"]))
    fig = go.Figure(go.Heatmap(
        z=z, x=columns, y=rows, colorscale="Reds", zmin=0, customdata=custom,
        colorbar={"title": {"text": "ms per step", "side": "right"}},
        hoverongaps=False, hovertemplate=(f"{by} %{{y}}<br>%{{x}}<br>%{{z:.3f}} ms per step waiting"
                                          "<br>(click: timeline of this group)<extra></extra>")))
    longest = max((len(c) for c in columns), default=10)
    height = min(MAX_FIGURE_PX, max(380, 16 * len(rows) + 140 + 6 * longest))
    fig.update_layout(xaxis={"title": "process group · dimension", "type": "category", "tickangle": -90,
                             "automargin": True},
                      yaxis={"title": by, "type": "category", "autorange": "reversed", "automargin": True},
                      height=height)
    _base(fig, title, margin={"t": 60, "l": 80, "r": 30, "b": 40})
    if straggler is not None and by == "rank" and str(straggler) in ri:
        i = ri[str(straggler)]
        fig.add_shape(type="rect", xref="paper", x0=0, x1=1, yref="y", y0=i - 0.5, y1=i + 0.5,
                      line={"color": "#1565c0", "width": 3})
        _note(fig, f"boxed: rank {straggler}, the rank the others wait for most")
    return fig


def skew_calls_figure(waits: pl.DataFrame, straggler: int | None, title_suffix: str = "") -> go.Figure:
    """Rank × matched call (in time order) of each rank's wait (ms) for the last rank to arrive; the rank
    the others waited for most is boxed. Hover names the call's group, dimension, op and step."""
    title = "Wait per rank and matched call (ms blocked on the last rank to arrive)" + title_suffix
    if waits.height == 0:
        return _empty(title, "no collective was seen by more than one rank")
    cols = waits.group_by("key").agg(pl.col("first_ns").first(), pl.col("wait_ns").max().alias("_max"),
                                     pl.col("label").first(), pl.col("step").first())
    if cols.height > MAX_SKEW_COLUMNS:
        cols = cols.sort("_max", descending=True).head(MAX_SKEW_COLUMNS)
        title += f" — the {MAX_SKEW_COLUMNS} most skewed calls"
    cols = cols.sort("first_ns")
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
    return _base(fig, title)


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
