"""View state in the URL and validation of everything a browser sends.

A page's state lives in its query string, so that a view can be linked, bookmarked and reloaded:
``/run/<key>/timeline?step=1&ranks=0-7,13&t0=12.5&t1=30`` (t0/t1: ms since the run's first event),
``/run/<key>/collectives?dimension=dp&tier=ib&op=all_reduce&pg=5``, ``/run/<key>/skew?pg=5``.

Every value from the browser (query strings and callback inputs) goes through one of the ``as_*``
checks here. A bad value raises ``BadInput`` with a sentence for the user; ``guarded`` turns it (and any
other error in a callback) into that sentence on the page instead of an HTTP 500.
"""

from __future__ import annotations

import functools
import logging
import math
from collections.abc import Callable, Iterable
from typing import Any
from urllib.parse import parse_qs, quote, urlencode

from dash import no_update
from dash.exceptions import PreventUpdate

LOG = logging.getLogger("commprof.dashboard")
MAX_QUERY_VALUE = 4000  # characters: a ranks list of a 1,024-rank run fits
MAX_RANKS_LISTED = 4096
INT64_MAX = 2**63 - 1
MAX_WINDOW_MS = 1e12  # ~31 years: anything beyond is not a trace's time


class BadInput(ValueError):
    """A value from the browser that the dashboard cannot use; ``str(self)`` is shown on the page."""


def parse_query(search: Any) -> dict[str, str]:
    """``?a=1&b=2`` -> {"a": "1", "b": "2"} (the first value of each key); anything else -> {}."""
    if not isinstance(search, str):
        return {}
    parsed = parse_qs(search.lstrip("?")[: 4 * MAX_QUERY_VALUE], keep_blank_values=False)
    return {k: v[0][:MAX_QUERY_VALUE] for k, v in parsed.items() if v}


def href(key: str, page: str, **params: Any) -> str:
    """A page's URL with its state; parameters that are None or empty are left out."""
    query = {k: v for k, v in params.items() if v not in (None, "", [], ())}
    for k, v in query.items():
        if isinstance(v, (list, tuple)):
            query[k] = ranks_text([int(x) for x in v]) if k == "ranks" else ",".join(map(str, v))
    path = f"/run/{quote(key, safe='')}/{page}"
    return path + ("?" + urlencode(query) if query else "")


def ranks_text(ranks: Iterable[int]) -> str:
    """[0, 1, 2, 3, 7] -> "0-3,7" (short URLs for big rank lists)."""
    out: list[str] = []
    values = sorted(set(ranks))
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[j] + 1:
            j += 1
        out.append(str(values[i]) if i == j else f"{values[i]}-{values[j]}")
        i = j + 1
    return ",".join(out)


def as_key(value: Any, known: Iterable[str]) -> str:
    names = list(known)
    if not isinstance(value, str) or value not in names:
        raise BadInput(f"No run named {str(value)[:80]!r}: this dashboard serves {', '.join(names) or 'no runs'}.")
    return value


def as_int(value: Any, what: str, lo: int = -INT64_MAX, hi: int = INT64_MAX) -> int:
    """An integer (or its decimal text) within [lo, hi]; bools, floats with fractions and text are refused."""
    if isinstance(value, bool):
        raise BadInput(f"{what} must be a whole number, not {value!r}")
    if isinstance(value, float) and math.isfinite(value) and value.is_integer():
        value = int(value)
    if isinstance(value, str) and value.strip().lstrip("+-").isdigit() and len(value) < 25:
        value = int(value.strip())
    if not isinstance(value, int):
        raise BadInput(f"{what} must be a whole number, not {str(value)[:40]!r}")
    if not lo <= value <= hi:
        raise BadInput(f"{what} {value} is out of range ({lo}..{hi})")
    return value


def as_float(value: Any, what: str, bound: float = MAX_WINDOW_MS) -> float:
    if isinstance(value, bool):
        raise BadInput(f"{what} must be a number, not {value!r}")
    try:
        number = float(value) if isinstance(value, (int, float, str)) and len(str(value)) < 40 else math.nan
    except ValueError:
        number = math.nan
    if not math.isfinite(number) or abs(number) > bound:
        raise BadInput(f"{what} must be a finite number of ms (|x| <= {bound:g}), not {str(value)[:40]!r}")
    return number


