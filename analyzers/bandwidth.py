"""Algorithm and bus bandwidth with nccl-tests' conventions, using the collective's *group* size
(not the world size: DeepSpeed's comms logger makes that mistake for sub-groups), over a call's
transfer time: the call minus its wait for later ranks inside it (DESIGN §3 "Skew"), so a late peer
does not read as a slow link."""

from __future__ import annotations

import polars as pl

# op -> (numerator, denominator offset) meaning factor = a * (n - 1) / n, or 1 for point-to-point.
_RING_FACTOR = {"all_reduce": 2.0, "all_gather": 1.0, "reduce_scatter": 1.0, "all_to_all": 1.0,
                "gather": 1.0, "scatter": 1.0}
_ONE = frozenset({"broadcast", "reduce", "send", "recv", "send_recv"})


# said with every bandwidth the outputs show (text report, JSON)
BANDWIDTH_CONVENTION = ("GB/s = 10^9 B/s; busbw over transfer time (a call minus its wait for later ranks): "
                        "algbw = bytes / transfer time, busbw = algbw x the op's bus factor (nccl-tests, "
                        "group size n), efficiency = busbw / the tier's peak")


def busbw_factor(op: str, group_size: int | None) -> float | None:
    if op in _ONE:
        return 1.0
    if op in _RING_FACTOR and group_size:
        n = group_size
        return _RING_FACTOR[op] * (n - 1) / n
    return None


def busbw_factor_expr(op: pl.Expr, n: pl.Expr) -> pl.Expr:
    """The same factor as a polars expression over columns ``op`` and group size ``n``."""
    ring = pl.lit(None, pl.Float64)
    for name, a in _RING_FACTOR.items():
        ring = pl.when(op == name).then(a * (n - 1) / n).otherwise(ring)
    return pl.when(op.is_in(list(_ONE))).then(1.0).otherwise(ring)


def gbps(nbytes: pl.Expr, duration_ns: pl.Expr) -> pl.Expr:
    """Bytes over ns is GB/s (1e9 bytes per second)."""
    return pl.when(duration_ns > 0).then(nbytes.cast(pl.Float64) / duration_ns.cast(pl.Float64))
