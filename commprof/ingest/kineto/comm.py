"""What a trace says about each collective call: its op, group, size, peer and sequence number, from
``record_param_comms``-style args, and the process groups it names."""

from __future__ import annotations

import ast
import bisect
from typing import Any

import msgspec
import polars as pl

from commprof.ingest.common import names
from commprof.ingest.common.rank_trace import MAX_RANK
from commprof.ingest.kineto.decode import Args
from commprof.ingest.kineto.numbers import INT64_LIMIT as INT64_LIMIT  # re-exported, with the two below
from commprof.ingest.kineto.numbers import as_int as as_int
from commprof.ingest.kineto.numbers import num as num
from commprof.ingest.schema import PROCESS_GROUPS

COMM_FIELDS = ("op", "pg", "bytes", "dtype", "group_size", "peer", "seq", "is_async")


def bounded_int(value: object, low: int, high: int) -> int | None:
    """``as_int`` within [low, high), else None."""
    number = as_int(value)
    return number if number is not None and low <= number < high else None


def parse_ranks(value: object) -> list[int] | None:
    if value is None:
        return None
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip() or "[]")
        except (ValueError, SyntaxError):
            return None
    if isinstance(value, (list, tuple)):
        # the usual list: plain ints in range, kept as they are (a default group lists every rank of the run
        # in every trace: 5,000 ranks make 25M items, ~9 s through bounded_int one by one)
        if set(map(type, value)) <= {int} and (not value or (min(value) >= 0 and max(value) < MAX_RANK)):
            return list(value)
        out = [bounded_int(v, 0, MAX_RANK) for v in value]
        return [v for v in out if v is not None]
    return None


def no_comm_args(args: Args, fallback: Args | None) -> bool:
    """Neither args names a collective (op, size or group): :func:`comm_fields` then gives nothing, not even
    the seq."""
    return args.collective_name is None and args.in_nelems is None and args.pg_name is None and (
        fallback is None or (fallback.collective_name is None and fallback.in_nelems is None
                             and fallback.pg_name is None))


def comm_fields(args: Args | None, fallback: Args | None) -> dict[str, Any]:
    """pg, op, bytes, dtype, group size, peer and seq from record_param_comms-style args (a field
    ``args`` lacks is taken from ``fallback``). A size that the args do not give is None (unknown),
    never 0. Runs once per communication kernel: written flat, without a helper call per field."""
    if args is None:
        args, fallback = fallback, None
    if args is None or no_comm_args(args, fallback):
        return dict.fromkeys(COMM_FIELDS)
    op, pg, dtype, in_n, out_n = args.collective_name, args.pg_name, args.dtype, args.in_nelems, args.out_nelems
    dst, src, group_size, seq, is_async = args.dst_rank, args.src_rank, args.group_size, args.seq, args.is_async
    if fallback is not None:
        f = fallback
        op = op if op is not None else f.collective_name
        pg = pg if pg is not None else f.pg_name
        dtype = dtype if dtype is not None else f.dtype
        in_n = in_n if in_n is not None else f.in_nelems
        out_n = out_n if out_n is not None else f.out_nelems
        dst = dst if dst is not None else f.dst_rank
        src = src if src is not None else f.src_rank
        group_size = group_size if group_size is not None else f.group_size
        seq = seq if seq is not None else f.seq
        is_async = is_async if is_async is not None else f.is_async
    size = names.dtype_size(dtype)
    nbytes = None
    if size:
        nelems = [n for n in (bounded_int(in_n, 0, INT64_LIMIT), bounded_int(out_n, 0, INT64_LIMIT)) if n is not None]
        if nelems:
            nbytes = max(nelems) * size
            if nbytes >= INT64_LIMIT:
                nbytes = None
    peer = bounded_int(dst, 0, MAX_RANK)
    if peer is None:
        peer = bounded_int(src, 0, MAX_RANK)
    return {
        "op": op,
        "pg": str(pg) if pg is not None else None,
        "bytes": nbytes,
        "dtype": dtype,
        "group_size": bounded_int(group_size, 1, MAX_RANK),
        "peer": peer,
        "seq": bounded_int(seq, 0, INT64_LIMIT),
        "is_async": bool(as_int(is_async)) if is_async is not None else None,
    }


