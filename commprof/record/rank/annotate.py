"""Name the process group of every communication call made from Python while the window records.

While the profiler records, the methods of ``torch.distributed.ProcessGroup`` that issue
communication are replaced by thin wrappers that open a ``record_function`` named

    commprof:pg=<group name>;op=<op>;seq=<n>[;peer=<global rank>]

around the call, and put back when the window closes: outside the window nothing of ours runs.
Every Python path ends in these methods (``dist.all_reduce``, ``dist.send``, ``batch_isend_irecv``,
DeviceMesh, FSDP2), whatever name the user imported them under. C++ callers (DDP's reducer,
functional collectives) bypass them; their Gloo ops run on the group's worker threads, which
``groups.GroupThreads`` maps instead. Values are percent-encoded (``%``, ``;``, ``=``). What each call returns
(its ``Work``) goes to ``track``, so that the profiler stops only once those collectives have ended (inflight.py).
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable
from typing import Any

from .config import ANNOTATION_PREFIX

# ProcessGroup method -> (op name in the annotation, index of the group-local peer argument)
PG_METHODS: dict[str, tuple[str, int | None]] = {
    "allreduce": ("all_reduce", None),
    "allreduce_coalesced": ("all_reduce_coalesced", None),
    "broadcast": ("broadcast", None),
    "reduce": ("reduce", None),
    "allgather": ("all_gather", None),
    "all_gather_single": ("all_gather_into_tensor", None),
    "_allgather_base": ("all_gather_into_tensor", None),
    "allgather_coalesced": ("all_gather_coalesced", None),
    "all_gather_single_coalesced": ("all_gather_into_tensor_coalesced", None),
    "allgather_into_tensor_coalesced": ("all_gather_into_tensor_coalesced", None),
    "gather": ("gather", None),
    "scatter": ("scatter", None),
    "reduce_scatter": ("reduce_scatter", None),
    "reduce_scatter_single": ("reduce_scatter_tensor", None),
    "_reduce_scatter_base": ("reduce_scatter_tensor", None),
    "reduce_scatter_single_coalesced": ("reduce_scatter_tensor_coalesced", None),
    "reduce_scatter_tensor_coalesced": ("reduce_scatter_tensor_coalesced", None),
    "all_to_all_single": ("all_to_all_single", None),
    "alltoall_base": ("all_to_all_single", None),
    "alltoall": ("all_to_all", None),
    "send": ("send", 1),
    "recv": ("recv", 1),
    "recv_anysource": ("recv", None),
    "barrier": ("barrier", None),
    "monitored_barrier": ("monitored_barrier", None),
}
_PEER_KEYWORDS = ("dstRank", "srcRank")
POINT_TO_POINT = frozenset({"send", "recv"})


def escape(value: str) -> str:
    return value.replace("%", "%25").replace(";", "%3B").replace("=", "%3D")


def format_annotation(pg: str, op: str, seq: int | None = None, peer: int | None = None) -> str:
    parts = [f"pg={escape(pg)}", f"op={op}"]
    if seq is not None:
        parts.append(f"seq={seq}")
    if peer is not None:
        parts.append(f"peer={peer}")
    return ANNOTATION_PREFIX + ";".join(parts)


class Annotator:
    def __init__(self, torch: Any) -> None:
        self._c10d: Any = importlib.import_module("torch.distributed.distributed_c10d")
        self._pg_class: Any = self._c10d.ProcessGroup
        self._record_function: Any = importlib.import_module("torch.autograd.profiler").record_function
        self._originals: dict[str, Any] = {}
        self._globals: dict[int, dict[int, int]] = {}
        self.calls = 0
        # time-based windows: called before every communication call, may start or stop the window
        self.tick: Callable[[], None] | None = None
        self.annotating = False
        # while annotating: called with the group and what the call returned (its Work), see inflight.py
        self.track: Callable[[Any, Any], None] | None = None

    @property
    def installed(self) -> bool:
        return bool(self._originals)

    def _global_rank(self, pg: Any, local: int) -> int | None:
        table = self._globals.get(id(pg))
        if table is None:
            group_ranks = self._c10d._world.pg_group_ranks.get(pg, {})
            table = {int(loc): int(glob) for glob, loc in group_ranks.items()}
            self._globals[id(pg)] = table
        return table.get(int(local))

    def label(self, pg: Any, op: str, args: tuple[Any, ...], kwargs: dict[str, Any], peer_at: int | None) -> str:
        name = str(pg.group_name)
        seq: int | None
        try:
            seq = int(pg._get_sequence_number_for_group()) + 1
        except Exception:
            seq = None
        peer = None
        if peer_at is not None:
            local = args[peer_at] if len(args) > peer_at else None
            if local is None:
                local = next((kwargs[k] for k in _PEER_KEYWORDS if k in kwargs), None)
            if isinstance(local, int):
                peer = self._global_rank(pg, local)
        return format_annotation(name, op, seq, peer)

    def _wrap(self, method: str, op: str, peer_at: int | None, original: Any) -> Callable[..., Any]:
        owner = self
        record_function = self._record_function

        @functools.wraps(original)
        def annotated(pg: Any, *args: Any, **kwargs: Any) -> Any:
            tick = owner.tick
            if tick is not None:
                tick()
            if not owner.annotating:
                return original(pg, *args, **kwargs)
            try:
                name = owner.label(pg, op, args, kwargs, peer_at)
            except Exception:
                return original(pg, *args, **kwargs)
            owner.calls += 1
            with record_function(name):
                result = original(pg, *args, **kwargs)
            track = owner.track
            # point-to-point works end their profiler event in wait(), on the thread that waits (the training's,
            # which is also the one that stops the profiler), and Gloo's never report is_completed(): not tracked
            if track is not None and op not in POINT_TO_POINT:
                try:
                    track(pg, result)
                except Exception:  # bookkeeping only: the call's result goes back to the training
                    pass
            return result

        return annotated

    def install(self) -> None:
        if self._originals:
            return
        for method, (op, peer_at) in PG_METHODS.items():
            original = self._pg_class.__dict__.get(method)
            if original is None:
                continue
            self._originals[method] = original
            setattr(self._pg_class, method, self._wrap(method, op, peer_at, original))

    def uninstall(self) -> None:
        originals, self._originals = self._originals, {}
        self._globals.clear()
        self.annotating = False
        for method, original in originals.items():
            setattr(self._pg_class, method, original)
