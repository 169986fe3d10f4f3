"""Interval algebra on sorted numpy arrays (integer ns, half-open [start, end)).

A *union* is a pair of arrays (starts, ends), sorted, disjoint and non-touching. Everything here is
vectorised: sorts, cumulative maxima and searchsorted, never a Python loop over intervals.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

Array = npt.NDArray[np.int64]
Union = tuple[Array, Array]

EMPTY: Union = (np.empty(0, dtype=np.int64), np.empty(0, dtype=np.int64))


def union(starts: npt.ArrayLike, ends: npt.ArrayLike) -> Union:
    s = np.asarray(starts, dtype=np.int64)
    e = np.asarray(ends, dtype=np.int64)
    keep = e > s
    s, e = s[keep], e[keep]
    if s.size == 0:
        return EMPTY
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    reach = np.maximum.accumulate(e)
    new_group = np.empty(s.size, dtype=bool)
    new_group[0] = True
    new_group[1:] = s[1:] > reach[:-1]
    first = np.flatnonzero(new_group)
    return s[first], np.maximum.reduceat(e, first)


def contains(u: Union, points: Array) -> npt.NDArray[np.bool_]:
    """For each point t: is t inside the union (start <= t < end)?"""
    us, ue = u
    if us.size == 0:
        return np.zeros(points.shape, dtype=bool)
    idx = np.searchsorted(us, points, side="right") - 1
    safe = np.clip(idx, 0, None)
    return (idx >= 0) & (ue[safe] > points)


def inside(u: Union, points: Array) -> npt.NDArray[np.bool_]:
    """``contains(u, points[:-1])`` for sorted, unique ``points`` that hold every bound of ``u`` (the elementary
    segments' left ends): marks at the bounds and a running sum, instead of a binary search per point (~2x
    faster on the 54 MB trace's 60k points). Other points: :func:`contains`."""
    us, ue = u
    n = points.size
    if us.size == 0 or n < 2:
        return contains(u, points[:-1])
    at_s, at_e = np.searchsorted(points, us), np.searchsorted(points, ue)
    if at_e[-1] >= n or (points[at_s] != us).any() or (points[at_e] != ue).any() or (ue[:-1] >= us[1:]).any():
        return contains(u, points[:-1])
    marks = np.zeros(n, np.int64)
    marks[at_s] = 1
    marks[at_e] = -1
    return np.cumsum(marks[:-1]) > 0


def sorted_unique(values: Array) -> Array:
    """np.unique for int64, by sort (numpy 2's hash-based unique is slower on these sizes)."""
    out = np.sort(values, kind="stable")
    if out.size:
        out = out[np.concatenate(([True], out[1:] != out[:-1]))]
    return out


def boundaries(*unions: Union) -> Array:
    parts = [np.concatenate(u) for u in unions if u[0].size]
    if not parts:
        return np.empty(0, dtype=np.int64)
    return sorted_unique(np.concatenate(parts))


def combine(points: Array, mask: npt.NDArray[np.bool_]) -> Union:
    """The union of elementary segments [points[i], points[i+1]) where mask[i] holds."""
    if points.size < 2:
        return EMPTY
    keep = np.flatnonzero(mask[: points.size - 1])
    return union(points[keep], points[keep + 1])


def subtract(a: Union, b: Union) -> Union:
    if a[0].size == 0 or b[0].size == 0:
        return a
    pts = boundaries(a, b)
    return combine(pts, inside(a, pts) & ~inside(b, pts))


def intersect(a: Union, b: Union) -> Union:
    if a[0].size == 0 or b[0].size == 0:
        return EMPTY
    pts = boundaries(a, b)
    return combine(pts, inside(a, pts) & inside(b, pts))


def length(u: Union) -> int:
    return int((u[1] - u[0]).sum())


def per_lane_union(lanes: npt.NDArray[np.int64], starts: Array, ends: Array, span: int) -> Union:
    """Union within each lane, lanes kept apart by shifting lane k to [k*span, (k+1)*span).

    Lets per-lane algebra (a thread's compute minus the waits nested in it) run as one
    vectorised operation; ``unshift`` maps the result back.
    """
    return union(starts + lanes * span, ends + lanes * span)


def unshift(u: Union, span: int) -> Union:
    lane = u[0] // span
    return union(u[0] - lane * span, u[1] - lane * span)


def clip(u: Union, lo: int, hi: int) -> Union:
    s = np.clip(u[0], lo, hi)
    e = np.clip(u[1], lo, hi)
    keep = e > s
    return s[keep], e[keep]
