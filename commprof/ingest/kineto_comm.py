"""What a trace says about each collective call: its op, group, size, peer and sequence number, from
``record_param_comms``-style args, and the process groups it names."""

from __future__ import annotations

import ast
import bisect
from typing import Any

import polars as pl

from commprof.ingest import names
from commprof.ingest.decode import Args
from commprof.ingest.schema import PROCESS_GROUPS

COMM_FIELDS = ("op", "pg", "bytes", "dtype", "group_size", "peer", "seq", "is_async")


def num(value: object) -> float | None:
    if value is None or isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    try:
        return float(str(value))
    except ValueError:
        return None


def as_int(value: object) -> int | None:
    if type(value) is int:
        return value
    number = num(value)
    return int(number) if number is not None else None


def parse_ranks(value: object) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip() or "[]")
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)):
        out = [as_int(v) for v in value]
        return [v for v in out if v is not None]
    return None


def comm_fields(args: Args | None, fallback: Args | None) -> dict[str, Any]:
    """pg, op, bytes, dtype, group size, peer and seq from record_param_comms-style args. A size that
    the args do not give is None (unknown), never 0."""

    sources = [a for a in (args, fallback) if a is not None]

    def pick(attr: str) -> Any:
        for source in sources:
            value = getattr(source, attr)
            if value is not None:
                return value
        return None

    if not sources or all(a.collective_name is None and a.in_nelems is None and a.pg_name is None for a in sources):
        return dict.fromkeys(COMM_FIELDS)

    dtype = pick("dtype")
    size = names.dtype_size(dtype)
    nelems = [n for n in (as_int(pick("in_nelems")), as_int(pick("out_nelems"))) if n is not None]
    nbytes = max(nelems) * size if nelems and size else None
    peer = as_int(pick("dst_rank"))
    if peer is None:
        peer = as_int(pick("src_rank"))
    pg = pick("pg_name")
    is_async = pick("is_async")
    return {
        "op": pick("collective_name"),
        "pg": str(pg) if pg is not None else None,
        "bytes": nbytes,
        "dtype": dtype,
        "group_size": as_int(pick("group_size")),
        "peer": peer,
        "seq": as_int(pick("seq")),
        "is_async": bool(as_int(is_async)) if is_async is not None else None,
    }


def process_groups(dist: Any, arg_sources: list[Args], sidecar: dict[str, Any] | None = None) -> pl.DataFrame:
    """Groups from ``distributedInfo.pg_config``, completed by those named in per-op args and in the
    record sidecar."""
    rows: dict[str, dict[str, Any]] = {}
    for group in (sidecar or {}).get("process_groups") or []:
        ranks = parse_ranks(group.get("ranks")) or []
        rows[str(group.get("name"))] = {
            "pg": str(group.get("name")), "desc": group.get("desc"), "ranks": ranks,
            "size": as_int(group.get("size")) or len(ranks) or None, "backend": group.get("backend"),
        }
    configs = dist.pg_config if dist is not None and dist.pg_config is not None else []
    if isinstance(configs, dict):
        configs = list(configs.values())
    for cfg in configs:
        ranks = parse_ranks(cfg.ranks) or []
        if str(cfg.pg_name) in rows:
            continue
        rows[str(cfg.pg_name)] = {
            "pg": str(cfg.pg_name),
            "desc": cfg.pg_desc or None,
            "ranks": ranks,
            "size": as_int(cfg.pg_size) or len(ranks) or None,
            "backend": cfg.backend_config or (dist.backend if dist else None),
        }
    for args in arg_sources:
        if args.pg_name is None or str(args.pg_name) in rows:
            continue
        ranks = parse_ranks(args.pg_ranks) or []
        rows[str(args.pg_name)] = {
            "pg": str(args.pg_name),
            "desc": args.pg_desc,
            "ranks": ranks,
            "size": as_int(args.group_size) or len(ranks) or None,
            "backend": dist.backend if dist else None,
        }
    return pl.DataFrame(list(rows.values()), schema=PROCESS_GROUPS) if rows else pl.DataFrame(schema=PROCESS_GROUPS)


class CallOps:
    """The collective calls on the CPU side (``c10d::alltoall_base_``, ``nccl:all_to_all``) per thread,
    to name a kernel whose own name is ambiguous by the call its launch happened in."""

    LOOK_BACK = 64  # calls nest a few deep: the enclosing one is among the last that started

    def __init__(self, spans: list[tuple[Any, int, int, str]]) -> None:
        by_thread: dict[Any, list[tuple[int, int, str]]] = {}
        for tid, start, end, op in spans:
            by_thread.setdefault(tid, []).append((start, end, op))
        self.by_thread = {tid: sorted(s) for tid, s in by_thread.items()}
        self.starts = {tid: [s[0] for s in spans_of] for tid, spans_of in self.by_thread.items()}

    def op_at(self, tid: Any, at: int) -> str | None:
        """The innermost named call on ``tid`` whose span holds ``at``."""
        spans = self.by_thread.get(tid)
        if not spans:
            return None
        i = bisect.bisect_right(self.starts[tid], at) - 1
        stop = max(-1, i - self.LOOK_BACK)
        while i > stop:
            start, end, op = spans[i]
            if start <= at <= end:
                return op
            i -= 1
        return None
