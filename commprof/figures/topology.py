"""Topology figures: hosts as boxes with their ranks and links coloured by dimension and weighted by
traffic, and the traffic matrix (rank × rank, or host × host beyond MAX_HEATMAP_RANKS). Pure builders:
polars in, ``go.Figure`` out; figures.py re-exports them."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np
import plotly.graph_objects as go
import polars as pl

from commprof.figures import style
from commprof.figures.base import MAX_FIGURE_PX, MAX_HEATMAP_RANKS, base_layout, empty, note
from commprof.figures.style import UNKNOWN

RANK_LINKS_UP_TO = 16  # ranks: beyond, the topology draws host-to-host links only
MAX_LINKS = 48  # links drawn at most (the heaviest)


Box = tuple[str, float, float, float, float]  # host, x0, y0, x1, y1


def _host_layout(ranks: pl.DataFrame, ring: bool) -> tuple[dict[int, tuple[float, float]], list[Box]]:
    """Rank -> (x, y) inside its host's box (on a small circle when ``ring``, so that links between ranks
    of one host stay apart; else on a grid); boxes in a row up to 3 hosts, else on a circle."""
    hosts = ranks["host"].fill_null("?").unique(maintain_order=True).to_list()
    per_host = max(int(ranks.group_by(pl.col("host").fill_null("?")).len()["len"].max() or 1), 1)  # type: ignore[arg-type]
    inner = max(1, math.ceil(math.sqrt(per_host)))
    side = (2.6 if per_host > 1 else 1.2) if ring else max(inner + 1.0, 6.0)  # room for its name and ranks
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


def heaviest_links(pairs: pl.DataFrame, limit: int) -> tuple[pl.DataFrame, list[str]]:
    """At most ``limit`` links, heaviest first, and never part of a tie: links of equal traffic (3
    significant digits) are all drawn or none (issue 25: "48 heaviest of 496" all came out of the first two
    hosts, ties broken by their order, where every DP host pair carries the same). Returns the links and a
    sentence per class (dimension, tier) left out: how many pairs, how much each."""
    keyed = pairs.with_columns(pl.col("bytes_per_step").round_sig_figs(3).alias("_tie"))
    fits, room = [], limit
    for tie, n in keyed.group_by("_tie").len().sort("_tie", descending=True).iter_rows():
        if n <= room:  # a class that does not fit is left out whole; lighter ones may still fit
            fits.append(tie)
            room -= n
    drawn = keyed.filter(pl.col("_tie").is_in(fits))
    rest = keyed.filter(~pl.col("_tie").is_in(fits))
    said = [f"{r['dimension']} · {r['tier']}: {r['n']} host pairs of {_gb(r['lo'])}"
            + ("" if r["lo"] == r["hi"] else f"–{_gb(r['hi'])}") + " per step each"
            for r in rest.group_by("dimension", "tier").agg(pl.len().alias("n"), pl.col("_tie").min().alias("lo"),
                                                              pl.col("_tie").max().alias("hi"))
            .sort("dimension", "tier").iter_rows(named=True)]
    return drawn.drop("_tie").sort("a", "b", "dimension"), said


def _legend_names(pairs: pl.DataFrame) -> dict[tuple[str, str], str]:
    """(dimension, tier) -> "pp · ib · 0.56 GB per step a link" (or the range): the links' label."""
    out = {}
    for r in pairs.group_by("dimension", "tier").agg(pl.col("bytes_per_step").min().alias("lo"),
                                                      pl.col("bytes_per_step").max().alias("hi")).iter_rows(named=True):
        lo, hi = _gb(r["lo"]), _gb(r["hi"])
        out[(r["dimension"], r["tier"])] = f"{r['dimension']} · {r['tier']} · {lo if lo == hi else lo + '–' + hi}/step"
    return out


