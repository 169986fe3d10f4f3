"""Late ranks judged over steps: which rank of a group the others wait for, step after step, and how sure
that is (the statistics behind the ``straggler`` finding, docs/findings.md).

A rank's **lateness in a step** is, summed over the group's calls of that step at which it arrived last,
the smallest wait among the others (what none of them would have waited were it on time). One late
arrival on a noisy machine makes any rank last now and then; a straggler is last step after step. So,
per group (the groups of the innermost dimension, or all calls of unknown groups when nothing is
classified):

* the candidate is the rank with the most rank-steps among the group's ``n`` highest lateness values
  (``n`` = steps judged; ties go to the larger median excess);
* **chance**: the probability that ``x`` or more of those ``n`` top values would fall on one rank if
  lateness were shuffled at random over the group's rank-steps (hypergeometric), times the group size
  (any rank could have been the candidate). 1 - chance is the confidence shown;
* **lateness per step** = the median over steps of (its lateness - the median of the others' in that
  step); **jitter** = the median over steps of the largest lateness among the others.

A rank is a straggler when it is last in most steps, the chance is at most ``MAX_CHANCE``, and its
lateness is at least ``JITTER_FACTOR`` times the jitter and ``MIN_SHARE`` of the step; how loud it may be
follows how sure it is (:func:`max_severity`). Calls whose group
was not seen whole, point-to-point calls (pipeline structure, not straggling) and calls with a rank whose
clock or run is in doubt (analyzers/sanity.py) are not judged.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import polars as pl

from commprof.vocab import MEGATRON_ORDER, P2P_OPS, UNKNOWN

MAX_CHANCE = 0.1  # report from 90 % confidence up
SURE_CHANCE = 0.001  # any severity from 99.9 % confidence (or a clean separation, see max_severity())
LIKELY_CHANCE = 0.01  # from 99 %: at most low
JITTER_FACTOR = 2.0  # late by at least twice what the most-late other rank shows in a typical step
MIN_SHARE = 0.001  # and by at least 0.1 % of the step


@dataclass(frozen=True)
class Late:
    """A rank its group waits for, step after step."""

    rank: int
    pg: str
    late_ns: float  # per step: median over steps of its lateness minus the others' median
    jitter_ns: float  # per step: median over steps of the largest lateness among the others
    steps_last: int  # steps in which it was the latest (largest lateness, > 0)
    steps: int  # steps judged
    top_share: int  # of the group's n highest rank-step latenesses, how many are its own
    chance: float  # probability of so many top values on one rank by luck (any rank)
    members: int  # group members judged
    scope: str  # which calls were judged, in words
    separated: bool  # its least late step is >= JITTER_FACTOR x the others' latest step (every step, clearly)

    @property
    def confidence(self) -> float:
        return 1.0 - self.chance


def judged_calls(calls: pl.DataFrame, doubtful: frozenset[int], traced: int,
                 world_size: int | None) -> tuple[pl.DataFrame, str]:
    """The calls lateness is judged on, and the scope in words. A group is seen whole when every member
    was matched; a group of unknown size only when its calls were matched on every rank of the world."""
    whole_world = world_size is not None and traced == world_size
    seen_whole = (pl.col("matched_ranks") == pl.col("group_size")) | (
        pl.col("group_size").is_null() & pl.lit(whole_world) & (pl.col("matched_ranks") == traced))
    judged = calls.filter(pl.col("match_key").is_not_null() & ~pl.col("op").is_in(list(P2P_OPS))
                          & (pl.col("matched_ranks") > 1) & seen_whole)
    if doubtful:
        judged = judged.filter(~pl.col("rank").is_in(list(doubtful)).any().over("match_key"))
    if judged.height == 0:
        return judged, ""
    present = set(judged["dimension"].to_list())
    inner = next((d for d in MEGATRON_ORDER if d in present), None)
    if inner is not None:
        # a late rank holds up its TP group, which then arrives late at its DP calls as a whole: counting
        # the outer calls again would charge one delay twice and blame its victims
        return judged.filter(pl.col("dimension") == inner), f"{inner} calls"
    by = "seq" if (judged["match_by"] == "seq").all() else "call order"
    unknown = judged["pg"].is_in([UNKNOWN]).all()
    return judged, (f"calls of unknown groups (no group metadata), matched by {by} across all {traced} ranks"
                    if unknown else f"calls matched by {by} (no dimension classified)")


def step_lateness(judged: pl.DataFrame) -> pl.DataFrame:
    """pg, rank, step, late_ns for every member and step of each group (0 where it was never last)."""
    margins = (judged.filter(pl.col("rank") != pl.col("late_rank")).group_by("match_key")
               .agg(pl.col("pg").first(), pl.col("late_rank").first().alias("rank"),
                    pl.col("step").min(), pl.col("wait_ns").min().alias("margin")))
    per = margins.group_by("pg", "rank", "step").agg(pl.col("margin").sum().cast(pl.Float64).alias("late_ns"))
    members = judged.select("pg", "rank").unique()
    steps = judged.select("pg", "step").unique()
    grid = members.join(steps, on="pg")
    return (grid.join(per.with_columns(pl.col("rank").cast(grid["rank"].dtype)), on=["pg", "rank", "step"],
                      how="left")
            .with_columns(pl.col("late_ns").fill_null(0.0)).sort("pg", "rank", "step"))


def _chance(top: int, n: int, members: int) -> float:
    """P(X >= top), X ~ Hypergeometric(members * n rank-steps, n of them one rank's, n drawn), times members."""
    pop = members * n
    tail = sum(math.comb(n, i) * math.comb(pop - n, n - i) for i in range(top, n + 1))
    return min(1.0, members * tail / math.comb(pop, n))


def _judge(pg: str, grid: pl.DataFrame, scope: str) -> Late | None:
    ranks = sorted(set(grid["rank"].to_list()))
    steps = sorted(set(grid["step"].to_list()))
    m, n = len(ranks), len(steps)
    if m < 2 or n < 1:
        return None
    table = np.zeros((m, n))
    ri, si = {r: i for i, r in enumerate(ranks)}, {s: j for j, s in enumerate(steps)}
    for r, s, v in grid.select("rank", "step", "late_ns").iter_rows():
        table[ri[r], si[s]] = v
    tops = [0] * m
    for _, owner in sorted(((v, i) for i in range(m) for v in table[i] if v > 0), key=lambda t: -t[0])[:n]:
        tops[owner] += 1
    excess = [float(np.median(table[i] - np.median(np.delete(table, i, axis=0), axis=0))) for i in range(m)]
    best = max(range(m), key=lambda i: (tops[i], excess[i]))
    if table[best].max() <= 0:
        return None
    # its share of the n highest rank-steps, the others' first at equal values (never in its favour)
    ordered = sorted(((v, i == best) for i in range(m) for v in table[i] if v > 0), key=lambda t: (-t[0], t[1]))
    top = sum(1 for _, mine in ordered[:n] if mine)
    others = np.delete(table, best, axis=0)
    last = int(sum(1 for j in range(n) if table[best, j] > 0 and table[best, j] > others[:, j].max()))
    return Late(rank=ranks[best], pg=pg, late_ns=excess[best], jitter_ns=float(np.median(others.max(axis=0))),
                steps_last=last, steps=n, top_share=top, chance=_chance(top, n, m), members=m, scope=scope,
                separated=bool(table[best].min() > 0 and table[best].min() >= JITTER_FACTOR * others.max()))


def late_ranks(judged: pl.DataFrame, scope: str) -> list[Late]:
    """The candidate of every group, straggler or not (:func:`is_straggler` decides)."""
    if judged.height == 0:
        return []
    grid = step_lateness(judged)
    out = [_judge(str(pg), g, scope) for (pg,), g in grid.partition_by("pg", as_dict=True).items()]
    return sorted((x for x in out if x is not None), key=lambda x: -x.late_ns)


def max_severity(x: Late) -> str:
    """How loud a straggler may be, by how sure it is: a clean separation (late in every step by twice what
    any other rank ever showed: no jitter does that) or 99.9 % confidence allow any severity; 99 % at most
    low; below that it is info. Few steps or few ranks cannot reach 99.9 % (4 ranks need 6 steps), and on
    a crowded machine the OS keeps one rank behind for several steps at a time (recorded clean runs: a
    rank 7-14 ms late in 6 of 8 steps, chance 0.3 %), so only a long, consistent lateness is loud."""
    if x.separated or x.chance <= SURE_CHANCE:
        return "high"
    return "low" if x.chance <= LIKELY_CHANCE else "info"


def is_straggler(x: Late, step_ns: float) -> bool:
    return (2 * x.steps_last > x.steps and x.chance <= MAX_CHANCE and x.late_ns > 0
            and x.late_ns >= max(JITTER_FACTOR * x.jitter_ns, MIN_SHARE * step_ns))
