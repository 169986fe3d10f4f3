"""Which thread waited for a collective that ran on a worker thread, and for how long.

On Gloo (and other CPU backends with worker threads), a Python ``dist.all_reduce(t)`` does two things
on the calling thread: it enqueues the work (the ``c10d::allreduce_`` op, inside commprof's
``commprof:pg=..;op=..;seq=..`` annotation when recorded by ``commprof record``; ~0.1 ms) and then,
unless ``async_op=True``, blocks in ``work.wait()``, which has no profiler op of its own. The data
moves in a ``gloo:*`` op on the group's worker thread. When the call sits inside an enclosing op (a
``torch.autograd.Function``'s forward or backward, an ``nn.Module``'s ``record_function``), the
blocked time looks like that op's compute.

So every worker op is linked to the call that enqueued it, and the call is **blocking** when its
thread starts no op of its own between the enqueue and the worker op's end (an async call, or DDP's
bucket all-reduces issued from backward, let the thread go on computing: its next op starts while
the collective runs). A blocking call's thread waited from the enqueue's start to the worker op's
end: that span becomes a ``wait`` interval on the calling thread's lane named ``wait: <op> (blocking
call)``, which the overlap analysis subtracts from that lane's compute. (The collective keeps
``is_async`` True: it ran on a worker thread. Whether its caller blocked can differ between ranks, e.g.
DDP's last bucket, so it is not what calls are matched by.)

Linking: Gloo's queue is FIFO per group, so each worker op (in start order) takes the earliest enqueue
that no earlier worker op took, that started before it, with the same op and, where both sides state them, the
same first-input element count (order within size: two worker threads may start equal calls in either
order, which then does not matter) and group; an enqueue of its own group (an annotation) is preferred
to one whose group is unknown (a C++ caller's ``c10d::`` op: DDP's reducer issues those while the
training thread's own calls run). The enqueue's annotation gives the worker op its ``seq``.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from commprof.ingest.common import names
from commprof.ingest.kineto.gloo_groups import ANNOTATION_PREFIX, parse_annotation

_SCAN = 64  # enqueues looked at per worker op past the first free one (a bounded search)
_SLACK_NS = 1_000  # the thread's next op may start this close to the worker op's end (µs rounding)
_WAIT_NAME = "wait: {op} (blocking call)"


@dataclass(frozen=True)
class Ops:
    """One rank's CPU ops (row order), as ``cpu_tables`` has them."""

    names: Sequence[str]
    tids: Sequence[int]  # thread codes
    start: npt.NDArray[np.int64]
    end: npt.NDArray[np.int64]
    worker: npt.NDArray[np.bool_]  # on a comm worker thread
    comm: npt.NDArray[np.bool_]  # a collective op (``gloo:*`` & co.)
    pgs: Sequence[str | None]  # the comm ops' group (None elsewhere or when unknown)
    input_numel: Sequence[int | None]  # first input tensor's elements, where the op's shapes say


@dataclass
class Links:
    """Per worker comm op (row index): the enqueue's seq, whether its caller blocked; and the wait spans
    to add to the calling threads' lanes: (row of the enqueue, start_ns, end_ns, op)."""

    seq: dict[int, int]
    blocking: dict[int, bool]
    waits: list[tuple[int, int, int, str]]


def _enqueues(ops: Ops) -> list[tuple[int, str, str | None, int | None, int | None]]:
    """(row, op, pg, seq, bytes) of the calls that enqueue a collective, on non-worker threads, by
    start: commprof annotations, and ``c10d::`` collective ops that no annotation encloses (a plain
    torch.profiler trace, DDP's reducer). An annotation takes its size from the c10d op inside it."""
    out: list[tuple[int, str, str | None, int | None, int | None]] = []
    open_by_thread: dict[int, tuple[int, int]] = {}  # tid -> (index in out, end) of the latest annotation
    candidates = [i for i, name in enumerate(ops.names) if name.startswith((ANNOTATION_PREFIX, "c10d::"))
                  and not ops.worker[i] and not ops.comm[i]]
    for i in sorted(candidates, key=lambda i: int(ops.start[i])):
        name, tid = ops.names[i], ops.tids[i]
        enclosing = open_by_thread.get(tid)
        inside = enclosing is not None and ops.start[i] <= enclosing[1]
        if name.startswith(ANNOTATION_PREFIX):
            fields = parse_annotation(name)
            if fields is None:
                continue
            seq_text = fields.get("seq")
            out.append((i, names.normalize_op(fields.get("op") or ""), fields["pg"],
                        int(seq_text) if seq_text and seq_text.isdigit() else None, None))
            open_by_thread[tid] = (len(out) - 1, int(ops.end[i]))
        elif name.startswith("c10d::") and names.normalize_op(name) != "unknown":
            if inside and enclosing is not None:
                row, op, pg, seq, _ = out[enclosing[0]]
                out[enclosing[0]] = (row, op, pg, seq, ops.input_numel[i])
            else:
                out.append((i, names.normalize_op(name), None, None, ops.input_numel[i]))
    return out


