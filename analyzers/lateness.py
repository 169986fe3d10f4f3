"""Late ranks judged over steps: which rank of a group the others wait for, step after step, and how sure
that is (the statistics behind the ``straggler`` finding, docs/findings.md).

A rank's **lateness in a step** is, summed over the group's calls of that step at which it arrived last,
the smallest wait among the others (what none of them would have waited were it on time). One late
arrival on a noisy machine makes any rank last now and then; a straggler is last step after step. So,
per group (the groups of the innermost dimension, or all calls of unknown groups when nothing is
classified):

* the candidate is the rank with the most rank-steps among the group's ``n`` highest lateness values
  (``n`` = steps judged; ties go to the larger median excess);
* **chance**: the probability that ``x`` or more of those ``n`` top values would fall on one rank if the
  ranks' lateness were shuffled at random within each step (each rank holds one of a step's values: with ``t``
  of the top values in a step it holds one with probability ``t / members``; the count over the steps is
  Poisson-binomial), times the group size (any rank could have been the candidate). 1 - chance is the
  confidence shown. (Shuffled over all of the group's rank-steps instead, as before 2026-12-07, a pair's
  "last in 5 of 6 steps" read as 8 % by luck where it is 22 %: in a group of two one rank is last in every
  step);
* **lateness per step** = the median over steps of (its lateness - the median of the others' in that
  step); **jitter** = the median over steps of the largest lateness among the others.

The second witness is the rank's own **work per step**: its compute, copies and idle time with none of its
own communication in flight (:func:`rank_work`), compared with the median of the group's other members in
the same step (of every other traced rank for a group of two). A rank its peers wait for because it has
more to do (or a slower device, or a stalled loader) shows more work step after step; a rank that only
looks late next to a fast partner, or that the OS kept behind once, does not. **work chance**: the
probability of an excess over the steps this consistent by luck (one-sided Wilcoxon signed-rank test on
the per-step excess, exact up to 60 steps), times the ranks compared.

A rank is a straggler when its lateness per step is positive, its work is not below the others' (when
known), and either the lateness is consistent (last in most steps, chance at most ``MAX_CHANCE``, lateness
at least ``JITTER_FACTOR`` times the jitter and ``MIN_SHARE`` of the step) or the work is (work chance at
most ``MAX_WORK_CHANCE``); how loud it may be follows how sure both witnesses are (:func:`max_severity`)
and what it costs (its lateness). Calls whose group
was not seen whole, point-to-point calls (pipeline structure, not straggling) and calls with a rank whose
clock or run is in doubt (analyzers/sanity.py) are not judged.
"""

from __future__ import annotations

import bisect
import math
from collections import Counter
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from commprof.vocab import MEGATRON_ORDER, P2P_OPS, UNKNOWN

MAX_CHANCE = 0.1  # report from 90 % confidence up
SURE_CHANCE = 0.001  # any severity from 99.9 % confidence (or a clean separation, see max_severity())
LIKELY_CHANCE = 0.01  # from 99 %: at most low
JITTER_FACTOR = 2.0  # late by at least twice what the most-late other rank shows in a typical step
MIN_SHARE = 0.001  # and by at least 0.1 % of the step
MAX_WORK_CHANCE = 0.1  # or more work than the others' median, consistently: 90 % sure


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
    work_excess_ns: float | None = None  # per step: median over steps of its work minus the others' median
    work_steps_above: int = 0  # steps in which its work exceeded the others' median
    work_steps: int = 0  # steps with work known for it and others
    work_chance: float | None = None  # probability of so many steps above by luck (any rank); None: unknown
    work_ranks: int = 0  # ranks its work was compared among, itself included (its stage's traced ranks or group)
    block: int = 1  # steps per stretch: lateness and work are judged on sums over stretches of this many steps
    blocks: int = 0  # stretches judged (0: as many as steps)
    blocks_last: int = 0  # stretches in which it was the latest

    @property
    def judged(self) -> int:
        """How many independent observations the chances rest on: stretches of ``block`` steps."""
        return self.blocks or self.steps

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