# The members of a group, parsed and built into a one-row List(Int32) Series once per distinct list in the process:
# every trace of a run lists every rank in its default group (5,000 ranks: 5,000 Python ints to check and convert
# per trace, O(ranks^2) over the run), and the traces of a group list the same members. Keyed by the text, or by a
# list's JSON (which tells 1 from 1.0 and true, where a tuple key would not: True == 1 == 1.0; NaN and inf both
# write null, and parse_ranks drops all three alike).
_RANKS_CELLS: dict[object, tuple[int, pl.Series]] = {}
_RANKS_CELLS_ITEMS = [0]
_RANKS_CELLS_LIMIT = 1 << 22  # members held in all: ~16 MB of int32, then the cache starts over
_RANKS_DTYPE = PROCESS_GROUPS["ranks"]


def _ranks_key(value: object) -> object | None:
    if isinstance(value, str):
        return value
    if isinstance(value, (list, tuple)):
        try:
            return msgspec.json.encode(value)
        except (TypeError, ValueError, OverflowError):
            return None
    return None


def ranks_cell(value: object) -> tuple[int, pl.Series]:
    """``parse_ranks(value) or []`` as (its length, a one-row ``ranks`` Series), cached per distinct value."""
    key = _ranks_key(value)
    if key is not None:
        hit = _RANKS_CELLS.get(key)
        if hit is not None:
            return hit
    ranks = parse_ranks(value) or []
    cell = (len(ranks), pl.Series("ranks", [ranks], dtype=_RANKS_DTYPE))
    if key is not None:
        if _RANKS_CELLS_ITEMS[0] + len(ranks) > _RANKS_CELLS_LIMIT:
            _RANKS_CELLS.clear()
            _RANKS_CELLS_ITEMS[0] = 0
        _RANKS_CELLS[key] = cell
        _RANKS_CELLS_ITEMS[0] += len(ranks)
    return cell


def process_groups(dist: Any, arg_sources: list[Args], sidecar: dict[str, Any] | None = None) -> pl.DataFrame:
    """Groups from ``distributedInfo.pg_config``, completed by those named in per-op args and in the
    record sidecar. Built by columns, the members from ``ranks_cell`` (once per distinct list)."""
    rows: dict[str, tuple[Any, tuple[int, pl.Series], int | None, Any]] = {}
    for group in (sidecar or {}).get("process_groups") or []:
        cell = ranks_cell(group.get("ranks"))
        size = bounded_int(group.get("size"), 1, MAX_RANK) or cell[0] or None
        rows[str(group.get("name"))] = (group.get("desc"), cell, size, group.get("backend"))
    configs = dist.pg_config if dist is not None and dist.pg_config is not None else []
    if isinstance(configs, dict):
        configs = list(configs.values())
    for cfg in configs:
        cell = ranks_cell(cfg.ranks)
        if str(cfg.pg_name) in rows:
            continue
        rows[str(cfg.pg_name)] = (cfg.pg_desc or None, cell, bounded_int(cfg.pg_size, 1, MAX_RANK) or cell[0] or None,
                                  cfg.backend_config or (dist.backend if dist else None))
    for args in arg_sources:
        if args.pg_name is None or str(args.pg_name) in rows:
            continue
        cell = ranks_cell(args.pg_ranks)
        rows[str(args.pg_name)] = (args.pg_desc, cell, bounded_int(args.group_size, 1, MAX_RANK) or cell[0] or None,
                                   dist.backend if dist else None)
    if not rows:
        return pl.DataFrame(schema=PROCESS_GROUPS)
    descs = [row[0] for row in rows.values()]
    backends = [row[3] for row in rows.values()]
    if not all(v is None or type(v) is str for v in (*descs, *backends)):
        # a sidecar's desc or backend that is not text: the row-wise build casts it (1 -> "1") or says why not
        return pl.DataFrame([{"pg": pg, "desc": desc, "ranks": cell[1][0].to_list(), "size": size, "backend": backend}
                             for pg, (desc, cell, size, backend) in rows.items()], schema=PROCESS_GROUPS)
    cells = [row[1][1] for row in rows.values()]
    return pl.DataFrame([
        pl.Series("pg", list(rows), dtype=pl.String), pl.Series("desc", descs, dtype=pl.String),
        pl.concat(cells, rechunk=True) if len(cells) > 1 else cells[0],
        pl.Series("size", [row[2] for row in rows.values()], dtype=pl.Int32),
        pl.Series("backend", backends, dtype=pl.String),
    ])


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