def _next_starts(ops: Ops, rows: list[int]) -> dict[int, int | None]:
    """For each row, the start of the first op on its thread that starts after the row ends."""
    if not rows:
        return {}
    tids = np.asarray(ops.tids, dtype=np.int64)
    order = np.lexsort((ops.start, tids))  # by thread, then start
    keys_tid, keys_start = tids[order], np.asarray(ops.start, np.int64)[order]
    row_tid = tids[rows]
    # first op of the row's thread starting after the row ends: search (tid, end) in (tid, start) order
    lo = np.searchsorted(keys_tid, row_tid, side="left")
    hi = np.searchsorted(keys_tid, row_tid, side="right")
    out: dict[int, int | None] = {}
    for i, a, b, t_end in zip(rows, lo.tolist(), hi.tolist(), np.asarray(ops.end, np.int64)[rows].tolist(),
                              strict=True):
        k = a + int(np.searchsorted(keys_start[a:b], t_end, side="right"))
        out[i] = int(keys_start[k]) if k < b else None
    return out


def _pick(ops: Ops, w: int, queue: list[tuple[int, str | None, int | None, int | None]], taken: list[bool],
          first: int) -> int | None:
    """The enqueue (index in ``queue``) worker op ``w`` came from: the earliest free one started before
    it whose size and group agree, one of its own group first (module doc)."""
    fallback: int | None = None
    for j in range(first, min(len(queue), first + _SCAN)):
        row, pg, _, numel = queue[j]
        if ops.start[row] > ops.start[w]:
            break
        if taken[j] or (numel is not None and ops.input_numel[w] is not None and numel != ops.input_numel[w]):
            continue
        if ops.pgs[w] is None:
            return j  # no group to prefer by
        if pg == ops.pgs[w]:
            return j
        if pg is None and fallback is None:
            fallback = j
    return fallback


def link_worker_calls(ops: Ops) -> Links:
    """Link each worker comm op to its enqueue and find the blocking calls (module doc)."""
    links = Links({}, {}, [])
    workers = [i for i in np.argsort(ops.start, kind="stable").tolist() if ops.worker[i] and ops.comm[i]]
    if not workers:
        return links
    queues: dict[str, list[tuple[int, str | None, int | None, int | None]]] = {}
    for row, op, pg, seq, nbytes in _enqueues(ops):
        queues.setdefault(op, []).append((row, pg, seq, nbytes))
    taken: dict[str, list[bool]] = {op: [False] * len(q) for op, q in queues.items()}
    first_free = dict.fromkeys(queues, 0)
    pairs: list[tuple[int, int]] = []
    for w in workers:
        op = names.normalize_op(ops.names[w])
        queue = queues.get(op)
        if not queue:
            continue
        k = first_free[op]
        while k < len(queue) and taken[op][k]:
            k += 1
        first_free[op] = k
        j = _pick(ops, w, queue, taken[op], k)
        if j is None:
            continue
        taken[op][j] = True
        pairs.append((w, queue[j][0]))
        seq = queue[j][2]
        if seq is not None:
            links.seq[w] = seq
    following = _next_starts(ops, [row for _, row in pairs])
    for w, row in pairs:
        nxt = following[row]
        blocked = nxt is None or nxt >= int(ops.end[w]) - _SLACK_NS
        links.blocking[w] = blocked
        if blocked and ops.end[w] > ops.start[row]:
            links.waits.append((row, int(ops.start[row]), int(ops.end[w]), names.normalize_op(ops.names[w])))
    return links


def wait_name(op: str) -> str:
    return _WAIT_NAME.format(op=op)
