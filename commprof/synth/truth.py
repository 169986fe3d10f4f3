"""truth.json: the answers a correct analysis must give, computed from what the generator placed.

Interval algebra over each rank's own activities, on the times its trace states (epoch µs floats
read back to ns), with the step windows DESIGN §3 defines: step k from its ProfilerStep start to the
next one's; the first reaches back to the earliest GPU activity, the last forward to the latest. Per
rank and step: compute, overlapped and exposed comm, memory and idle (they add up to the window).
Wait (DESIGN "Skew"): per call, the latest start among the matched call's members minus the rank's
own start. An exposed instant of a call counts as wait while it waits for that latest arrival and as
transfer after; when k calls run at once, each gets 1/k of the instant, as for exposed time.
"""

from __future__ import annotations

from decimal import ROUND_HALF_EVEN, Decimal
from typing import Any

import numpy as np
import numpy.typing as npt

from commprof.synth.config import SynthConfig
from commprof.synth.engine import Placed, Timeline
from commprof.synth.groups import Group
from commprof.synth.kineto import mark_bounds, time_base

I64 = npt.NDArray[np.int64]
PARTS = ("compute_ns", "overlapped_comm_ns", "exposed_comm_ns", "memory_ns", "idle_ns")
# the ids of analyzers/findings.py FINDING_IDS that a synthetic fault injects
FINDING_IDS = ("straggler", "tp_across_nodes", "group_larger_than_node", "dp_sync_exposed", "link_efficiency",
               "nccl_socket_fallback", "pipeline_bubble", "alltoall_imbalance", "desync", "nccl_gdr_disabled",
               "nccl_p2p_disabled", "nvls_unavailable")


def as_read(t: I64, offset: int, base: int = 0) -> I64:
    """ns as a reader gets them back from the trace: the decimal µs the writer printed (Python's
    shortest repr of (t + offset) / 1000), times 1000, rounded, plus baseTimeNanoseconds."""
    out = [int((Decimal(repr((x + offset) / 1000)) * 1000).to_integral_value(ROUND_HALF_EVEN)) for x in t.tolist()]
    return np.array(out, dtype=np.int64) + base


def _union(starts: I64, ends: I64) -> tuple[I64, I64]:
    keep = ends > starts
    s, e = starts[keep], ends[keep]
    if s.size == 0:
        return s, e
    order = np.argsort(s, kind="stable")
    s, e = s[order], e[order]
    run_end = np.maximum.accumulate(e)
    new = np.ones(s.size, dtype=bool)
    new[1:] = s[1:] > run_end[:-1]
    idx = np.flatnonzero(new)
    return s[idx], np.append(run_end[idx[1:] - 1], run_end[-1])


def _inside(u: tuple[I64, I64], x: I64) -> npt.NDArray[np.bool_]:
    i = np.searchsorted(u[0], x, side="right") - 1
    return (i >= 0) & (x < u[1][np.clip(i, 0, None)]) if u[0].size else np.zeros(x.shape, dtype=bool)


def _active(starts: I64, ends: I64, x: I64) -> I64:
    """How many of [start, end) contain each point of x."""
    return (np.searchsorted(np.sort(starts), x, side="right")
            - np.searchsorted(np.sort(ends), x, side="right")).astype(np.int64)


