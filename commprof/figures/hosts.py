"""Topology figures of a few hosts of a large run: the hosts a page draws (the analysis' host summary rows,
worst first, and the one asked for) around one box for every other host, and their traffic matrix. The
traffic is ``Analysis.host_traffic``'s (those hosts apart, the rest summed as ``OTHER_HOSTS``), so nothing
here grows with the run's ranks. Pure builders: polars in, ``go.Figure`` out."""

from __future__ import annotations

import math
from typing import Any

import plotly.graph_objects as go
import polars as pl

from commprof.analyzers.traffic import OTHER_HOSTS
from commprof.figures import style
from commprof.figures.base import MAX_FIGURE_PX, base_layout, empty, note
from commprof.figures.topology import MAX_LINKS, add_link_traces, heaviest_links, traffic_heatmap

SLOW_PORT_COLOUR = "#c62828"
CHOSEN_COLOUR = "#1565c0"
AGGREGATE_ABOVE_RANKS = 256  # past this many ranks the views draw hosts, worst first, never a box per rank
WORST_HOSTS = 16  # hosts in a table and in a topology drawing of a large run


def drawn_hosts(summary: pl.DataFrame, chosen: str | None = None, limit: int = WORST_HOSTS) -> pl.DataFrame:
    """The hosts a large run's topology draws: the first ``limit`` rows of the analysis' host summary (worst
    first), the ``chosen`` one in the last place when it is not among them."""
    head = summary.head(limit)
    if chosen is None or chosen in set(head["host"].to_list()):
        return head
    return pl.concat([head.head(limit - 1), summary.filter(pl.col("host") == chosen)])


def hosts_drawing(analysis: Any, chosen: str | None = None) -> tuple[pl.DataFrame, pl.DataFrame, int]:
    """(the hosts drawn, their traffic with every other host summed, calls left out) of an ``Analysis``: what the
    dashboard's topology page and the report's picture draw past ``AGGREGATE_ABOVE_RANKS`` ranks."""
    hosts = drawn_hosts(analysis.host_summary, chosen)
    links, calls_left_out = analysis.host_traffic(hosts["host"].to_list())
    return hosts, links, calls_left_out


def _pairs(links: pl.DataFrame) -> pl.DataFrame:
    """a, b (a < b), dimension, tier, bytes_per_step between two different boxes, both directions summed."""
    return (links.filter(pl.col("src_host") != pl.col("dst_host"))
            .with_columns(pl.min_horizontal("src_host", "dst_host").alias("a"),
                          pl.max_horizontal("src_host", "dst_host").alias("b"))
            .group_by("a", "b", "dimension", "tier").agg(pl.col("bytes_per_step").sum()).sort("a", "b", "dimension"))


def _inside(links: pl.DataFrame) -> dict[str, list[str]]:
    """host -> "tp (nvlink) 3.2 GB/step inside" lines: a box's traffic between its own ranks."""
    out: dict[str, list[str]] = {}
    own = (links.filter(pl.col("src_host") == pl.col("dst_host")).group_by("src_host", "dimension", "tier")
           .agg(pl.col("bytes_per_step").sum()).sort("src_host", "dimension"))
    for host, dim, tier, b in own.iter_rows():
        out.setdefault(host, []).append(f"{dim} ({tier}) {style.fmt_bytes(b)}/step inside")
    return out


def _hover(row: dict[str, Any], inside: list[str], interactive: bool = True) -> str:
    lines = [f"<b>#{row['worst']} {row['host']}</b>: {row['ranks']} ranks ({row['first_rank']}–{row['last_rank']})",
             f"exposed comm {style.fmt_ms(row['exposed_comm_ns'])} ms per rank-step",
             f"to other hosts {style.fmt_bytes(row['net_bytes_per_step'])}/step, "
             f"between its ranks {style.fmt_bytes(row['local_bytes_per_step'])}/step"]
    if row["waited_on_ns_per_step"]:
        lines.append(f"others wait {style.fmt_ms(row['waited_on_ns_per_step'])} ms/step for its rank "
                     f"{row['waited_on_rank']}")
    if row["port_gbps"] is not None:
        lines.append(f"port {row['port_gbps']:g} GB/s" + (" (slower than the run's fastest)" if row["slow_port"]
                                                          else ""))
    return "<br>".join([*lines, *inside, *(["(click: the timeline of its ranks)"] if interactive else [])])


