"""Colours and formatting shared by the figures and pages (peaks come from the analysis)."""

from __future__ import annotations

UNKNOWN = "unknown"
UNKNOWN_COLOUR = "#607d8b"

# Parallel dimensions (the classifier's names); anything else gets a colour from EXTRA_COLOURS.
DIMENSION_COLOURS = {
    "tp": "#1f77b4", "pp": "#2ca02c", "dp": "#d62728", "cp": "#9467bd", "ep": "#ff7f0e",
    "fsdp": "#8c564b", "world": "#17becf", UNKNOWN: UNKNOWN_COLOUR,
}
TIER_COLOURS = {
    "nvlink": "#2ca02c", "nvls": "#98df8a", "pcie": "#1f77b4", "shm": "#aec7e8", "ib": "#ff7f0e",
    "roce": "#d62728", "ethernet": "#9467bd", "loopback": "#7f7f7f", UNKNOWN: UNKNOWN_COLOUR,
}
EXTRA_COLOURS = ("#e377c2", "#bcbd22", "#17becf", "#8c564b", "#7f7f7f")

PART_COLOURS = {
    "compute_ns": "#4c78a8", "overlapped_comm_ns": "#72b7b2", "exposed_comm_ns": "#e45756",
    "memory_ns": "#f2cf5b", "idle_ns": "#d3d3d3",
}
PART_LABELS = {
    "compute_ns": "compute", "overlapped_comm_ns": "overlapped comm", "exposed_comm_ns": "exposed comm",
    "memory_ns": "memory", "idle_ns": "idle",
}
COMPUTE_COLOUR = "#d0d0d0"
MEMORY_COLOUR = "#f2cf5b"
EXPOSED_COLOUR = "#000000"


def _colour(name: str | None, table: dict[str, str]) -> str:
    key = (name or UNKNOWN).lower()
    if key in table:
        return table[key]
    return EXTRA_COLOURS[sum(key.encode()) % len(EXTRA_COLOURS)]


def dimension_colour(name: str | None) -> str:
    return _colour(name, DIMENSION_COLOURS)


def tier_colour(name: str | None) -> str:
    return _colour(name, TIER_COLOURS)


def fmt_bytes(n: float | None) -> str:
    if n is None:
        return "?"
    for unit in ("B", "KB", "MB", "GB"):
        if abs(n) < 1000 or unit == "GB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} GB"


def fmt_ns(ns: float | None) -> str:
    if ns is None:
        return "?"
    if abs(ns) >= 1e9:
        return f"{ns / 1e9:.2f} s"
    if abs(ns) >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if abs(ns) >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{ns:.0f} ns"
