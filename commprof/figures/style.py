"""Colours, units and formatting shared by the figures and pages (peaks come from the analysis).

One unit per quantity on every page: time in ms (per step, per call, waits), sizes in bytes with SI
prefixes, bandwidth in GB/s, shares in %. An unknown value reads "unknown", never ``-1 B`` or ``0 B``.

Three palettes that share no colour: parallel dimensions (saturated categorical hues), link tiers (a
blue-green-yellow ramp ordered from the fastest link to the slowest), and "exposed" (near-black).
"""

from __future__ import annotations

import math

UNKNOWN = "unknown"
UNKNOWN_COLOUR = "#9e9e9e"

# Parallel dimensions (the classifier's names); anything else gets a colour from EXTRA_COLOURS.
DIMENSION_COLOURS = {
    "tp": "#1f77b4", "pp": "#2ca02c", "dp": "#d62728", "cp": "#9467bd", "ep": "#ff7f0e",
    "fsdp": "#8c564b", "world": "#e377c2", UNKNOWN: UNKNOWN_COLOUR,
}
EXTRA_COLOURS = ("#bcbd22", "#7b4173", "#ad494a", "#8c6d31")
# Link tiers, fastest first: viridis stops, none of them a dimension colour.
TIER_COLOURS = {
    "nvlink": "#440154", "nvls": "#482878", "shm": "#3e4989", "pcie": "#31688e", "ib": "#1f9e89",
    "roce": "#35b779", "ethernet": "#90d743", "loopback": "#c8b400", UNKNOWN: "#bdbdbd",
}
TIER_EXTRA = ("#26828e", "#6ece58")
EXPOSED_COLOUR = "#111111"

PART_COLOURS = {
    "compute_ns": "#8fa7c4", "overlapped_comm_ns": "#b7dfd8", "exposed_comm_ns": EXPOSED_COLOUR,
    "memory_ns": "#f2cf5b", "idle_ns": "#e6e6e6",
}
PART_LABELS = {
    "compute_ns": "compute", "overlapped_comm_ns": "overlapped comm", "exposed_comm_ns": "exposed comm",
    "memory_ns": "memory", "idle_ns": "idle",
}
COMPUTE_COLOUR = "#b0b0b0"
MEMORY_COLOUR = "#f2cf5b"
SEVERITY_COLOURS = {"high": "#b71c1c", "medium": "#e65100", "low": "#827717", "info": "#546e7a"}
TEMPLATE = "plotly_white"


def _colour(name: str | None, table: dict[str, str], extra: tuple[str, ...]) -> str:
    key = (name or UNKNOWN).lower()
    if key in table:
        return table[key]
    return extra[sum(key.encode()) % len(extra)]


def dimension_colour(name: str | None) -> str:
    return _colour(name, DIMENSION_COLOURS, EXTRA_COLOURS)


def tier_colour(name: str | None) -> str:
    return _colour(name, TIER_COLOURS, TIER_EXTRA)


def _finite(value: float | None) -> bool:
    return value is not None and isinstance(value, (int, float)) and math.isfinite(value)


def fmt_bytes(n: float | None) -> str:
    """1.5 MB; unknown for a missing or negative size (a trace that does not say)."""
    if not _finite(n) or n < 0:  # type: ignore[operator]
        return UNKNOWN
    value = float(n)  # type: ignore[arg-type]
    for unit in ("B", "KB", "MB", "GB", "TB"):
        if abs(value) < 1000 or unit == "TB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.1f} {unit}"
        value /= 1000
    return f"{value:,.1f} TB"


def fmt_ms(ns: float | None, digits: int = 2) -> str:
    """Nanoseconds as ms rounded as the CLI rounds (``commprof analyze``: 2 decimals), so that a number reads
    the same on both: 12.35 ms, 1.00 ms (not 0.996), 0.01 ms."""
    if not _finite(ns):
        return "–"
    ms = float(ns) / 1e6  # type: ignore[arg-type]
    return f"{ms:,.{digits}f} ms"


def fmt_pct(value: float | None) -> str:
    return f"{value:.1f}%" if _finite(value) else "–"


def fmt_gbps(value: float | None) -> str:
    """12.35 GB/s; three significant digits below 1 (a Gloo run's 0.00309 GB/s is not 0.00)."""
    if not _finite(value):
        return "–"
    v = float(value)  # type: ignore[arg-type]
    return f"{v:,.2f} GB/s" if abs(v) >= 1 or v == 0 else f"{v:.3g} GB/s"


def fmt_ns(ns: float | None) -> str:
    """Kept for callers that format a duration: the dashboard's one time unit (ms)."""
    return fmt_ms(ns)


def group_label(pg: str | None, desc: str | None) -> str:
    """``mesh_dp (pg 5)``: the group's name first, its id after (``pg 5`` when it has no name)."""
    if pg is None or pg == UNKNOWN:
        return "unknown group"
    if desc and desc != pg:
        return f"{desc} (pg {pg})"
    return f"pg {pg}"


def natural_key(name: object) -> tuple[tuple[int, int | str], ...]:
    """Sort key that orders "2" before "14" and "node-2" before "node-10" (text sorts them the other way)."""
    import re

    return tuple((0, int(part)) if part.isdigit() else (1, part) for part in re.split(r"(\d+)", str(name)) if part)