WORK_PARTS = ("compute_ns", "memory_ns", "idle_ns")


def rank_work(steps: pl.DataFrame) -> pl.DataFrame:
    """rank, step, work_ns: the rank's time in the step with none of its own communication in flight
    (compute, copies, idle: a stalled data loader or host shows as idle). A rank with more to do shows it
    there; its peers' wait for it shows as their communication (exposed, or overlapped when they compute
    while their calls wait), never as their work."""
    need = {"rank", "step", *WORK_PARTS}
    if steps.height == 0 or not need <= set(steps.columns):
        return pl.DataFrame(schema={"rank": pl.Int64, "step": pl.Int64, "work_ns": pl.Float64})
    return steps.select(pl.col("rank").cast(pl.Int64), pl.col("step").cast(pl.Int64),
                        pl.sum_horizontal(*WORK_PARTS).cast(pl.Float64).alias("work_ns")).drop_nulls()


# (median excess, steps above, steps compared, chance by luck or None, ranks compared with it included)
Evidence = tuple[float | None, int, int, float | None, int]
NO_EVIDENCE: Evidence = (None, 0, 0, None, 0)


MIN_PEERS = 3  # a group this large is its own reference for work; a pair is compared with every traced rank
# the work witness speaks against two other ranks at least: beside one partner alone a rank with more work is as
# much "the partner is fast" as "it is slow", and a host that keeps one of two ranks behind for a while is one of
# two every time (8 recorded pp=2 x dp=2 zoo jobs beside a busy process, 2-rank stages: 18 of 100 windows of 5, 10
# and 20 steps named a rank above info, at up to 100 % stated confidence; 0 with this; docs/findings.md)
MIN_COMPARED = 3


def _work_evidence(rank: int, steps: list[int], work: pl.DataFrame | None, members: list[int],
                   stage_of: dict[int, int] | None = None, memo: dict[Any, pl.DataFrame] | None = None,
                   block: int = 1) -> Evidence:
    """(median excess over the other ranks' median, steps above, steps compared, chance by luck) of one
    rank's work in the judged steps; None where no step has its work and another rank's. The others are
    the group's members (they do the same work: one pipeline stage's TP group, one DP group), or every traced
    rank for a group of two, where the partner alone cannot tell a slow rank from a fast partner; in both
    cases only the ranks of its own pipeline stage (``stage_of``): another stage holds other layers."""
    if work is None or work.height == 0:
        return NO_EVIDENCE
    # the comparison set depends on the rank only through its stage: ``memo`` keeps it per stage for the
    # group's other ranks (per rank, a group of 5,000 filtered the run's work 5,000 times)
    key = stage_of.get(rank) if stage_of else None
    w = memo.get(key) if memo is not None else None
    if w is None:
        w = work.filter(pl.col("step").is_in(steps))
        if len(members) >= MIN_PEERS:
            w = w.filter(pl.col("rank").is_in(members))
        if stage_of:
            w = w.filter(pl.col("rank").is_in([r for r in w["rank"].unique().to_list() if stage_of.get(r) == key]))
        if memo is not None:
            memo[key] = w
    mine = dict(w.filter(pl.col("rank") == rank).select("step", "work_ns").iter_rows())
    others = w.filter(pl.col("rank") != rank).group_by("step").agg(pl.col("work_ns").median().alias("m"),
                                                                     pl.len().alias("k")).sort("step")
    return _evidence([mine[s] - m for s, m, _ in others.iter_rows() if s in mine], int(w["rank"].n_unique()), block)


def _evidence(diffs: list[float], n_ranks: int, block: int = 1) -> Evidence:
    """The witness of one rank's per-step excesses over its peers' median (in step order), ``n_ranks`` ranks
    compared. The chance is judged on the sums over stretches of ``block`` consecutive steps (:func:`stretch`):
    a host that keeps one rank behind does so for several steps at a time. Fewer than ``MIN_COMPARED`` ranks
    compared: no witness (the figures stay, the chance is None)."""
    if not diffs:
        return NO_EVIDENCE
    n = len(diffs)
    excess, above = float(np.median(diffs)), sum(1 for d in diffs if d > 0)
    sums = _stretches(diffs, block)
    if n_ranks < MIN_COMPARED or n_ranks / 2 ** len(sums) > MAX_WORK_CHANCE:
        # one partner only, or too few stretches (even all above could be luck): no witness
        return excess, above, n, None, n_ranks
    return excess, above, n, min(1.0, n_ranks * _signed_rank(sums)), n_ranks