def pieces(a: Placed) -> list[Placed]:
    """A compute phase as the writer splits it into kernels (each kernel's start is rounded alone)."""
    if a.pieces <= 1:
        return [a]
    span = a.end - a.start
    edges = [a.start + span * i // a.pieces for i in range(a.pieces + 1)]
    return [Placed(a.stream, a.kind, a.name, s, e) for s, e in zip(edges[:-1], edges[1:], strict=True)]


def rank_truth(cfg: SynthConfig, line: Timeline) -> dict[str, Any]:
    """Mean per-step parts of one rank (and each step's five parts)."""
    offset, base = time_base(cfg, line.rank)
    acts = [piece for a in line.activities for piece in pieces(a)]
    start = as_read(np.array([a.start for a in acts], dtype=np.int64), offset, base)
    end = start + np.array([a.end - a.start for a in acts], dtype=np.int64)
    kind = np.array([a.kind for a in acts])
    comm = kind == "comm"
    late = as_read(np.array([a.latest if a.kind == "comm" else a.start for a in acts], dtype=np.int64), offset, base)
    late = np.clip(late, start, end)
    bounds_true = mark_bounds(line, round(cfg.mark_lead_us * 1000))
    steps = sorted(bounds_true)
    mark_s = as_read(np.array([bounds_true[s][0] for s in steps], dtype=np.int64), offset, base)
    last = bounds_true[steps[-1]]
    bounds = np.append(mark_s, mark_s[-1] + (last[1] - last[0]))  # a reader ends a mark at ts + dur
    bounds[0], bounds[-1] = min(bounds[0], start.min()), max(bounds[-1], end.max())
    compute = _union(start[kind == "compute"], end[kind == "compute"])
    comm_u = _union(start[comm], end[comm])
    memory = _union(start[kind == "memory"], end[kind == "memory"])
    pts = np.unique(np.concatenate([bounds, start, end, late[comm]]))
    left, seg = pts[:-1], np.diff(pts)
    win = np.searchsorted(bounds, left, side="right") - 1
    ok = (win >= 0) & (win < len(steps))
    in_c, in_m, in_mem = _inside(compute, left), _inside(comm_u, left), _inside(memory, left)
    waiting = _active(start[comm], late[comm], left)
    moving = _active(late[comm], end[comm], left)
    n = len(steps)

    def total(mask: npt.NDArray[np.bool_], weight: npt.NDArray[np.float64] | None = None) -> npt.NDArray[np.float64]:
        w = seg * (weight if weight is not None else 1.0)
        return np.bincount(win[ok & mask], weights=w[ok & mask], minlength=n).astype(np.float64)

    exposed = in_m & ~in_c
    share = np.where(waiting + moving > 0, waiting / np.maximum(waiting + moving, 1), 0.0)
    parts = {"compute_ns": total(in_c & ~in_m), "overlapped_comm_ns": total(in_m & in_c),
             "exposed_comm_ns": total(exposed), "memory_ns": total(in_mem & ~in_c & ~in_m)}
    duration = np.diff(bounds).astype(np.float64)
    parts["idle_ns"] = duration - sum(parts.values())
    parts["exposed_wait_ns"] = total(exposed, share)
    parts["exposed_transfer_ns"] = parts["exposed_comm_ns"] - parts["exposed_wait_ns"]
    own_wait = (late - start)[comm]
    call_win = np.clip(np.searchsorted(bounds, start[comm], side="right") - 1, 0, n - 1)
    parts["wait_ns"] = np.bincount(call_win, weights=own_wait.astype(np.float64), minlength=n).astype(np.float64)
    out: dict[str, Any] = {"rank": line.rank, "host": cfg.host(line.rank), "steps": n,
                           "step_ns": float(duration.mean())}
    out.update({k: float(v.mean()) for k, v in parts.items()})
    out["per_step"] = {k: [round(float(x)) for x in parts[k]] for k in PARTS}
    return out


def findings(cfg: SynthConfig, groups: list[Group]) -> dict[str, Any]:
    expected: list[dict[str, Any]] = []
    if cfg.straggler is not None:
        expected.append({"id": "straggler", "subject": {"rank": cfg.straggler}})
    bad_tp = [g.name for g in groups if g.dim == "tp" and len(g.hosts) > 1]
    if bad_tp:  # a group larger than a node cannot be swapped inside one: another layout is the fix
        kind = "group_larger_than_node" if cfg.size("tp") > cfg.gpus_per_node else "tp_across_nodes"
        expected.append({"id": kind, "subject": {"dimension": "tp", "groups": bad_tp}})
    if cfg.size("dp") > 1 and not cfg.dp_overlap:
        expected.append({"id": "dp_sync_exposed", "subject": {"dimension": "dp"}})
    if cfg.slow_link is not None:
        expected.append({"id": "link_efficiency", "subject": {"host": cfg.slow_link}})
    if cfg.socket_fallback:  # plain --network ethernet is no fault: there are no IB/RoCE NICs to use
        expected.append({"id": "nccl_socket_fallback", "subject": {"hosts": list(cfg.hosts)}})
    if cfg.size("pp") > 1:
        expected.append({"id": "pipeline_bubble", "subject": {"dimension": "pp"}})
    if cfg.alltoall_imbalance > 1:
        expected.append({"id": "alltoall_imbalance", "subject": {"dimension": "ep"}})
    if cfg.desync is not None:
        expected.append({"id": "desync", "subject": {"rank": cfg.desync}})
    if "gdr-off" in cfg.nccl_faults and cfg.network != "ethernet" and cfg.nodes > 1:
        expected.append({"id": "nccl_gdr_disabled", "subject": {"hosts": list(cfg.hosts)}})
    if "p2p-off" in cfg.nccl_faults and cfg.gpus_per_node > 1:
        expected.append({"id": "nccl_p2p_disabled", "subject": {"hosts": list(cfg.hosts)}})
    if "nvls-off" in cfg.nccl_faults and cfg.intra == "nvlink":
        expected.append({"id": "nvls_unavailable", "subject": {"hosts": list(cfg.hosts)}})
    ids = {f["id"] for f in expected}
    return {"expected": expected, "absent": [i for i in FINDING_IDS if i not in ids]}
