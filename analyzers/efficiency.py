"""Peak bandwidth per link tier, and efficiency = busbw / peak (DESIGN §3 "busbw").

Peaks are GB/s per GPU, one direction — the unit busbw is in. Defaults:

- nvlink by GPU generation (from the trace's ``gpu_name``): A100 300, H100/H200 450, B200/GB200 900;
  unknown GPUs: none (pass ``--peak nvlink=...``).
- pcie: 64 for PCIe 5.0 GPUs (Hopper, Blackwell), 32 for PCIe 4.0 ones (Ampere, Ada); else none.
- ib / roce / ethernet: the NIC speed NCCL logged for the group's communicator (Mbps / 8000), or the
  rate of the active ports in the topology capture; without one, ib 50 (NDR 400 Gb/s), roce 25,
  ethernet 12.5.
- loopback, shm, unknown: none — no meaningful peak, so no efficiency.

``--peak nvlink=450,ib=50`` overrides any of them (measured NIC speeds included).
"""

from __future__ import annotations

import re

import polars as pl

from commprof.errors import UsageError

PEAK_TIERS = ("nvlink", "pcie", "shm", "ib", "roce", "ethernet", "spine", "loopback")
NETWORK_DEFAULTS = {"ib": 50.0, "roce": 25.0, "ethernet": 12.5}
TIERS_WITHOUT_PEAK = frozenset({"loopback", "shm", "spine", "unknown"})  # efficiency needs a --peak for these
# (pattern in gpu_name, nvlink GB/s, pcie GB/s); first match wins
GPU_PEAKS = (
    (r"\bG?B[123]00\b", 900.0, 64.0),
    (r"\bH100\b|\bH200\b|\bGH200\b|\bH20\b", 450.0, 64.0),
    (r"\bH800\b", 200.0, 64.0),  # export part: 400 GB/s NVLink in both directions together
    (r"\bA100\b|\bA800\b", 300.0, 32.0),
    (r"\bA10G?\b|\bA40\b|\bA30\b|\bL40S?\b|\bL4\b|\bRTX\b", None, 32.0),
)


def parse_peaks(text: str | None) -> dict[str, float]:
    """``nvlink=450,ib=50`` (GB/s) -> {tier: GB/s}. UsageError for an unknown tier or a bad number."""
    out: dict[str, float] = {}
    for part in (p.strip() for p in (text or "").split(",")):
        if not part:
            continue
        tier, sep, value = part.partition("=")
        tier = tier.strip().lower()
        if not sep:
            raise UsageError(f"--peak: {part!r} is not tier=GB/s (e.g. nvlink=450,ib=50)")
        if tier not in PEAK_TIERS:
            raise UsageError(f"--peak: unknown tier {tier!r}; known: {', '.join(PEAK_TIERS)}")
        try:
            gbps = float(re.sub(r"\s*GB/?s$", "", value.strip(), flags=re.IGNORECASE))
        except ValueError:
            raise UsageError(f"--peak: {tier} must be a number of GB/s, not {value.strip()!r}") from None
        if not gbps > 0:
            raise UsageError(f"--peak: {tier} must be more than 0 GB/s")
        out[tier] = gbps
    return out


def gpu_peaks(gpu_name: str | None) -> tuple[float | None, float | None]:
    """(nvlink, pcie) GB/s for a GPU name, or None where unknown."""
    for pattern, nvlink, pcie in GPU_PEAKS:
        if gpu_name and re.search(pattern, gpu_name, re.IGNORECASE):
            return nvlink, pcie
    return None, None


def peak_gbps(tier: str | None, gpu_name: str | None, link_gbps: float | None = None,
              overrides: dict[str, float] | None = None, defaults: bool = True) -> float | None:
    """The peak a collective on ``tier`` can reach, GB/s per GPU and direction (None: no peak). ``defaults``
    False (a CPU run: Gloo's TCP, whose pace the cores set, not a NIC's): only a ``--peak`` gives one."""
    if overrides and tier in overrides:
        return overrides[tier]
    if not defaults:
        return None
    if tier in NETWORK_DEFAULTS:
        return link_gbps if link_gbps else NETWORK_DEFAULTS[tier]
    if tier in ("nvlink", "pcie"):
        nvlink, pcie = gpu_peaks(gpu_name)
        return nvlink if tier == "nvlink" else pcie
    return None


def with_peaks(groups: pl.DataFrame, gpu_name: str | None, overrides: dict[str, float] | None,
               defaults: bool = True) -> pl.DataFrame:
    """Add ``peak_gbps`` to process groups that carry ``tier`` and ``link_gbps``."""
    links = groups["link_gbps"].to_list() if "link_gbps" in groups.columns else [None] * groups.height
    peaks = [peak_gbps(t, gpu_name, link, overrides, defaults)
             for t, link in zip(groups["tier"].to_list(), links, strict=True)]
    return groups.with_columns(pl.Series("peak_gbps", peaks, dtype=pl.Float64))


def efficiency_expr(busbw_gbps: pl.Expr, peak: pl.Expr) -> pl.Expr:
    """busbw / peak as a fraction (1.0 = at peak); null where either is unknown."""
    return pl.when(peak > 0).then(busbw_gbps / peak)