def as_ranks(value: Any, known: Iterable[int]) -> list[int] | None:
    """A rank list from a dropdown (list of ints) or a URL ("0-7,13"); None = nothing chosen. Ranks the
    run does not have are refused, so that a typo does not silently draw nothing."""
    if value in (None, "", []):
        return None
    items: list[Any]
    if isinstance(value, str):
        items = []
        for part in value.split(","):
            part = part.strip()
            lo, sep, hi = part.partition("-")
            if sep and lo.strip().isdigit() and hi.strip().isdigit():
                a, b = int(lo), int(hi)
                if b < a or b - a > MAX_RANKS_LISTED:
                    raise BadInput(f"rank range {part!r} is not a range of at most {MAX_RANKS_LISTED} ranks")
                items.extend(range(a, b + 1))
            elif part:
                items.append(part)
    elif isinstance(value, (list, tuple)):
        items = list(value)
    else:
        items = [value]
    if len(items) > MAX_RANKS_LISTED:
        raise BadInput(f"at most {MAX_RANKS_LISTED} ranks can be chosen, not {len(items)}")
    ranks = sorted({as_int(r, "a rank", 0, 2**31 - 1) for r in items})
    have = set(known)
    missing = [r for r in ranks if r not in have]
    if missing:
        raise BadInput(f"this run has no rank {ranks_text(missing[:20])} (it has {ranks_text(sorted(have))})")
    return ranks


def as_window_ns(value: Any) -> tuple[int, int]:
    """A [start_ns, end_ns] pair from the page's store."""
    if not isinstance(value, (list, tuple)) or len(value) != 2:
        raise BadInput("the time window must be a pair [start, end]")
    start, end = (as_int(v, "a window bound") for v in value)
    return start, max(end, start + 1)


def as_relayout(value: Any) -> tuple[float, float] | str | None:
    """From a graph's relayoutData: (lo_ms, hi_ms) for a zoom, "reset" for autorange, None otherwise."""
    if value is None:
        return None
    if not isinstance(value, dict):
        raise BadInput("the graph sent a zoom that is not an object")
    if value.get("xaxis.autorange") is True or value.get("autosize") is True and "xaxis.range[0]" not in value:
        return "reset" if value.get("xaxis.autorange") else None
    lo, hi = value.get("xaxis.range[0]"), value.get("xaxis.range[1]")
    if lo is None and "xaxis.range" in value:
        pair = value["xaxis.range"]
        if not isinstance(pair, (list, tuple)) or len(pair) != 2:
            raise BadInput("the graph sent a zoom range that is not a pair")
        lo, hi = pair
    if lo is None and hi is None:
        return None
    a, b = as_float(lo, "the zoom start"), as_float(hi, "the zoom end")
    return (min(a, b), max(a, b))


def as_choice(value: Any, what: str, options: Iterable[str]) -> list[str]:
    """A multi-select's values: each must be one of the options (strings)."""
    if value in (None, "", []):
        return []
    items = value if isinstance(value, (list, tuple)) else [value]
    allowed = {str(o) for o in options}
    out = []
    for item in items:
        if not isinstance(item, (str, int)) or isinstance(item, bool) or str(item) not in allowed:
            raise BadInput(f"{what} {str(item)[:40]!r} is not one of this run's {what}s")
        out.append(str(item))
    return out


def guarded(outputs: int, message_at: int | None) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Wrap a callback: a BadInput, or any error, becomes its message in output ``message_at`` (the other
    outputs unchanged) instead of an HTTP 500. With ``message_at`` None nothing changes on the page."""

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def inner(*args: Any) -> Any:
            try:
                return fn(*args)
            except PreventUpdate:
                raise
            except BadInput as err:
                message = str(err)
            except Exception as err:  # noqa: BLE001 - a callback never answers with a traceback
                LOG.warning("dashboard callback %s failed", fn.__name__, exc_info=True)
                message = f"This view could not be drawn: {type(err).__name__}: {str(err)[:300]}"
            result: list[Any] = [no_update] * outputs
            if message_at is not None:
                result[message_at] = message
            return tuple(result) if outputs > 1 else result[0]

        return inner

    return wrap
