"""Flight Recorder as the seq source for matching calls across ranks (issue 23; DESIGN §3 "Skew").

A trace whose collectives carry no seq (torch on CPU writes no ``record_param_comms``, older torch none at
all) is matched by call order, which one missing or extra call shifts for good. When the same job kept
Flight Recorder dumps, every rank's dump lists its calls per process group with torch's own
``collective_seq_id``: the seq the trace lacks. Per (rank, group):

* **by time** where the clocks agree: each call takes the seq of an entry of the same op created within half
  the group's typical gap between entries of its enqueue (the CPU launch, else its start), each entry once,
  the closest pairs first. The dump's ring
  buffer holds the last N calls, so the oldest calls of a long trace may have no entry: they keep order.
* **by sequence** otherwise: the trace's calls in time order are aligned with the entries in seq order by
  op and size, and take their seq where exactly one stretch of the dump fits every call.

Where neither fits, the calls keep matching by order and the analysis says how many were left so.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import polars as pl

from commprof.ingest.common.names import normalize_op
from commprof.vocab import P2P_OPS

# a barrier is an all-reduce of one element to NCCL and to Flight Recorder
_SAME_OP = {"barrier": "all_reduce"}


def _op(name: str | None) -> str:
    op = normalize_op(name) if name else "unknown"
    return _SAME_OP.get(op, op)


# ops whose size the trace and the dump may count differently (output vs per-rank input, uneven splits)
_SIZE_VARIES = frozenset({"all_gather", "reduce_scatter", "all_to_all", "gather", "scatter"})


def _fits(trace: Sequence[tuple[str, int | None]], dump: Sequence[tuple[str, int | None]], at: int) -> bool:
    for k, (op, size) in enumerate(trace):
        f_op, f_size = dump[at + k]
        if op != f_op or (op not in _SIZE_VARIES and size is not None and f_size is not None and size != f_size):
            return False
    return True


def _alignment(trace: list[tuple[str, int | None]], dump: list[tuple[str, int | None]]) -> int | None:
    """The one offset at which the dump's entries match every trace call; None where none or several do."""
    n = len(trace)
    found = [at for at in range(len(dump) - n + 1) if dump[at][0] == trace[0][0] and _fits(trace, dump, at)]
    return found[0] if len(found) == 1 else None


def _by_time(calls: pl.DataFrame, mine: pl.DataFrame, trace: list[tuple[str, int | None]],
             dump: list[tuple[str, int | None]]) -> list[int | None] | None:
    """Each call's seq from an entry of the same op created near its enqueue, each entry used once, the
    closest pairs first (two calls enqueued together may start in either order on Gloo's worker threads);
    None where the clocks do not agree (fewer than half the calls within half the entries' typical gap)."""
    if "time_created_ns" not in mine.columns or mine["time_created_ns"].null_count() or mine.height < 2:
        return None
    created = mine["time_created_ns"].to_numpy()
    order = np.argsort(created, kind="stable")
    created = created[order]
    gaps = np.diff(created)
    tol = float(np.median(gaps[gaps > 0])) / 2 if (gaps > 0).any() else 0.0
    launch = calls["launch_ns"] if "launch_ns" in calls.columns else calls["start_ns"]
    enqueue = launch.fill_null(calls["start_ns"]).to_numpy()
    seqs = mine["seq"].to_numpy()[order]
    ops = [dump[i][0] for i in order]
    pairs = []
    for k, (t, (op, _)) in enumerate(zip(enqueue, trace, strict=True)):
        at = int(np.searchsorted(created, t))
        for j in range(max(0, at - 3), min(len(created), at + 3)):
            delta = abs(int(created[j]) - int(t))
            if ops[j] == op and delta <= tol:
                pairs.append((delta, k, j))
    out: list[int | None] = [None] * len(trace)
    used: set[int] = set()
    for _, k, j in sorted(pairs):
        if out[k] is None and j not in used:
            out[k] = int(seqs[j])
            used.add(j)
    return out if 2 * sum(x is not None for x in out) >= len(out) else None


