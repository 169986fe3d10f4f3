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
from decimal import ROUND_HALF_UP, Decimal
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt

from commprof.ingest.common.time_limits import MAX_NS, MAX_US

if TYPE_CHECKING:
    import polars as pl

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

def to_ns(values: Sequence[Any]) -> tuple[I64, Mask]:
    """ns of each µs value (int, float-literal text, numeric string or float) and which were numbers.
    Invalid entries (None, bools, text that is not a number, beyond ``MAX_NS``) read 0 with ``valid``
    False."""
    if len(values) == 0:
        return np.empty(0, np.int64), np.empty(0, np.bool_)
    if type(values[0]) is int:  # whole µs, the common case: one numpy call, no polars allocation
        try:
            arr = np.asarray(values)
        except (ValueError, TypeError, OverflowError):  # a list among the numbers ("ts": [])
            arr = np.empty(0, np.float64)
        if arr.dtype.kind == "i" and arr.ndim == 1 and np.abs(arr).max() <= MAX_US:
            return arr.astype(np.int64, copy=False) * 1000, np.ones(len(values), np.bool_)
    if len(values) <= SMALL:
        return _small(values)
    if type(values[0]) is str:
        plain = _plain_decimals(values)
        if plain is not None:
            return plain
    return _general(values)


def _general(values: Sequence[Any]) -> tuple[I64, Mask]:
    import polars as pl  # here: the pass over whole-µs times (kineto.prefetch's child) does without it

    if len(values) <= SMALL:
        return _small(values)
    try:
        series = pl.Series(values)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        series = pl.Series([_as_text(v) for v in values], dtype=pl.String)
    if series.dtype == pl.Int64 and not series.has_nulls() and series.abs().max() <= MAX_US:  # type: ignore[operator]
        return series.to_numpy() * 1000, np.ones(len(values), np.bool_)
    if series.dtype != pl.String:
        series = pl.Series([_as_text(v) for v in values], dtype=pl.String)
    return _from_text(series)


# Below this many values a Python loop beats polars' fixed cost per call (measured with 3-decimal epoch
# text: ~0.55 µs a value in Python against ~1.2 ms + 0.15 µs a value in polars; even near 3,000 values);
# a trace has several such columns per rank, and small ranks are many in a large job.
SMALL = 2500


def _plain_decimals(values: Sequence[Any]) -> tuple[I64, Mask] | None:
    """The usual text, ``digits.d`` to ``digits.ddd`` (Kineto's 3 decimals, Python's ``...0.0``), by polars: such a
    text read as a decimal of scale 3 (exact: it has no more places) is the ns, its unscaled integer (to_ns of 32k
    epoch texts: ~1.2x faster than splitting at the dot); every other value by :func:`_from_text`, as the whole list
    would have been (it treats each value on its own). None when ``values`` are not all text.

    Eager Series operations and numpy, not a lazy query: the same values ~1.4x faster, and the query engine's code
    (~7 MB of the library's pages, resident from the first call on) is not paged in by the pass."""
    import polars as pl  # here: the pass over whole-µs times (kineto.prefetch's child) does without it

    try:
        series = pl.Series(values)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        return None
    if series.dtype != pl.String:
        return None
    # null where it is not a decimal, or past int64 (past MAX_US too)
    ns = series.cast(pl.Decimal(38, 3), strict=False).to_physical().cast(pl.Int64, strict=False)
    dot = series.str.find(".", literal=True).fill_null(0).to_numpy().astype(np.int64)  # 0: none (or first)
    places = series.str.len_bytes().fill_null(0).to_numpy().astype(np.int64) - dot - 1
    # A dot after the first byte and 1 to 3 bytes after it: what the decimal reads then is exact (no rounding:
    # it has no more places; a sign or a one-digit exponent, the only other forms that fit, scale exactly);
    # what it cannot read is null. Whole µs within MAX_US, as elsewhere. (A regex for the digits cost ~2% of a
    # kernel-heavy trace's ingest.)
    out = ns.fill_null(0).to_numpy().astype(np.int64, copy=True)
    limit = (MAX_US + 1) * 1000
    valid = ns.is_not_null().to_numpy() & (dot >= 1) & (places >= 1) & (places <= 3) & (out > -limit) & (out < limit)
    out[~valid] = 0
    odd = np.flatnonzero(~valid)
    if odd.size:  # what the whole list would have taken, row by row (_small can differ on odd text: "0..")
        rest, rest_ok = _from_text(series.gather(odd))
        out[odd], valid[odd] = rest, rest_ok
    return out, valid