def host_topology_figure(hosts: pl.DataFrame, links: pl.DataFrame, total_hosts: int, chosen: str | None = None,
                         interactive: bool = True) -> go.Figure:
    """``hosts`` (host summary rows, in order) as boxes on a circle around one box for the run's other hosts;
    links coloured by dimension and as wide as their bytes per step (the heaviest MAX_LINKS, equal ones all or
    none, as the topology of a smaller run); a box outlined red when its ports are slower than the run's
    fastest, blue when it is ``chosen``. A box's customdata is its host (a click opens its ranks' timeline);
    ``interactive=False`` (a report's page) says nothing of clicking or picking."""
    title = f"The {hosts.height} hosts first in line and the other {total_hosts - hosts.height:,}; links coloured " \
            "by dimension, width = bytes per step"
    if hosts.height == 0:
        return empty(title, "no hosts")
    names = hosts["host"].to_list()
    n, side = len(names), 6.0
    radius = max(n * (side * 1.45 + 1.2) / (2 * math.pi), side * 2.4)
    angle = [math.pi / 2 - 2 * math.pi * i / n for i in range(n)]
    centre = {h: (radius * math.cos(t), radius * math.sin(t)) for h, t in zip(names, angle, strict=True)}
    rest = total_hosts - n
    big = side * 1.5
    if rest > 0:
        centre[OTHER_HOSTS] = (0.0, 0.0)
    pairs = _pairs(links.filter(pl.col("src_host").is_in(list(centre)) & pl.col("dst_host").is_in(list(centre))))
    all_links = pairs.height
    pairs, left_out = heaviest_links(pairs, MAX_LINKS)
    fig = go.Figure()
    add_link_traces(fig, pairs, centre)
    inside = _inside(links)
    rows = hosts.to_dicts()
    for row in rows:  # boxes over the links
        x, y = centre[row["host"]]
        colour = CHOSEN_COLOUR if row["host"] == chosen else SLOW_PORT_COLOUR if row["slow_port"] else "#78909c"
        width = 3 if row["host"] == chosen or row["slow_port"] else 1
        h = side / 2
        fig.add_trace(go.Scatter(x=[x - h, x + h, x + h, x - h, x - h], y=[y - h, y - h, y + h, y + h, y - h],
                                 mode="lines", fill="toself", fillcolor="rgba(245,247,248,0.95)",
                                 line={"color": colour, "width": width}, showlegend=False, hoverinfo="skip"))
    if rest > 0:
        h = big / 2
        fig.add_trace(go.Scatter(x=[-h, h, h, -h, -h], y=[-h, -h, h, h, -h], mode="lines", fill="toself",
                                 fillcolor="rgba(236,239,241,0.95)", showlegend=False, hoverinfo="skip",
                                 line={"color": "#90a4ae", "width": 1, "dash": "dot"}))
    labels = [f"<b>#{r['worst']} {r['host']}</b><br>ranks {r['first_rank']}–{r['last_rank']}"
              + (f"<br>port {r['port_gbps']:g} GB/s" if r["port_gbps"] is not None else "") for r in rows]
    fig.add_trace(go.Scatter(
        x=[centre[r["host"]][0] for r in rows], y=[centre[r["host"]][1] for r in rows], mode="markers+text",
        text=labels, textfont={"size": 9, "color": "#263238"}, showlegend=False, name="host",
        customdata=[r["host"] for r in rows], marker={"size": 40, "opacity": 0, "symbol": "square"},
        hovertext=[_hover(r, inside.get(r["host"], []), interactive) for r in rows],
        hovertemplate="%{hovertext}<extra></extra>"))
    if rest > 0:
        fig.add_trace(go.Scatter(
            x=[0.0], y=[0.0], mode="text",
            text=[f"<b>{rest:,} other hosts</b>" + ("<br>(pick one above)" if interactive else "")],
            textfont={"size": 10, "color": "#455a64"}, showlegend=False, hoverinfo="skip"))
    notes = ["ranks summed per host" + (": click a host for its ranks' timeline" if interactive else "")]
    if any(r["slow_port"] for r in rows):
        notes.append("red: ports slower than the run's fastest")
    if pairs.height < all_links:
        notes.append(f"{pairs.height} of {all_links} links drawn, the heaviest (equal ones all or none)")
    note(fig, "; ".join(notes))
    fig.layout.meta = {"left_out": left_out}
    reach = radius + side
    fig.update_layout(height=min(MAX_FIGURE_PX, 760), hovermode="closest",
                      legend={"title": "links: dimension · tier · per link"},
                      xaxis={"visible": False, "range": [-reach, reach]},
                      yaxis={"visible": False, "scaleanchor": "x", "range": [-reach, reach]})
    return base_layout(fig, title, margin={"t": 60, "l": 20, "r": 20, "b": 20})


def host_matrix_figure(links: pl.DataFrame, order: list[str], total_hosts: int) -> go.Figure:
    """Bytes per step from host to host (row sends to column) between ``order`` and, summed, every other host."""
    title = f"Traffic per step (row sends to column) — {len(order)} of {total_hosts:,} hosts, the rest summed"
    if links.height == 0:
        return empty(title, "no traffic with known groups and sizes")
    labels = [*order, *([OTHER_HOSTS] if total_hosts > len(order) else [])]
    return traffic_heatmap(labels, links["src_host"].to_list(), links["dst_host"].to_list(),
                           links["bytes_per_step"].to_list(), "host", title)
