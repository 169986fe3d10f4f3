"""Numbers as the trace writers give them (ints, floats, text): read into int64 or None. Apart from
comm.py (which re-exports them) so that the pass (scan.py) imports them without polars."""

from __future__ import annotations

import math

INT64_LIMIT = 1 << 63


def num(value: object) -> float | None:
    """A finite number within int64, or None: a field with text, NaN, inf or 400 digits is not a size,
    a rank or a sequence number (the caller counts it as missing)."""
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, int):
        return float(value) if -INT64_LIMIT <= value < INT64_LIMIT else None
    if isinstance(value, float):
        number = value
    else:
        try:
            number = float(str(value))
        except (ValueError, OverflowError):
            return None
    return number if math.isfinite(number) and -INT64_LIMIT <= number < INT64_LIMIT else None


def as_int(value: object) -> int | None:
    if type(value) is int:
        return value if -INT64_LIMIT <= value < INT64_LIMIT else None
    number = num(value)
    return int(number) if number is not None else None
