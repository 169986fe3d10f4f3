"""Exposed versus overlapped communication (DESIGN §3 "Definitions"), per rank, step, collective, group.

For one rank, every instant of a step window is exactly one of:

* overlapped comm - some comm runs and some compute runs;
* exposed comm    - some comm runs and no compute runs;
* compute         - compute runs and no comm runs;
* memory          - only memcpy/memset runs;
* idle            - nothing runs.

so the five parts add up to the window's duration. Compute on a CPU lane excludes the waits and
collective calls nested in it (a thread blocked in ``c10d::send`` is not computing), among them the span
a blocking call's thread waited for the worker thread that moved its data (ingest adds it as a ``wait``
on the calling lane: commprof/ingest/kineto/gloo_calls.py says which calls block), so a blocking collective
counts whole wherever its wait lands: inside an ``autograd.Function`` or any other enclosing op.

Step windows come from the ``ProfilerStep#N`` marks: step k spans from its start to the next step's
start; the first window reaches back to the earliest recorded activity and the last reaches forward
to the latest device or communication activity, so every recorded interval belongs to exactly one
step: the default assigns work by when it runs, because the GPU trails the CPU. CPU ops still open
when the last mark closes do not stretch it: the profiler stops inside them (a step mark closes in
``profiler.step()``, often called from the optimizer's post-step hook, and ``Optimizer.step`` then
holds the profiler's stop and export, up to 100+ ms), so their tail is the profiler's work, not the
step's. With ``hta_compat`` the rules are Holistic Trace
Analysis': the last step is dropped, a device event is kept only when its launch (``launch_ns``, the
runtime call joined by correlation) started before the last step's start, events whose launch is not in
the trace are dropped, and on traces with fractional-µs timestamps times are rounded inward to whole µs,
so the two tools can be compared on the same trace.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import polars as pl

from commprof.analyzers import intervals as iv
from commprof.ingest.tables import read_rank_intervals
from commprof.vocab import UNKNOWN


@dataclass(frozen=True)
class OverlapSettings:
    hta_compat: bool = False


STEPS_SCHEMA = pl.Schema({
    "rank": pl.Int32,
    "step": pl.Int64,
    "start_ns": pl.Int64,
    "end_ns": pl.Int64,
    "compute_ns": pl.Int64,
    "overlapped_comm_ns": pl.Int64,
    "exposed_comm_ns": pl.Int64,
    "memory_ns": pl.Int64,
    "idle_ns": pl.Int64,
    "exposed_wait_ns": pl.Int64,  # of exposed_comm_ns: waiting for a later rank (skew)
    "exposed_transfer_ns": pl.Int64,  # the rest of exposed_comm_ns
})

PG_STEPS_SCHEMA = pl.Schema({
    "rank": pl.Int32,
    "step": pl.Int64,
    "pg": pl.String,
    "comm_ns": pl.Float64,
    "overlapped_ns": pl.Float64,
    "exposed_ns": pl.Float64,
    "exposed_wait_ns": pl.Float64,
})

SPANS_SCHEMA = pl.Schema({"rank": pl.Int32, "start_ns": pl.Int64, "end_ns": pl.Int64})

# A rank's rows of one table as numpy columns (empty when it has none): the caller stacks all ranks'
# columns into one frame (building a polars frame costs ~0.3 ms, more than many ranks' whole analysis)
Columns = dict[str, npt.NDArray[Any]]


@dataclass
class RankOverlap:
    steps: Columns  # STEPS_SCHEMA
    collectives: pl.DataFrame  # the rank's collectives with step, overlapped_ns, exposed_ns
    pg_steps: Columns  # PG_STEPS_SCHEMA
    exposed_spans: Columns  # SPANS_SCHEMA: where comm runs and no compute does, inside the windows
    warnings: list[str] = field(default_factory=list)


def stack(parts: list[Columns], schema: pl.Schema) -> pl.DataFrame:
    """One frame of ``schema`` from the ranks' columns, in the order given."""
    parts = [p for p in parts if p]
    if not parts:
        return pl.DataFrame(schema=schema)
    return pl.DataFrame({name: np.concatenate([p[name] for p in parts]) for name in schema}, schema=schema)