def seq_from_flight_recorder(collectives: pl.DataFrame, dumps: pl.DataFrame) -> tuple[pl.DataFrame, list[str]]:
    """``collectives`` with ``seq`` filled from the Flight Recorder ``dumps`` (rank, pg, seq, op, is_p2p,
    bytes_in) where a group's calls on a rank had none, and the warnings that say what was done."""
    need = {"rank", "call", "pg", "seq", "op", "start_ns"}
    if dumps.height == 0 or collectives.height == 0 or not need <= set(collectives.columns):
        return collectives, []
    missing = collectives.filter(pl.col("seq").is_null() & pl.col("pg").is_not_null()
                                 & ~pl.col("op").is_in(list(P2P_OPS)))
    if missing.height == 0:
        return collectives, []
    entries = dumps.filter(pl.col("seq").is_not_null() & pl.col("pg").is_not_null()
                           & ~pl.col("is_p2p").fill_null(False)).sort("rank", "pg", "seq")
    by_group = {(int(r), str(pg)): g for (r, pg), g in entries.partition_by("rank", "pg", as_dict=True).items()}
    sizes = "bytes" in missing.columns
    assigned: list[dict[str, Any]] = []
    left = 0
    for (rank, pg), calls in missing.sort("rank", "pg", "start_ns", "call").partition_by(
            "rank", "pg", as_dict=True).items():
        mine = by_group.get((int(rank), str(pg)))
        if mine is None:
            continue  # no dump for this rank or group: nothing to say beyond the order matching
        trace = [(_op(op), b) for op, b in zip(calls["op"].to_list(),
                                                calls["bytes"].to_list() if sizes else [None] * calls.height,
                                                strict=True)]
        dump = [(_op(op), b) for op, b in zip(mine["op"].to_list(), mine["bytes_in"].to_list(), strict=True)]
        seqs = _by_time(calls, mine, trace, dump)
        if seqs is None:
            at = _alignment(trace, dump) if len(dump) >= len(trace) else None
            seqs = mine["seq"].to_list()[at:at + calls.height] if at is not None else [None] * calls.height
        left += sum(1 for x in seqs if x is None)
        assigned += [{"rank": int(rank), "pg": str(pg), "call": int(c), "_fr_seq": int(x)}
                     for c, x in zip(calls["call"].to_list(), seqs, strict=True) if x is not None]
    warnings = []
    if assigned:
        fill = pl.DataFrame(assigned, schema={"rank": pl.Int64, "pg": pl.String, "call": pl.Int64,
                                              "_fr_seq": pl.Int64})
        # a seq is kept only where every rank with seq-less calls in the group got it: a call given a seq on
        # some ranks only would match nothing, and the calls left to order matching must be the same on all
        members = missing.group_by("pg").agg(pl.col("rank").n_unique().alias("_members"))
        whole = (fill.join(members, on="pg").filter(pl.col("rank").n_unique().over("pg", "_fr_seq")
                                                    == pl.col("_members")).drop("pg", "_members"))
        left += fill.height - whole.height
        fill, assigned = whole, whole.to_dicts()
    if assigned:
        collectives = (collectives.join(fill.cast({"rank": collectives["rank"].dtype,
                                                   "call": collectives["call"].dtype}),
                                        on=["rank", "call"], how="left")
                       .with_columns(pl.coalesce("seq", pl.col("_fr_seq").cast(collectives["seq"].dtype)).alias("seq"))
                       .drop("_fr_seq"))
        warnings.append(f"seq of {len(assigned)} call(s) without one taken from the Flight Recorder dumps "
                        "(per rank and group, by enqueue time or by op and size): those calls are matched by seq")
    if left:
        warnings.append(f"{left} call(s) without seq could not be aligned with the Flight Recorder dumps "
                        "(older than the dump's ring buffer, or no single stretch of it has their ops and sizes): "
                        "matched by call order")
    return collectives, warnings
