"""Kineto times (µs as JSON numbers) to integer ns, exactly.

Epoch timestamps are about 1.7e15 µs: as float64 they keep only a quarter of a µs, and multiplied by
1000 they lose up to 128 ns more. So the decoder hands float literals over as their text (msgspec's
``float_hook=str``) and integers as ints, and this module turns both into int64 ns without a float
in between: integers times 1000 (the common case, one numpy call), decimal text split into its whole
and fractional digits (vectorised in polars), rounded half up at the ns. Exponent forms (``1.7e15``)
are rare and go through ``decimal``.
"""

from __future__ import annotations

from collections.abc import Sequence
from decimal import ROUND_HALF_UP, Decimal, InvalidOperation
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

# |ns| of a time or duration that commprof accepts (~73 years): sums of a base, a start and a duration
# stay inside int64, so no figure can wrap around
LIMIT_NS = 1 << 61
_LIMIT_US = LIMIT_NS // 1000


def to_ns(values: Sequence[Any]) -> tuple[I64, Mask]:
    """ns of each µs value (int, float-literal text, numeric string or float) and which were numbers.
    Invalid entries (None, bools, text that is not a number, beyond ``LIMIT_NS``) read 0 with ``valid``
    False."""
    if len(values) == 0:
        return np.empty(0, np.int64), np.empty(0, np.bool_)
    if type(values[0]) is int:  # whole µs, the common case: one numpy call, no polars allocation
        arr = np.asarray(values)
        if arr.dtype.kind == "i" and arr.ndim == 1 and arr.dtype.itemsize == 8:
            if -_LIMIT_US < int(arr.min()) and int(arr.max()) < _LIMIT_US:
                return arr * 1000, np.ones(len(values), np.bool_)
            return _bounded(np.where(np.abs(arr) < _LIMIT_US, arr, 0) * 1000, np.abs(arr) < _LIMIT_US)
    try:
        series = pl.Series(values)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        series = pl.Series([_as_text(v) for v in values], dtype=pl.String)
    if series.dtype == pl.Int64 and not series.has_nulls():
        arr = series.to_numpy()
        return _bounded(np.where(np.abs(arr) < _LIMIT_US, arr, 0) * 1000, np.abs(arr) < _LIMIT_US)
    if series.dtype != pl.String:
        series = pl.Series([_as_text(v) for v in values], dtype=pl.String)
    return _bounded(*_from_text(series))


def _bounded(ns: I64, valid: Mask) -> tuple[I64, Mask]:
    ok = valid & (np.abs(ns) < LIMIT_NS)
    return np.where(ok, ns, 0), ok


def one_ns(value: Any) -> int | None:
    """ns of a single µs value, or None."""
    ns, valid = to_ns([value])
    return int(ns[0]) if valid[0] else None


def base_ns(value: Any) -> int:
    """``baseTimeNanoseconds`` (already ns) as an exact int; 0 when absent or not a number."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value if abs(value) < LIMIT_NS else 0
    try:
        exact = Decimal(str(value))
        if not exact.is_finite() or abs(exact) >= LIMIT_NS:
            return 0
        return int(exact.to_integral_value(ROUND_HALF_UP))
    except (InvalidOperation, ValueError, OverflowError):
        return 0


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        return repr(value) if np.isfinite(value) else None
    return str(value)


def _from_text(text: pl.Series) -> tuple[I64, Mask]:
    """Plain decimals (``-12.3456``) in one vectorised pass; what it cannot read goes to ``decimal``."""
    whole, frac = pl.col("t").struct.field("field_0"), pl.col("t").struct.field("field_1")
    frac_ns = (frac.fill_null("").str.pad_end(4, "0").str.slice(0, 4).cast(pl.UInt16, strict=False)
               .cast(pl.Int64) + 5) // 10  # 4 digits, rounded half up to 3
    magnitude = whole.cast(pl.Int64, strict=False).abs() * 1000 + frac_ns
    # only plain decimals here: "4.6e+18" and "1.2.3" have digits where a fraction is read; decimal decides
    plain = pl.col("t").struct.field("field_2").is_null() & (
        frac.is_null() | frac.cast(pl.UInt64, strict=False).is_not_null()) & (
        whole.cast(pl.Int64, strict=False).abs() < _LIMIT_US)
    ns = (
        pl.DataFrame({"t": text.str.split_exact(".", 2), "neg": text.str.starts_with("-")})
        .lazy()
        .select(pl.when(~plain).then(None).when(pl.col("neg")).then(-magnitude).otherwise(magnitude).alias("ns"))
        .collect()
        .to_series()
    )
    out = ns.fill_null(0).to_numpy().astype(np.int64, copy=True)
    valid = ns.is_not_null().to_numpy().copy()
    odd = np.flatnonzero(~valid & text.is_not_null().to_numpy())
    for i in odd.tolist():  # exponent forms, padded text and the like: rare
        exact = _decimal_ns(text[i])
        if exact is not None:
            out[i], valid[i] = exact, True
    return out, valid


def _decimal_ns(text: str) -> int | None:
    try:
        value = Decimal(text.strip()) * 1000
    except InvalidOperation:
        return None
    if not value.is_finite() or abs(value) >= LIMIT_NS:
        return None
    return int(value.to_integral_value(ROUND_HALF_UP))
