"""Name the process group of every Gloo op in a rank's trace (standard library only).

Gloo traces carry no ``record_param_comms``, so a ``gloo:*`` op does not say its group. Two facts
recorded by ``commprof record`` make it exact (see FORMAT.md):

1. A Gloo group runs its collectives on its own worker threads. The rank sidecar lists, per group,
   the OS thread ids created while the group was constructed (``worker_tids``); Kineto's ``tid`` is
   that OS thread id. Every ``gloo:*`` op on such a thread belongs to that group - including those
   DDP's reducer and functional collectives issue from C++.
2. Ops that Gloo runs inline on the calling thread (``send``/``recv``) start inside the
   ``commprof:pg=...`` annotation that wrapped the Python call; the innermost annotation on the same
   thread whose span holds the op's start names its group, peer and sequence number.

An op that neither rule covers is reported with ``pg=None`` rather than guessed.
"""

from __future__ import annotations

import bisect
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

ANNOTATION_PREFIX = "commprof:"
GLOO_PREFIX = "gloo:"
# Kineto writes ts/dur in microseconds with three decimals; allow for the rounding of both.
_EPS_US = 0.002


@dataclass(frozen=True)
class Attribution:
    pg: str | None
    source: str  # "worker_thread" | "annotation" | "none"
    op: str | None = None  # from the annotation: the ProcessGroup call
    seq: int | None = None
    peer: int | None = None  # global rank of the p2p peer


def unescape(value: str) -> str:
    return value.replace("%3D", "=").replace("%3B", ";").replace("%25", "%")


def parse_annotation(name: str) -> dict[str, str] | None:
    """``commprof:pg=3;op=send;seq=7;peer=1`` -> {"pg": "3", "op": "send", "seq": "7", "peer": "1"}."""
    if not name.startswith(ANNOTATION_PREFIX):
        return None
    fields: dict[str, str] = {}
    for part in name[len(ANNOTATION_PREFIX):].split(";"):
        key, sep, value = part.partition("=")
        if sep:
            fields[key] = unescape(value)
    return fields if "pg" in fields else None


def _as_int(value: Any) -> int | None:
    try:
        return int(value)
    except (TypeError, ValueError):
        return None


def worker_threads(sidecar: Mapping[str, Any]) -> dict[int, str]:
    """OS thread id -> process group name, from the sidecar's ``process_groups``."""
    out: dict[int, str] = {}
    for group in sidecar.get("process_groups") or []:
        for tid in group.get("worker_tids") or []:
            out[int(tid)] = str(group["name"])
    return out


def is_gloo_op(event: Mapping[str, Any]) -> bool:
    name = event.get("name")
    return event.get("ph") == "X" and isinstance(name, str) and name.startswith(GLOO_PREFIX)


class _Annotations:
    """The ``commprof:`` spans of one thread, sorted by start, for innermost-enclosing lookups.

    Spans on one thread nest. If the latest span starting before ``ts`` has already ended, any span
    that holds ``ts`` and started earlier encloses it too, so the search climbs parents: its length
    is the nesting depth, not the number of spans."""

    def __init__(self) -> None:
        self.spans: list[tuple[float, float, dict[str, str]]] = []
        self.starts: list[float] = []
        self.parents: list[int] = []

    def add(self, start: float, end: float, fields: dict[str, str]) -> None:
        self.spans.append((start, end, fields))

    def freeze(self) -> None:
        self.spans.sort(key=lambda span: (span[0], -span[1]))
        self.starts = [span[0] for span in self.spans]
        self.parents = []
        stack: list[int] = []
        for index, (_, end, _) in enumerate(self.spans):
            while stack and self.spans[stack[-1]][1] + _EPS_US < end:
                stack.pop()
            self.parents.append(stack[-1] if stack else -1)
            stack.append(index)

    def enclosing(self, ts: float) -> dict[str, str] | None:
        index = bisect.bisect_right(self.starts, ts + _EPS_US) - 1
        while index >= 0:
            start, end, fields = self.spans[index]
            if start - _EPS_US <= ts <= end + _EPS_US:
                return fields
            index = self.parents[index]
        return None


def attribute_gloo_ops(
    events: Sequence[Mapping[str, Any]], sidecar: Mapping[str, Any]
) -> dict[int, Attribution]:
    """For every ``gloo:*`` complete event (by its index in ``events``), its process group."""
    by_thread = worker_threads(sidecar)
    annotations: dict[Any, _Annotations] = {}
    ops: list[int] = []
    for index, event in enumerate(events):
        name = event.get("name")
        if not isinstance(name, str) or event.get("ph") != "X":
            continue
        if name.startswith(GLOO_PREFIX):
            ops.append(index)
        elif name.startswith(ANNOTATION_PREFIX):
            fields = parse_annotation(name)
            ts = event.get("ts")
            if fields is None or not isinstance(ts, (int, float)):
                continue
            dur = event.get("dur")
            end = float(ts) + (float(dur) if isinstance(dur, (int, float)) else 0.0)
            annotations.setdefault(event.get("tid"), _Annotations()).add(float(ts), end, fields)
    for thread_spans in annotations.values():
        thread_spans.freeze()

    out: dict[int, Attribution] = {}
    for index in ops:
        event = events[index]
        tid = event.get("tid")
        tid_int = _as_int(tid)
        if tid_int is not None and tid_int in by_thread:
            out[index] = Attribution(pg=by_thread[tid_int], source="worker_thread")
            continue
        spans = annotations.get(tid)
        ts = event.get("ts")
        fields = spans.enclosing(float(ts)) if spans is not None and isinstance(ts, (int, float)) else None
        if fields is None:
            out[index] = Attribution(pg=None, source="none")
            continue
        out[index] = Attribution(
            pg=fields["pg"],
            source="annotation",
            op=fields.get("op"),
            seq=_as_int(fields.get("seq")),
            peer=_as_int(fields.get("peer")),
        )
    return out