def _stretches(values: list[float], block: int) -> list[float]:
    """Sums over consecutive stretches of ``block`` values; a last stretch shorter than half a block joins
    the one before it."""
    if block <= 1:
        return list(values)
    out = [float(sum(values[i:i + block])) for i in range(0, len(values), block)]
    if len(out) > 1 and len(values) % block and len(values) % block < (block + 1) // 2:
        last = out.pop()
        out[-1] += last
    return out


def _group_evidence(ranks: list[int], steps: list[int], work: pl.DataFrame | None,
                    stage_of: dict[int, int] | None = None, block: int = 1) -> list[Evidence]:
    """:func:`_work_evidence` of every rank of one group (``ranks``, its members), in a fixed number of
    queries: each rank's comparison set is the rows of its stage, so the group's work is keyed by stage
    once and every rank's leave-one-out medians come from one join on that key and one group_by. Equal to
    ``[_work_evidence(r, steps, work, ranks, stage_of) for r in ranks]`` (a per-rank filter and group_by
    cost ~1 ms a rank: 5,000 ranks in tp groups of 8 took ~6 s of the parent's time)."""
    if work is None or work.height == 0:
        return [NO_EVIDENCE] * len(ranks)
    w = work.filter(pl.col("step").is_in(steps))
    if len(ranks) >= MIN_PEERS:
        w = w.filter(pl.col("rank").is_in(ranks))
    codes: dict[Any, int] = {}
    target_keys = [codes.setdefault(stage_of.get(r) if stage_of else None, len(codes)) for r in ranks]
    if stage_of:  # each row keyed by its rank's stage; rows of a stage no member is in are not needed
        present = w["rank"].unique().to_list()
        keyed = {r: codes[stage_of.get(r)] for r in present if stage_of.get(r) in codes}
        w = w.filter(pl.col("rank").is_in(list(keyed))).with_columns(
            pl.col("rank").replace_strict(keyed, return_dtype=pl.Int64).alias("key"))
    else:
        w = w.with_columns(pl.lit(0, dtype=pl.Int64).alias("key"))
    rank_dtype = w.schema["rank"]
    targets = pl.DataFrame({"target": pl.Series(ranks).cast(rank_dtype), "key": pl.Series(target_keys, dtype=pl.Int64)})
    distinct = dict(w.group_by("key").agg(pl.col("rank").n_unique()).iter_rows())
    mine: dict[int, dict[Any, Any]] = {}
    for r, s, v in w.filter(pl.col("rank").is_in(ranks)).select("rank", "step", "work_ns").iter_rows():
        mine.setdefault(r, {})[s] = v  # the last row of a step, as dict() of the rank's rows keeps
    others: dict[int, list[tuple[Any, Any]]] = {}
    joined = (targets.join(w.select("key", "rank", "step", "work_ns"), on="key")
              .filter(pl.col("rank") != pl.col("target"))
              .group_by("target", "step").agg(pl.col("work_ns").median().alias("m"))
              .sort("target", "step"))
    for t, s, m in joined.iter_rows():
        others.setdefault(t, []).append((s, m))
    out: list[Evidence] = []
    for r, key in zip(ranks, target_keys, strict=True):
        own = mine.get(r, {})
        diffs = [own[s] - m for s, m in others.get(r, []) if s in own]
        # no diffs: no peers counted
        out.append(_evidence(diffs, distinct[key], block) if diffs else NO_EVIDENCE)
    return out


