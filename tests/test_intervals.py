"""Interval algebra against a brute-force oracle on small integer timelines."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from commprof.analyzers import intervals as iv

spans = st.lists(st.tuples(st.integers(0, 60), st.integers(0, 15)), max_size=12)


def cover(pairs: list[tuple[int, int]]) -> np.ndarray:
    grid = np.zeros(80, dtype=bool)
    for s, d in pairs:
        grid[s : s + d] = True
    return grid


def as_union(pairs: list[tuple[int, int]]) -> iv.Union:
    return iv.union([s for s, _ in pairs], [s + d for s, d in pairs])


def grid_of(u: iv.Union) -> np.ndarray:
    grid = np.zeros(80, dtype=bool)
    for s, e in zip(u[0], u[1], strict=True):
        grid[s:e] = True
    return grid


@settings(max_examples=300, deadline=None)
@given(spans, spans)
def test_union_subtract_intersect_match_brute_force(a: list[tuple[int, int]], b: list[tuple[int, int]]) -> None:
    ua, ub = as_union(a), as_union(b)
    assert (grid_of(ua) == cover(a)).all()
    assert iv.length(ua) == cover(a).sum()
    assert (grid_of(iv.subtract(ua, ub)) == (cover(a) & ~cover(b))).all()
    assert (grid_of(iv.intersect(ua, ub)) == (cover(a) & cover(b))).all()
    # a union is sorted, disjoint and non-touching
    assert (ua[0][1:] > ua[1][:-1]).all()


def test_per_lane_union_keeps_lanes_apart() -> None:
    lanes = np.array([0, 1, 0], dtype=np.int64)
    u = iv.per_lane_union(lanes, np.array([0, 5, 8]), np.array([10, 20, 12]), span=100)
    assert iv.length(u) == 12 + 15
    merged = iv.unshift(u, 100)
    assert merged[0].tolist() == [0] and merged[1].tolist() == [20]


@settings(max_examples=300, deadline=None)
@given(spans, st.lists(st.integers(-5, 90), max_size=20), st.booleans())
def test_inside_is_contains_at_the_segments_left_ends(a: list[tuple[int, int]], extra: list[int],
                                                      with_bounds: bool) -> None:
    """``inside(u, points)`` == ``contains(u, points[:-1])``: with every bound among the points (the fast
    path) or not (the fallback), a point at either end, empty unions and fewer than two points."""
    u = as_union(a)
    parts = [np.asarray(extra, dtype=np.int64)] + ([u[0], u[1]] if with_bounds else [])
    points = iv.sorted_unique(np.concatenate(parts))
    assert np.array_equal(iv.inside(u, points), iv.contains(u, points[:-1]))


def test_inside_takes_the_search_for_intervals_that_touch() -> None:
    touching = (np.array([0, 5]), np.array([5, 9]))  # not a union (they touch): the marks would cancel at 5
    points = np.array([0, 3, 5, 7, 9, 12])
    assert np.array_equal(iv.inside(touching, points), [True, True, True, True, False])