def _small(values: Sequence[Any]) -> tuple[I64, Mask]:
    """The same conversion as the polars path, value by value: whole µs and the usual ``digits.d`` to
    ``digits.ddd`` text (Kineto's 3 decimals, Python's ``1760000000000000.0``: the digits without the
    dot, scaled) inline, the rest by :func:`_one`."""
    ns: list[int | None] = []
    append = ns.append
    for v in values:
        kind = type(v)
        if kind is int:
            append(v * 1000)
            continue
        if kind is str:
            dot = v.find(".")
            places = len(v) - dot - 1
            if dot > 0 and 0 < places <= 3:
                digits = v[:dot] + v[dot + 1 :]
                if digits.isdigit() and digits.isascii():
                    append(int(digits) * _FRACTION_SCALE[places])
                    continue
        append(_one(v))
    try:
        arr = np.fromiter(ns, np.int64, len(ns))  # no None and all within int64: one check in numpy
    except (TypeError, OverflowError):
        arr = None
    if arr is not None:
        valid = (arr >= -MAX_NS) & (arr <= MAX_NS)  # not abs(): it wraps at int64's minimum
        return (arr if valid.all() else np.where(valid, arr, 0)), valid
    valid = np.fromiter((x is not None and -MAX_NS <= x <= MAX_NS for x in ns), np.bool_, len(ns))
    out = np.fromiter((x if ok else 0 for x, ok in zip(ns, valid.tolist(), strict=True)), np.int64, len(ns))
    return out, valid


_FRACTION_SCALE = (0, 100, 10, 1)  # ns per unit of a 1-, 2- or 3-digit fraction of a µs


def _one(v: Any) -> int | None:
    if type(v) is int:
        return v * 1000
    if type(v) is str:
        whole, _, frac = v.partition(".")
        if whole.isdigit() and len(frac) <= 3 and whole.isascii() and frac.isascii() and (frac.isdigit() or not frac):
            return int(whole) * 1000 + (int(frac) * _FRACTION_SCALE[len(frac)] if frac else 0)  # the usual form
        digits = whole[1:] if whole.startswith("-") else whole
        if not (digits.isascii() and digits.isdigit() and (not frac or (frac.isascii() and frac.isdigit()))):
            return _decimal_ns(v)  # exponent forms, padded text and the like: rare
        magnitude = int(digits) * 1000 + (int((frac + "0000")[:4]) + 5) // 10
        return -magnitude if whole.startswith("-") else magnitude
    text = _as_text(v)
    return None if text is None else _decimal_ns(text)


def one_ns(value: Any) -> int | None:
    """ns of a single µs value, or None."""
    ns, valid = to_ns([value])
    return int(ns[0]) if valid[0] else None


def base_ns(value: Any) -> int:
    """``baseTimeNanoseconds`` (already ns) as an exact int; 0 when absent or not a number."""
    if value is None or isinstance(value, bool):
        return 0
    if isinstance(value, int):
        return value if abs(value) <= MAX_NS else 0
    try:
        exact = Decimal(str(value))
        if not exact.is_finite() or abs(exact) > MAX_NS:
            return 0
        return int(exact.to_integral_value(ROUND_HALF_UP))
    except (ArithmeticError, ValueError):  # InvalidOperation, decimal's Overflow, OverflowError
        return 0


def _as_text(value: Any) -> str | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, float):
        return repr(value) if np.isfinite(value) else None
    return str(value)


def _from_text(text: pl.Series) -> tuple[I64, Mask]:
    """Plain decimals (``-12.3456``) in one vectorised pass; what it cannot read goes to ``decimal``."""
    import polars as pl  # here: the pass over whole-µs times (kineto.prefetch's child) does without it

    whole, frac = pl.col("t").struct.field("field_0"), pl.col("t").struct.field("field_1")
    frac_ns = (frac.fill_null("").str.pad_end(4, "0").str.slice(0, 4).cast(pl.UInt16, strict=False)
               .cast(pl.Int64) + 5) // 10  # 4 digits, rounded half up to 3
    whole_us = whole.cast(pl.Int64, strict=False).abs()
    # past int64 ns is not a time: invalid, never wrapped around
    plain = frac.is_null() | frac.str.contains(r"^[0-9]*$")  # "1.5e+16" splits into "1" and "5e+16"
    magnitude = pl.when((whole_us <= MAX_US) & plain).then(whole_us * 1000 + frac_ns)
    ns = (
        pl.DataFrame({"t": text.str.split_exact(".", 1), "neg": text.str.starts_with("-")})
        .lazy()
        .select(pl.when(pl.col("neg")).then(-magnitude).otherwise(magnitude).alias("ns"))
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
    except ArithmeticError:  # not a number (InvalidOperation), or beyond the context's range ('1e1000000': Overflow)
        return None
    if not value.is_finite() or abs(value) > MAX_NS:
        return None
    return int(value.to_integral_value(ROUND_HALF_UP))