class WorkIndex:
    """The run's work by rank and step, for every group's work witness without a query per group (a query
    costs ~0.3 ms, more on a busy machine: 625 groups took seconds). Equal to :func:`_work_evidence` per
    rank: the others' median of a step is polars' (the middle value, or ``lo + (hi - lo) * 0.5``), taken
    from the step's sorted comparison set without the rank's own value. Where a rank has two rows in a
    step, or a value is null or NaN, :func:`_group_evidence` is used instead."""

    def __init__(self, work: pl.DataFrame, stage_of: dict[int, int] | None) -> None:
        ranks, steps, values = (work[c].to_list() for c in ("rank", "step", "work_ns"))
        self.value = dict(zip(zip(ranks, steps, strict=True), values, strict=True))
        self.exact = len(self.value) == len(values) and not any(v is None or v != v for v in values)
        self.by_step: dict[Any, list[Any]] = {}
        for r, s in zip(ranks, steps, strict=True):
            self.by_step.setdefault(s, []).append(r)
        self.work, self.stage_of = work, stage_of
        self._everyone: dict[tuple[Any, tuple[Any, ...]], tuple[dict[Any, list[float]], int]] = {}

    def _compared(self, key: Any, steps: list[int], members: list[int] | None) -> tuple[dict[Any, list[float]], int]:
        """Per step, the sorted work of the ranks a rank of stage ``key`` is compared with (``members``, or
        every traced rank), and how many ranks that is."""
        stage_of = self.stage_of
        per_step: dict[Any, list[float]] = {}
        seen: set[Any] = set()
        for s in steps:
            values = []
            for r in members if members is not None else self.by_step.get(s, ()):
                v = self.value.get((r, s))
                if v is None or (stage_of and stage_of.get(r) != key):
                    continue
                values.append(v)
                seen.add(r)
            if values:
                per_step[s] = sorted(values)
        return per_step, len(seen)

    def evidence(self, ranks: list[int], steps: list[int], block: int = 1) -> list[Evidence]:
        """``[_work_evidence(r, steps, work, ranks, stage_of, block=block) for r in ranks]``."""
        if not self.exact:
            return _group_evidence(ranks, steps, self.work, self.stage_of, block)
        members = ranks if len(ranks) >= MIN_PEERS else None
        stage_of = self.stage_of
        compared: dict[Any, tuple[dict[Any, list[float]], int]] = {}
        out: list[Evidence] = []
        for r in ranks:
            key = stage_of.get(r) if stage_of else None
            if key not in compared:
                if members is None:  # every traced rank of the stage: the same for every pair of the run
                    cache_key = (key, tuple(steps))
                    if cache_key not in self._everyone:
                        self._everyone[cache_key] = self._compared(key, steps, None)
                    compared[key] = self._everyone[cache_key]
                else:
                    compared[key] = self._compared(key, steps, members)
            per_step, n_ranks = compared[key]
            diffs = []
            for s, values in per_step.items():
                mine = self.value.get((r, s))
                if mine is None or len(values) < 2:
                    continue
                diffs.append(mine - _median_without(values, bisect.bisect_left(values, mine)))
            out.append(_evidence(diffs, n_ranks, block))
        return out