def add_link_traces(fig: go.Figure, pairs: pl.DataFrame, where: Mapping[Any, tuple[float, float]], what: str = "",
                    lift: float = 0.0) -> None:
    """One curved line per pair (``a``, ``b``, ``dimension``, ``tier``, ``bytes_per_step``) between the places
    ``where`` gives (pairs with an end not placed are skipped): coloured by dimension, as wide as its bytes, bent
    apart per dimension (``lift`` more for all), one legend entry per dimension and tier. ``what``: the ends'
    noun in the hover ("rank ")."""
    top = float(pairs["bytes_per_step"].max() or 0.0) if pairs.height else 0.0  # type: ignore[arg-type]
    dims = sorted(set(pairs["dimension"].to_list())) if pairs.height else []
    legend = _legend_names(pairs) if pairs.height else {}
    shown: set[tuple[str, str]] = set()
    for row in pairs.iter_rows(named=True):
        a, b = where.get(row["a"]), where.get(row["b"])
        if a is None or b is None:
            continue
        k = dims.index(row["dimension"])
        bend = 0.12 * (k - (len(dims) - 1) / 2) + lift
        dx, dy = b[0] - a[0], b[1] - a[1]
        mid = ((a[0] + b[0]) / 2 - dy * bend, (a[1] + b[1]) / 2 + dx * bend)
        text = (f"{what}{row['a']} ↔ {what}{row['b']}<br>dimension {row['dimension']} · tier {row['tier']}<br>"
                f"{style.fmt_bytes(row['bytes_per_step'])} per step")
        fig.add_trace(go.Scatter(
            x=[a[0], mid[0], b[0]], y=[a[1], mid[1], b[1]], mode="lines", line={
                "color": style.dimension_colour(row["dimension"]), "width": _width(row["bytes_per_step"], top),
                "shape": "spline"}, opacity=0.8, name=legend[(row["dimension"], row["tier"])],
            legendgroup=f"{row['dimension']}·{row['tier']}", showlegend=(row["dimension"], row["tier"]) not in shown,
            text=[text] * 3, hovertemplate="%{text}<extra></extra>"))
        shown.add((row["dimension"], row["tier"]))


def _gb(bytes_per_step: float) -> str:
    return f"{bytes_per_step / 1e9:,.2f} GB" if bytes_per_step >= 1e7 else style.fmt_bytes(bytes_per_step)


def topology_figure(ranks: pl.DataFrame, traffic: pl.DataFrame, host_links: pl.DataFrame) -> go.Figure:
    """Hosts as boxes with their ranks inside; links coloured by dimension and as thick as their traffic
    per step. Up to RANK_LINKS_UP_TO ranks a link joins two ranks, beyond that two hosts (the sum of their
    ranks' traffic; traffic inside a host is then written under its box)."""
    title = "Hosts and their ranks; links coloured by dimension, width = bytes per step"
    if ranks.height == 0:
        return empty(title, "no ranks")
    rank_level = ranks.height <= RANK_LINKS_UP_TO
    pos, boxes = _host_layout(ranks, rank_level)
    centre = {h: ((x0 + x1) / 2, (y0 + y1) / 2) for h, x0, y0, x1, y1 in boxes}
    where: dict[Any, tuple[float, float]] = {**pos} if rank_level else {**centre}
    pairs = _link_pairs(traffic, host_links, rank_level)
    all_links = pairs.height
    capped = not rank_level and all_links > MAX_LINKS  # 16 ranks have at most 120 pairs: all drawn
    left_out: list[str] = []
    if capped:  # a full mesh of 32 hosts is a solid disk: keep the heaviest, say so
        pairs, left_out = heaviest_links(pairs, MAX_LINKS)
    fig = go.Figure()
    add_link_traces(fig, pairs, where, "rank " if rank_level else "", 0.08 if rank_level else 0.0)
    fig.layout.meta = {"left_out": left_out}  # the page says which equal links were not drawn
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
        own_text = "<br>".join(inside.get(host, [])) or "no traffic inside"
        fig.add_trace(go.Scatter(x=[x0, x1, x1, x0, x0], y=[y0, y0, y1, y1, y0], mode="lines", fill="toself",
                                 fillcolor="rgba(245,247,248,0.92)", line={"color": "#78909c", "width": 1},
                                 showlegend=False, hoveron="fills", text=f"{host}<br>{own_text}",
                                 hovertemplate="%{text}<extra></extra>"))
        if rank_level:
            fig.add_annotation(x=x0, y=y1, text=f"<b>{host}</b>", showarrow=False, xanchor="left",
                               yanchor="bottom", font={"size": 11})
            if host in inside and written:
                fig.add_annotation(x=x0, y=y0, text="<br>".join(inside[host]), showarrow=False, xanchor="left",
                                   yanchor="top", font={"size": 9, "color": "#455a64"}, align="left")
    host_of = dict(zip(ranks["rank"].to_list(), ranks["host"].fill_null("?").to_list(), strict=True))
    if not rank_level:  # ranks rolled up: a host is one box, named inside it (the links pass under the boxes)
        _host_labels(fig, boxes, host_of, inside if written else {})
        return _finish(fig, title, boxes, pairs, inside, written, capped, all_links, [])
    # links between ranks of one host run inside its box: the box goes under them
    n_boxes = len(boxes)
    fig.data = fig.data[-n_boxes:] + fig.data[:-n_boxes]
    order = sorted(pos)
    fig.add_trace(go.Scatter(
        x=[pos[r][0] for r in order], y=[pos[r][1] for r in order], name="rank",
        mode="markers+text" if len(order) <= 64 else "markers", showlegend=False,
        text=[str(r) for r in order], textposition="middle center", customdata=order,
        textfont={"size": 9 if len(order) <= 64 else 7, "color": "white"},
        marker={"size": 22 if len(order) <= 64 else 14, "color": "#37474f", "symbol": "square"},
        hovertext=[f"rank {r} on {host_of.get(r, '?')} (click for its timeline)" for r in order],
        hovertemplate="%{hovertext}<extra></extra>",
    ))
    return _finish(fig, title, boxes, pairs, inside, written, capped, all_links, order)