def _round_inward(frame: pl.DataFrame) -> pl.DataFrame:
    """HTA's rounding of ns-resolution traces: start up and end down to whole µs (launch up, as it is
    a CPU event's start)."""
    up = [c for c in ("start_ns", "launch_ns") if c in frame.columns]
    return frame.with_columns(
        *[(((pl.col(c) + 999) // 1000) * 1000).alias(c) for c in up],
        ((pl.col("end_ns") // 1000) * 1000).alias("end_ns"),
    )


def _has_sub_us_starts(*frames: pl.DataFrame) -> bool:
    """HTA rounds only traces whose ``ts`` are fractional µs (its ts column is then float64); a trace
    of whole-µs ``ts`` keeps its fractional ``dur`` ends as they are."""
    return any(f.height and bool((f["start_ns"] % 1000 != 0).any()) for f in frames)


def _hta_cut_key(frame: pl.DataFrame) -> pl.Expr:
    """What HTA's last-step cut compares with the last step's start: the launching CPU event's time
    (device events whose launch is not in the trace compare as null, so they are dropped); tables
    without ``launch_ns`` fall back to the event's own start."""
    return pl.col("launch_ns") if "launch_ns" in frame.columns else pl.col("start_ns")


def _windows(
    marks: pl.DataFrame, starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], settings: OverlapSettings,
    warnings: list[str], rank: int, keys: npt.NDArray[np.int64] | None = None,
    host_side: npt.NDArray[np.bool_] | None = None,
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], int | None]:
    """Step ids, window bounds (len n+1) and the cut-off for ``hta_compat`` (intervals whose ``keys``,
    default their starts, are not before it are dropped). ``host_side`` marks the CPU ops that are not
    communication: they stretch the last window only up to the last mark's end (module doc)."""
    order = np.argsort(marks["step"].to_numpy(), kind="stable")
    step_ids = marks["step"].to_numpy().astype(np.int64)[order]
    mark_start = marks["start_ns"].to_numpy().astype(np.int64)[order]
    mark_end = marks["end_ns"].to_numpy().astype(np.int64)[order]
    cutoff: int | None = None
    if step_ids.size == 0:
        warnings.append(f"rank {rank}: no ProfilerStep# marks; the whole trace is analyzed as one step")
        if starts.size == 0:
            return np.empty(0, np.int64), np.empty(0, np.int64), None
        return np.array([0]), np.array([starts.min(), ends.max()], dtype=np.int64), None
    nominal_end = int(mark_end[-1])
    if settings.hta_compat:
        if step_ids.size >= 2:
            cutoff = int(mark_start[-1])
            nominal_end = cutoff
            step_ids, mark_start = step_ids[:-1], mark_start[:-1]
        else:
            warnings.append(f"rank {rank}: only one step; --hta-compat keeps it instead of dropping it")
    keys = starts if keys is None else keys
    eligible = keys < cutoff if cutoff is not None else np.ones(starts.shape, dtype=bool)
    bounds = np.append(mark_start, nominal_end).astype(np.int64)
    if eligible.any():
        bounds[0] = min(bounds[0], int(starts[eligible].min()))
        reach = ends if host_side is None else np.where(host_side, np.minimum(ends, nominal_end), ends)
        bounds[-1] = max(bounds[-1], int(reach[eligible].max()))
    return step_ids, bounds, cutoff


INTERVAL_COLUMNS = ("lane", "kind", "start_ns", "end_ns", "launch_ns")  # what analyze_rank reads of intervals


def analyze_rank_file(rank: int, path: Path, collectives: pl.DataFrame, marks: pl.DataFrame,
                      settings: OverlapSettings) -> RankOverlap:
    """:func:`analyze_rank` on the rank's interval file: the task a worker process (or a Dask worker)
    runs, reading only that rank and only the columns the analysis needs."""
    return analyze_rank(rank, read_rank_intervals(rank, path, INTERVAL_COLUMNS), collectives, marks, settings)


def analyze_rank(
    rank: int, intervals: pl.DataFrame, collectives: pl.DataFrame, marks: pl.DataFrame,
    settings: OverlapSettings,
) -> RankOverlap:
    warnings: list[str] = []
    keys: npt.NDArray[np.int64] | None = None
    if settings.hta_compat:
        if _has_sub_us_starts(intervals, marks):
            intervals, collectives = _round_inward(intervals), _round_inward(collectives)
            marks = marks.with_columns(((pl.col("start_ns") + 999) // 1000 * 1000).alias("start_ns"))
        # no launch: never before the cut (int64 max), so dropped as HTA drops it
        keys = intervals.select(_hta_cut_key(intervals).fill_null(np.iinfo(np.int64).max)).to_series().to_numpy()
    starts = intervals["start_ns"].to_numpy().astype(np.int64)
    ends = intervals["end_ns"].to_numpy().astype(np.int64)
    kind = intervals["kind"].cast(pl.String).to_numpy()  # once: ~1 ms per 20k intervals
    host_side, lane_codes = None, None  # HTA's window is its own (module doc)
    if not settings.hta_compat:
        # the lanes' codes and which lanes are GPU ones in one query (a query costs ~0.1 ms: a small rank's
        # analysis is mostly such fixed costs); with --hta-compat the intervals are cut first, coded below
        lanes = intervals.select(pl.col("lane").rank("dense").alias("code"),
                                 pl.col("lane").str.starts_with("gpu ").fill_null(False).alias("gpu"))
        lane_codes = lanes["code"].to_numpy().astype(np.int64)
        host_side = ~lanes["gpu"].to_numpy() & (kind != "comm")
    step_ids, bounds, cutoff = _windows(marks, starts, ends, settings, warnings, rank, keys, host_side)
    if cutoff is not None and keys is not None:
        keep = keys < cutoff
        unlaunched = int((keys == np.iinfo(np.int64).max).sum())
        if unlaunched:
            warnings.append(f"rank {rank}: --hta-compat drops {unlaunched} device events whose launch is not in "
                            "the trace, as HTA does")
        intervals, starts, ends, kind = intervals.filter(pl.Series(keep)), starts[keep], ends[keep], kind[keep]
        collectives = collectives.filter(_hta_cut_key(collectives).fill_null(np.iinfo(np.int64).max) < cutoff)
    compute = effective_compute(intervals, kind, starts, ends, lane_codes)
    comm = iv.union(collectives["start_ns"].to_numpy(), collectives["end_ns"].to_numpy())
    memory = iv.union(starts[kind == "memory"], ends[kind == "memory"])
    shared, pg_steps, window_wait = _collective_shares(rank, collectives, step_ids, bounds, compute)
    steps = _step_parts(rank, step_ids, bounds, compute, comm, memory, window_wait)
    exposed = iv.clip(iv.subtract(comm, compute), int(bounds[0]), int(bounds[-1])) if bounds.size else iv.EMPTY
    spans = {"rank": np.full(exposed[0].size, rank, np.int32), "start_ns": exposed[0], "end_ns": exposed[1]}
    return RankOverlap(steps, shared, pg_steps, spans, warnings)


def effective_compute(
    intervals: pl.DataFrame, kind: npt.NDArray[np.str_], starts: npt.NDArray[np.int64],
    ends: npt.NDArray[np.int64], lane_codes: npt.NDArray[np.int64] | None = None,
) -> iv.Union:
    """Compute per lane minus the waits and comm calls on the same lane, then merged over lanes.
    ``lane_codes``: the intervals' lanes' dense ranks, when the caller has them."""
    if starts.size == 0:
        return iv.EMPTY
    if lane_codes is None:
        lane_codes = intervals.select(pl.col("lane").rank("dense")).to_series().to_numpy().astype(np.int64)
    t0 = int(starts.min())
    span = int(ends.max()) - t0 + 1
    rel_s, rel_e = starts - t0, ends - t0
    is_compute = kind == "compute"
    blocks = (kind == "wait") | (kind == "comm")
    comp = iv.per_lane_union(lane_codes[is_compute], rel_s[is_compute], rel_e[is_compute], span)
    if blocks.any():
        blocked = iv.per_lane_union(lane_codes[blocks], rel_s[blocks], rel_e[blocks], span)
        comp = iv.subtract(comp, blocked)
    merged = iv.unshift(comp, span)
    return merged[0] + t0, merged[1] + t0


def _step_parts(
    rank: int, step_ids: npt.NDArray[np.int64], bounds: npt.NDArray[np.int64], compute: iv.Union,
    comm: iv.Union, memory: iv.Union, window_wait: npt.NDArray[np.float64],
) -> Columns:
    """The five parts per step, and its exposed comm split into wait (``window_wait``: the exposed wait
    of the calls' pieces in each window, capped at the step's exposed comm) and transfer; they add up
    to the step exactly."""
    n = step_ids.size
    if n == 0:
        return {}
    pts = iv.sorted_unique(np.concatenate([iv.boundaries(compute, comm, memory), bounds]))
    left, seg = pts[:-1], np.diff(pts)
    window = np.searchsorted(bounds, left, side="right") - 1
    valid = (window >= 0) & (window < n)
    in_c, in_m, in_mem = iv.inside(compute, pts), iv.inside(comm, pts), iv.inside(memory, pts)

    def total(mask: npt.NDArray[np.bool_]) -> npt.NDArray[np.int64]:
        sel = valid & mask
        return np.bincount(window[sel], weights=seg[sel], minlength=n).round().astype(np.int64)

    overlapped = total(in_m & in_c)
    exposed = total(in_m & ~in_c)
    comp = total(in_c & ~in_m)
    mem = total(in_mem & ~in_c & ~in_m)
    duration = np.diff(bounds)
    exposed_wait = np.minimum(np.round(window_wait), exposed).astype(np.int64)
    return {
        "rank": np.full(n, rank, dtype=np.int32),
        "step": step_ids,
        "start_ns": bounds[:-1],
        "end_ns": bounds[1:],
        "compute_ns": comp,
        "overlapped_comm_ns": overlapped,
        "exposed_comm_ns": exposed,
        "memory_ns": mem,
        "idle_ns": duration - comp - overlapped - exposed - mem,
        "exposed_wait_ns": exposed_wait,
        "exposed_transfer_ns": exposed - exposed_wait,
    }


def _collective_shares(
    rank: int, collectives: pl.DataFrame, step_ids: npt.NDArray[np.int64], bounds: npt.NDArray[np.int64],
    compute: iv.Union,
) -> tuple[pl.DataFrame, Columns, npt.NDArray[np.float64]]:
    """Each collective's share of overlapped and exposed time: an instant where k comm intervals run
    counts 1/k for each, so per-group and per-dimension totals add up to the rank's totals. Collectives
    are cut at step bounds first, so a collective spanning two steps counts in both.

    Exposed wait: a call that waited ``wait_ns`` for a later rank (the ``wait_ns`` column, when present)
    ends that much later than it would have; the exposed time it would not have had is its exposed wait,
    ``min(exposed, wait)``, the rest is exposed transfer. (Counting only the exposed instants before the
    last arrival would call it transfer when the wait itself was hidden behind compute and the delay
    surfaces at the call's end.) A call cut into several steps shares it in proportion to its exposed
    time in each."""
    n = len(collectives)
    cs = collectives["start_ns"].to_numpy().astype(np.int64)
    ce = collectives["end_ns"].to_numpy().astype(np.int64)
    nwin = step_ids.size
    if n == 0 or nwin == 0:
        out = collectives.with_columns(
            pl.lit(None, pl.Int64).alias("step"),
            pl.lit(0.0).alias("overlapped_ns"),
            pl.lit(0.0).alias("exposed_ns"),
            pl.lit(0.0).alias("exposed_wait_ns"),
        )
        return out, {}, np.zeros(nwin, np.float64)
    lo, hi = bounds[0], bounds[-1]
    s, e = np.clip(cs, lo, hi), np.clip(ce, lo, hi)
    first = np.clip(np.searchsorted(bounds, s, side="right") - 1, 0, nwin - 1)
    last = np.clip(np.searchsorted(bounds, e, side="left") - 1, 0, nwin - 1)
    npieces = np.where(e > s, last - first + 1, 0)
    owner = np.repeat(np.arange(n), npieces)
    win = np.repeat(first, npieces) + (np.arange(owner.size) - np.repeat(np.cumsum(npieces) - npieces, npieces))
    ps = np.maximum(s[owner], bounds[win])
    pe = np.minimum(e[owner], bounds[win + 1])
    wait = np.nan_to_num(collectives["wait_ns"].to_numpy().astype(np.float64), nan=0.0) \
        if "wait_ns" in collectives.columns else np.zeros(n, np.float64)
    compute = iv.clip(compute, int(lo), int(hi))
    pts = iv.sorted_unique(np.concatenate([ps, pe, compute[0], compute[1]]))
    active = np.zeros(pts.size, dtype=np.int64)
    np.add.at(active, np.searchsorted(pts, ps), 1)
    np.add.at(active, np.searchsorted(pts, pe), -1)
    running = np.cumsum(active)[:-1]
    seg = np.diff(pts).astype(np.float64)
    in_c = iv.inside(compute, pts)
    share = np.divide(seg, running, out=np.zeros_like(seg), where=running > 0)
    cum_ovl = np.concatenate([[0.0], np.cumsum(np.where(in_c, share, 0.0))])
    cum_exp = np.concatenate([[0.0], np.cumsum(np.where(in_c, 0.0, share))])
    i0, i1 = np.searchsorted(pts, ps), np.searchsorted(pts, pe)
    piece_ovl, piece_exp = cum_ovl[i1] - cum_ovl[i0], cum_exp[i1] - cum_exp[i0]
    call_exp = np.bincount(owner, weights=piece_exp, minlength=n)
    wait_share = np.divide(np.minimum(call_exp, wait), call_exp, out=np.zeros(n), where=call_exp > 0)
    piece_wait = piece_exp * wait_share[owner] if owner.size else piece_exp
    start_step = np.where((cs >= lo) & (cs < hi), step_ids[first], -1)
    added = [
        pl.Series("step", np.where(start_step >= 0, start_step, np.nan), nan_to_null=True).cast(pl.Int64),
        pl.Series("overlapped_ns", np.bincount(owner, weights=piece_ovl, minlength=n)),
        pl.Series("exposed_ns", call_exp),
        pl.Series("exposed_wait_ns", np.bincount(owner, weights=piece_wait, minlength=n)),
    ]
    # hstack when the columns are new (no query: with_columns costs a lazy plan and a collect per rank)
    out = collectives.with_columns(*added) if any(c.name in collectives.columns for c in added) \
        else collectives.hstack(added)
    pg = collectives["pg"]
    pg_steps = _pg_step_sums(rank, step_ids[win], (pg.fill_null(UNKNOWN) if pg.null_count() else pg).to_numpy()[owner],
                             ((pe - ps).astype(np.float64), piece_ovl, piece_exp, piece_wait))
    return out, pg_steps, np.bincount(win, weights=piece_wait, minlength=nwin).astype(np.float64)


def _pg_step_sums(rank: int, steps: npt.NDArray[np.int64], pgs: npt.NDArray[np.object_],
                  values: tuple[npt.NDArray[np.float64], ...]) -> Columns:
    """The pieces' comm, overlapped, exposed and exposed-wait time summed per (step, pg), sorted by
    step then pg: a group-by in numpy (not a polars query per rank)."""
    if steps.size == 0:
        return {}
    names, pg_code = np.unique(pgs.astype(str), return_inverse=True)
    step_values, step_code = np.unique(steps, return_inverse=True)
    key = step_code.astype(np.int64) * names.size + pg_code
    present = np.flatnonzero(np.bincount(key, minlength=step_values.size * names.size))
    sums = [np.bincount(key, weights=v, minlength=step_values.size * names.size)[present] for v in values]
    cols = dict(zip(("comm_ns", "overlapped_ns", "exposed_ns", "exposed_wait_ns"), sums, strict=True))
    return {"rank": np.full(present.size, rank, np.int32), "step": step_values[present // names.size],
            "pg": names[present % names.size], **cols}