def _median_without(values: list[float], i: int) -> float:
    """polars' median of sorted ``values`` less the one at ``i``: the middle one, or the two middle ones
    interpolated as polars does (``lo + (hi - lo) * 0.5``, not always ``(lo + hi) / 2`` in floats)."""
    n = len(values) - 1

    def at(j: int) -> float:
        return values[j] if j < i else values[j + 1]

    if n % 2:
        return at(n // 2)
    lo, hi = at(n // 2 - 1), at(n // 2)
    return lo + (hi - lo) * 0.5


EXACT_STEPS = 60


def _signed_rank(diffs: list[float]) -> float:
    """One-sided p-value of the Wilcoxon signed-rank test that ``diffs`` centre above 0 (zeros dropped, ties
    given their mean rank; exact up to EXACT_STEPS values, the normal approximation beyond)."""
    nz = [d for d in diffs if d != 0]
    n = len(nz)
    if n == 0:
        return 1.0
    order = sorted(range(n), key=lambda i: abs(nz[i]))
    ranks = [0.0] * n
    i = 0
    while i < n:  # mean ranks over ties of |d|
        j = i
        while j + 1 < n and abs(nz[order[j + 1]]) == abs(nz[order[i]]):
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        i = j + 1
    w_plus = sum(r for r, d in zip(ranks, nz, strict=True) if d > 0)
    if n > EXACT_STEPS:
        mean, var = n * (n + 1) / 4, n * (n + 1) * (2 * n + 1) / 24
        return 0.5 * math.erfc((w_plus - 0.5 - mean) / math.sqrt(2 * var))
    # exact: counts of sign assignments per doubled rank sum (doubling keeps half ranks integral)
    counts = {0: 1}
    for r in ranks:
        step = round(2 * r)
        nxt = dict(counts)
        for total, c in counts.items():
            nxt[total + step] = nxt.get(total + step, 0) + c
        counts = nxt
    target = round(2 * w_plus)
    return math.ldexp(sum(c for total, c in counts.items() if total >= target), -n)


def _chance(top: int, per_step: list[int], members: int) -> float:
    """P(X >= top) times members, X the number of a step's top values one rank holds when each step's values are
    shuffled over its ``members`` ranks: a sum of Bernoulli(t / members), ``t`` of the top values in each step
    (``per_step``; Poisson-binomial, exact: the binomials of the steps with the same ``t`` convolved, so a long
    recording costs a few array operations, not steps x steps)."""
    if top <= 0:
        return 1.0
    dist = np.ones(1)
    for t, count in Counter(t for t in per_step if t > 0).items():
        dist = np.convolve(dist, _binomial_pmf(count, min(1.0, t / members)))
    return min(1.0, members * math.fsum(dist[top:].tolist()))


def _binomial_pmf(n: int, p: float) -> np.ndarray:
    """P(K = k) for k = 0..n, K ~ Binomial(n, p), from logarithms (no underflow of (1 - p) ** n to 0 first)."""
    if p >= 1.0:
        out = np.zeros(n + 1)
        out[n] = 1.0
        return out
    log_fact = np.array([math.lgamma(i + 1) for i in range(n + 1)])
    k = np.arange(n + 1)
    pmf: np.ndarray = np.exp(log_fact[n] - log_fact - log_fact[::-1] + k * math.log(p) + (n - k) * math.log1p(-p))
    return pmf


def _judge(pg: str, grid: pl.DataFrame, scope: str, work: pl.DataFrame | None = None,
           stage_of: dict[int, int] | None = None, index: WorkIndex | None = None, block: int = 1) -> list[Late]:
    """The group's lateness candidate, and the rank with the most consistent excess work if that is another
    rank the others also wait for (each with both witnesses' figures)."""
    # the columns as lists, not a select: a query's fixed cost (~0.5 ms) is most of a small group's time, and a
    # run of 5,000 ranks has hundreds of groups
    rank_col, step_col, late_col = (grid.get_column(c).to_list() for c in ("rank", "step", "late_ns"))
    ranks = sorted(set(rank_col))
    steps = sorted(set(step_col))
    m, n = len(ranks), len(steps)
    if m < 2 or n < 1:
        return []
    table = np.zeros((m, n))
    ri, si = {r: i for i, r in enumerate(ranks)}, {s: j for j, s in enumerate(steps)}
    for r, s, v in zip(rank_col, step_col, late_col, strict=True):
        table[ri[r], si[s]] = v
    # the chances are judged on stretches of ``block`` steps (:func:`stretch`), the magnitudes per step
    sums = np.array([_stretches(list(row), block) for row in table]) if block > 1 else table
    nb = sums.shape[1]
    tops, per_step = [0] * m, [0] * nb
    for _, owner, j in sorted(((v, i, j) for i in range(m) for j, v in enumerate(sums[i]) if v > 0),
                              key=lambda t: -t[0])[:nb]:
        tops[owner] += 1
        per_step[j] += 1
    excess = _excess(table)
    if index is not None and work is not None and work.height:
        evidence = index.evidence(ranks, steps, block)
    else:
        evidence = _group_evidence(ranks, steps, work, stage_of, block)
    best = max(range(m), key=lambda i: (tops[i], excess[i]))
    picks = [best] if table[best].max() > 0 else []
    worker = max(range(m), key=lambda i: (evidence[i][1], evidence[i][0] or 0.0))
    if evidence[worker][3] is not None and worker not in picks and excess[worker] > 0:
        picks.append(worker)
    out = []
    for i in picks:
        # its share of the n highest rank-steps, the others' first at equal values (never in its favour)
        ordered = sorted(((v, k == i) for k in range(m) for v in sums[k] if v > 0), key=lambda t: (-t[0], t[1]))
        top = sum(1 for _, mine in ordered[:nb] if mine)
        others, other_sums = np.delete(table, i, axis=0), np.delete(sums, i, axis=0)
        last = int(sum(1 for j in range(n) if table[i, j] > 0 and table[i, j] > others[:, j].max()))
        last_b = int(sum(1 for j in range(nb) if sums[i, j] > 0 and sums[i, j] > other_sums[:, j].max()))
        w_excess, w_above, w_steps, w_chance, w_ranks = evidence[i]
        out.append(Late(rank=ranks[i], pg=pg, late_ns=excess[i], jitter_ns=float(np.median(others.max(axis=0))),
                        steps_last=last, steps=n, top_share=top, chance=_chance(top, per_step, m), members=m,
                        scope=scope,
                        separated=bool(m >= 3 and nb > 1 and sums[i].min() > 0
                                       and sums[i].min() >= JITTER_FACTOR * other_sums.max()),
                        work_excess_ns=w_excess, work_steps_above=w_above, work_steps=w_steps, work_chance=w_chance,
                        work_ranks=w_ranks,
                        block=block, blocks=nb, blocks_last=last_b))
    return out


def _excess(table: np.ndarray) -> list[float]:
    """Each rank's median over the steps of its lateness above the other ranks' median at that step. The
    leave-one-out medians from each step's sorted column: without rank i (sorted place p) the others' k-th value
    is the column's k-th below p and its (k+1)-th from p on, so all of a step's are one gather, O(m log m), never
    the (ranks, ranks - 1, steps) array (2,048 x 2,047 x steps for one data-parallel group of 2,048)."""
    m, n = table.shape
    if m < 2:
        return [float(np.median(table[i] - np.median(np.delete(table, i, axis=0), axis=0))) for i in range(m)]
    order = np.argsort(table, axis=0, kind="stable")
    ordered = np.take_along_axis(table, order, axis=0)
    place = np.empty_like(order)
    np.put_along_axis(place, order, np.arange(m)[:, None].repeat(n, axis=1), axis=0)
    cols = np.arange(n)[None, :]

    def kth(k: int) -> np.ndarray:  # each rank's k-th smallest of the others, per step (m, n)
        return ordered[np.where(place > k, k, k + 1), cols]

    rest = m - 1
    others = kth(rest // 2) if rest % 2 else (kth(rest // 2 - 1) + kth(rest // 2)) / 2
    return [float(x) for x in np.median(table - others, axis=1)]




def late_ranks(judged: pl.DataFrame, scope: str, work: pl.DataFrame | None = None,
               stage_of: dict[int, int] | None = None) -> list[Late]:
    """The candidates of every group, straggler or not (:func:`is_straggler` decides). ``work``: rank, step,
    work_ns (:func:`rank_work`), the second witness; without it lateness alone is judged. ``stage_of``:
    each rank's pipeline stage (:func:`pipeline_stages`), work being compared within a stage."""
    if judged.height == 0:
        return []
    return grid_late_ranks(step_lateness(judged), scope, work, stage_of)


def grid_late_ranks(grid: pl.DataFrame, scope: str, work: pl.DataFrame | None = None,
                    stage_of: dict[int, int] | None = None) -> list[Late]:
    """:func:`late_ranks` from the lateness grid (pg, rank, step, late_ns: :func:`step_lateness`): what the
    calibration keeps of a recording (tests/data/lateness_windows.json) to judge it again without the traces."""
    if grid.height == 0:
        return []
    index = WorkIndex(work, stage_of) if work is not None and work.height else None
    block = stretch(grid, work)
    out = [x for (pg,), g in grid.partition_by("pg", as_dict=True).items()
           for x in _judge(str(pg), g, scope, work, stage_of, index, block)]
    return sorted(out, key=lambda x: -x.late_ns)


def stragglers(grid: pl.DataFrame, scope: str, work: pl.DataFrame | None, stage_of: dict[int, int] | None,
               step_ns: float) -> list[Late]:
    """The stragglers of a lateness grid: per group, of the candidates :func:`is_straggler` accepts, the one its
    peers wait for longest; the longest first."""
    best: dict[str, Late] = {}
    for x in grid_late_ranks(grid, scope, work, stage_of):
        if is_straggler(x, step_ns) and (x.pg not in best or x.late_ns > best[x.pg].late_ns):
            best[x.pg] = x
    return sorted(best.values(), key=lambda x: -x.late_ns)


MIN_STRETCH = 1  # steps per stretch at least
MAX_RHO = 0.9  # stretches of at most 19 steps


def stretch(grid: pl.DataFrame, work: pl.DataFrame | None) -> int:
    """How many consecutive steps one stretch of the run's noise lasts: ``(1 + rho) / (1 - rho)`` steps, rho
    the lag-1 autocorrelation of every rank's lateness and of its work above the step's median, pooled over
    the run (each series less its own mean, so a steady straggler's level is not counted as a stretch) and
    corrected for its small-sample bias (``+ (1 + 4 rho) / n``). On a quiet machine lateness is independent
    from step to step (1 step); on a busy host the OS keeps one rank behind for several steps at a time, and
    n steps are then n / stretch independent observations, not n."""
    series: list[np.ndarray] = []
    if grid.height:
        series.extend(g["late_ns"].to_numpy() for g in grid.sort("step").partition_by("pg", "rank"))
    if work is not None and work.height:
        arr = _work_table(work)
        if arr.shape[1] > 1 and not np.isnan(arr).any():
            arr = arr - np.median(arr, axis=1, keepdims=True)
            series.extend(arr.T)
    num = den = 0.0
    lengths = []
    for x in series:
        if len(x) < 3:
            continue
        d = x - x.mean()
        num += float(np.dot(d[:-1], d[1:]))
        den += float(np.dot(d, d))
        lengths.append(len(x))
    if den <= 0 or not lengths:
        return MIN_STRETCH
    rho = num / den
    rho = min(MAX_RHO, max(0.0, rho + (1 + 4 * rho) / float(np.mean(lengths))))
    return max(MIN_STRETCH, round((1 + rho) / (1 - rho)))


def _work_table(work: pl.DataFrame) -> np.ndarray:
    """(steps, ranks) of work_ns, steps in order, ranks in their first appearance, a (step, rank) summed (0 where a
    rank has no row of a step, as a pivot's sum gives): ``work.pivot(on="rank", index="step", values="work_ns",
    aggregate_function="sum")``'s numbers without a frame of one column per rank (16,384 columns: 25 s)."""
    summed = work.group_by("rank", "step", maintain_order=True).agg(pl.col("work_ns").sum())
    ranks = work["rank"].unique(maintain_order=True)
    steps = summed["step"].unique().sort()
    col = summed["rank"].replace_strict(ranks, pl.int_range(len(ranks), eager=True), return_dtype=pl.Int64)
    row = summed["step"].replace_strict(steps, pl.int_range(len(steps), eager=True), return_dtype=pl.Int64)
    arr = np.zeros((len(steps), len(ranks)))
    arr[row.to_numpy(), col.to_numpy()] = summed["work_ns"].cast(pl.Float64).to_numpy()
    return arr


def pipeline_stages(process_groups: pl.DataFrame) -> dict[int, int]:
    """rank -> its pipeline stage: its place in its pp group (ranks in stage order, as every framework
    builds them). Empty without a pp dimension: every rank then does the same work."""
    if process_groups.height == 0 or not {"dimension", "ranks"} <= set(process_groups.columns):
        return {}
    out: dict[int, int] = {}
    for ranks in process_groups.filter(pl.col("dimension") == "pp")["ranks"].to_list():
        for stage, r in enumerate(sorted(ranks or ())):
            out.setdefault(int(r), stage)
    return out


EXPLAINED = 0.5  # above info only when the rank's own extra work is at least half its lateness


def explained(x: Late) -> bool:
    """Its own extra work per step is at least ``EXPLAINED`` of its lateness: it is late because it has more to
    do, or does it slower (a slower device, a stalled loader shows as idle work). A rank the OS keeps behind on
    a busy host is late at its calls with little more work of its own (the delay falls inside its
    communication calls): recorded clean jobs beside a busy process showed ranks 5-65 ms late per step, last in
    every step, with 0.1-0.4 of that as work; the zoo's slow rank 0.6-1.0 (docs/findings.md, "Calibration")."""
    return x.work_excess_ns is not None and x.late_ns > 0 and x.work_excess_ns >= EXPLAINED * x.late_ns


def max_severity(x: Late) -> str:
    """How loud a straggler may be, by how sure the evidence is (the saving's share of the step sets the
    severity below that cap, the same way as for every rule). Both witnesses are judged over stretches of
    steps (:func:`stretch`), and only a lateness its own work explains (:func:`explained`) is named above
    info: both witnesses at 99 % or more (the lateness, or a clean separation in a group of three or more),
    any severity; both at 90 % or more, at most medium; else info. Without the work witness the window is too
    short to tell (:func:`too_short`), or one partner is too few to compare with (:func:`paired`)."""
    if x.work_chance is None or not explained(x):
        return "info"
    late_sure = x.chance <= LIKELY_CHANCE or x.separated
    if late_sure and x.work_chance <= LIKELY_CHANCE:
        return "high"
    if (x.chance <= MAX_CHANCE or x.separated) and x.work_chance <= MAX_WORK_CHANCE:
        return "medium"
    return "info"


def too_short(x: Late) -> bool:
    """Too few stretches for the work witness: nothing in the window can tell a straggler from a rank a busy
    host kept behind for a while."""
    return x.work_chance is None and x.work_steps > 0 and not paired(x)


def paired(x: Late) -> bool:
    """Its work could be compared with one other rank only (a pipeline stage of two traced ranks, a job of two):
    more work than one partner cannot tell a slower rank from a faster partner or from a host that kept it
    behind, however many steps (:data:`MIN_COMPARED`)."""
    return x.work_chance is None and x.work_steps > 0 and 0 < x.work_ranks < MIN_COMPARED


def is_straggler(x: Late, step_ns: float) -> bool:
    """Its peers wait for it (positive lateness), it does not do less than the others (a rank that looks
    late only beside a faster partner), and it is consistent: in lateness (last in most steps, unlikely by
    luck, above the jitter and ``MIN_SHARE`` of the step; or last in every step of a window too short to rule luck
    out) or in work (more than the others step after step, ``MAX_WORK_CHANCE``); a consistent worker that costs
    its peers little is reported with that little saving (info), as the uneven work it is."""
    if x.late_ns <= 0:
        return False
    if x.work_excess_ns is not None and x.work_excess_ns < 0:
        return False
    last = x.blocks_last if x.blocks else x.steps_last
    clear = x.late_ns >= max(JITTER_FACTOR * x.jitter_ns, MIN_SHARE * step_ns)
    late_ok = 2 * last > x.judged and x.chance <= MAX_CHANCE and clear
    # last in every stretch of a window too short for luck to be ruled out at all (members ** (1 - stretches) above
    # MAX_CHANCE: a pair's 4 steps): reported, at info (no witness is sure), so the finding can say to record longer
    short_ok = x.judged > 0 and last == x.judged and x.members ** (1 - x.judged) > MAX_CHANCE and clear
    work_ok = x.work_chance is not None and x.work_chance <= MAX_WORK_CHANCE
    return late_ok or short_ok or work_ok