def _host_labels(fig: go.Figure, boxes: list[Box], host_of: dict[int, str], inside: dict[str, list[str]]) -> None:
    """Each host's name and ranks inside its box, and a clickable point there (its customdata: the host,
    which opens the timeline of its ranks)."""
    ranks_of: dict[str, list[int]] = {}
    for rank, host in host_of.items():
        ranks_of.setdefault(host, []).append(int(rank))
    small = len(boxes) > 16
    labels = []
    for host, x0, y0, x1, y1 in boxes:
        members = sorted(ranks_of.get(host, []))
        span = f"{members[0]}–{members[-1]}" if members and members[-1] - members[0] + 1 == len(members) else \
            ",".join(map(str, members[:4])) + ("…" if len(members) > 4 else "")
        lines = [f"<b>{host}</b>", f"ranks {span}", *inside.get(host, [])]
        labels.append(go.layout.Annotation(x=(x0 + x1) / 2, y=(y0 + y1) / 2, text="<br>".join(lines),
                                           showarrow=False, align="center",
                                           font={"size": 8 if small else 10, "color": "#263238"}))
    # all at once: add_annotation validates the whole tuple again for each one (quadratic: 512 hosts took 65 s)
    fig.layout.annotations = (*fig.layout.annotations, *labels)
    fig.add_trace(go.Scatter(
        x=[(b[1] + b[3]) / 2 for b in boxes], y=[(b[2] + b[4]) / 2 for b in boxes], mode="markers", name="host",
        showlegend=False, customdata=[b[0] for b in boxes], marker={"size": 30, "opacity": 0},
        hovertext=[f"{b[0]}: {len(ranks_of.get(b[0], []))} ranks (click for their timeline)" for b in boxes],
        hovertemplate="%{hovertext}<extra></extra>"))


def _finish(fig: go.Figure, title: str, boxes: list[Box], pairs: pl.DataFrame, inside: dict[str, list[str]],
            written: bool, capped: bool, all_links: int, order: list[int]) -> go.Figure:
    notes = []
    if pairs.height and set(pairs["tier"].to_list()) == {UNKNOWN}:
        notes.append("every link tier is unknown: start the dashboard with --network ib|roce|ethernet")
    if inside and not written:
        notes.append("hover a host's box for the traffic inside it")
    if capped:
        notes.append(f"{pairs.height} of {all_links} host links drawn, the heaviest (equal ones all or none)")
    if len(order) > 64:
        notes.append("hover a square for its rank")
    if not order:
        notes.append("ranks summed per host: click a host for its ranks' timeline")
    if notes:
        note(fig, "; ".join(notes))
    xs = [v for b in boxes for v in (b[1], b[3])]
    ys = [v for b in boxes for v in (b[2], b[4])]
    span_x, span_y = max(xs) - min(xs), max(ys) - min(ys)
    scale = 520 if len(boxes) <= 3 else 900
    height = min(MAX_FIGURE_PX, max(420, int(130 + scale * span_y / max(span_x, span_y, 1e-9))))
    fig.update_layout(height=height, hovermode="closest", legend={"title": "links: dimension · tier · per link"},
                      xaxis={"visible": False, "range": [min(xs) - 0.6, max(xs) + 0.6]},
                      yaxis={"visible": False, "scaleanchor": "x", "range": [min(ys) - 1.6, max(ys) + 0.9]})
    return base_layout(fig, title, margin={"t": 60, "l": 20, "r": 20, "b": 20})


def traffic_figure(matrix: pl.DataFrame, ranks: list[int], hosts: dict[int, str]) -> go.Figure:
    """Heatmap of bytes per step, row sends to column: rank × rank up to MAX_HEATMAP_RANKS ranks, else
    host × host (the sum of the analysis' rank-pair rows)."""
    title = "Traffic per step (row sends to column)"
    if matrix.height == 0:
        return empty(title, "no traffic with known groups and sizes")
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
    return traffic_heatmap(labels, src.to_list(), dst.to_list(), matrix["bytes_per_step"].to_list(), what, title)


def traffic_heatmap(labels: list[str], src: list[str], dst: list[str], values: list[float], what: str, title: str
                    ) -> go.Figure:
    """The traffic heatmap of ``labels`` × ``labels``: each (src, dst, bytes per step) summed into its cell,
    on a log colour scale."""
    index = {name: i for i, name in enumerate(labels)}
    z = np.zeros((len(labels), len(labels)))
    for s, d, b in zip(src, dst, values, strict=True):
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
    return base_layout(fig, title)
