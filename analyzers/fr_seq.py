"""Flight Recorder as the seq source for matching calls across ranks (issue 23; DESIGN §3 "Skew").

A trace whose collectives carry no seq (torch on CPU writes no ``record_param_comms``, older torch none at
all) is matched by call order, which one missing or extra call shifts for good. When the same job kept
Flight Recorder dumps, every rank's dump lists its calls per process group with torch's own
``collective_seq_id``: the seq the trace lacks. Per (rank, group):

* **by time** where the clocks agree: each call takes the seq of the dump's entry of the same op (and size,
  where both know it) created nearest its enqueue (the CPU launch, else its start), when that is closer
  than half the typical gap between the group's entries and the seqs rise with the calls. The dump's ring
  buffer holds the last N calls, so the oldest calls of a long trace may have no entry: they keep order.
* **by sequence** otherwise: the trace's calls in time order are aligned with the entries in seq order by
  op and size, and take their seq where exactly one stretch of the dump fits every call.

Where neither fits, the calls keep matching by order and the analysis says how many were left so.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from commprof.ingest.common.names import normalize_op
from commprof.vocab import P2P_OPS

# a barrier is an all-reduce of one element to NCCL and to Flight Recorder
_SAME_OP = {"barrier": "all_reduce"}


def _op(name: str | None) -> str:
    op = normalize_op(name) if name else "unknown"
    return _SAME_OP.get(op, op)


def _fits(trace: Sequence[tuple[str, int | None]], dump: Sequence[tuple[str, int | None]], at: int) -> bool:
    for k, (op, size) in enumerate(trace):
        f_op, f_size = dump[at + k]
        if op != f_op or (size is not None and f_size is not None and size != f_size):
            return False
    return True


def _alignment(trace: list[tuple[str, int | None]], dump: list[tuple[str, int | None]]) -> int | None:
    """The one offset at which the dump's entries match every trace call; None where none or several do."""
    n = len(trace)
    found = [at for at in range(len(dump) - n + 1) if dump[at][0] == trace[0][0] and _fits(trace, dump, at)]
    return found[0] if len(found) == 1 else None


def _by_time(calls: pl.DataFrame, mine: pl.DataFrame, trace: list[tuple[str, int | None]],
             dump: list[tuple[str, int | None]]) -> list[int | None] | None:
    """Each call's seq from the entry created nearest its enqueue; None where the clocks do not agree (fewer
    than half the calls within half the entries' typical gap, or seqs that do not rise with the calls)."""
    created = mine["time_created_ns"].to_numpy() if "time_created_ns" in mine.columns else None
    if created is None or mine["time_created_ns"].null_count() or len(created) < 2:
        return None
    order = np.argsort(created, kind="stable")
    created = created[order]
    gaps = np.diff(created)
    tol = float(np.median(gaps[gaps > 0])) / 2 if (gaps > 0).any() else 0.0
    launch = calls["launch_ns"] if "launch_ns" in calls.columns else calls["start_ns"]
    enqueue = launch.fill_null(calls["start_ns"]).to_numpy()
    seqs = mine["seq"].to_numpy()[order]
    kinds = [dump[i] for i in order]
    out: list[int | None] = []
    for t, (op, size) in zip(enqueue, trace, strict=True):
        at = int(np.searchsorted(created, t))
        near = [i for i in (at - 1, at) if 0 <= i < len(created)]
        best = min(near, key=lambda i: abs(int(created[i]) - int(t)))
        f_op, f_size = kinds[best]
        same = f_op == op and (size is None or f_size is None or size == f_size)
        out.append(int(seqs[best]) if same and abs(int(created[best]) - int(t)) <= tol else None)
    got = [x for x in out if x is not None]
    if 2 * len(got) < len(out) or any(b <= a for a, b in zip(got, got[1:], strict=False)):
        return None
    return out


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
    assigned: list[dict[str, int]] = []
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
        assigned += [{"rank": int(rank), "call": int(c), "_fr_seq": int(x)}
                     for c, x in zip(calls["call"].to_list(), seqs, strict=True) if x is not None]
    warnings = []
    if assigned:
        fill = pl.DataFrame(assigned, schema={"rank": pl.Int64, "call": pl.Int64, "_fr_seq": pl.Int64})
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
