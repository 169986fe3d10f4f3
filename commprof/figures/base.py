"""What every figure shares: the template, fonts, title placement, the empty figure, a note under the
title, and the size limits (no canvas past the browser's 8192 px)."""

from __future__ import annotations

from typing import Any

import plotly.graph_objects as go

from commprof.figures import style

MAX_HEATMAP_RANKS = 64  # beyond, heatmaps roll ranks up to hosts
MAX_FIGURE_PX = 6000
FONT = {"family": "system-ui, sans-serif", "size": 12}


def base_layout(fig: go.Figure, title: str, **layout: Any) -> go.Figure:
    layout.setdefault("margin", {"t": 60, "l": 70, "r": 30, "b": 60})
    fig.update_layout(template=style.TEMPLATE, title={"text": title, "x": 0, "xanchor": "left", "font": {"size": 15}},
                      font=FONT, hoverlabel={"font_size": 12}, **layout)
    return fig


def empty(title: str, message: str) -> go.Figure:
    fig = go.Figure()
    return base_layout(fig, title, xaxis={"visible": False}, yaxis={"visible": False}, height=260,
                 annotations=[{"text": message, "showarrow": False, "font": {"size": 14}}])


def note(fig: go.Figure, text: str) -> None:
    """A one-line note under the title (inside the top margin, so it never covers the plot)."""
    fig.add_annotation(text=text, showarrow=False, xref="paper", yref="paper", x=0, xanchor="left", y=1.0,
                       yanchor="bottom", yshift=4, font={"size": 12, "color": "#555"})
