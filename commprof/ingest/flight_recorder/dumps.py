"""Flight Recorder dumps -> one row per entry (a collective or p2p call with its group, seq, op, sizes, state
and, with TORCH_NCCL_ENABLE_TIMING, its duration) and one row per (rank, group) with the group's members.

Two kinds of file: PyTorch's own dumps (a pickle per rank, ``<prefix><rank>`` as
``TORCH_NCCL_DEBUG_INFO_TEMP_FILE`` names them: ``nccl_trace_rank_3``, ``_dump_3``) and the JSON dumps
``commprof record`` writes (``raw/flight_recorder/rank-N.json``). The rank is the file name's last number,
as PyTorch's own analyzer (fr_trace) reads it.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path
from typing import Any

import polars as pl

from commprof.ingest.common.names import dtype_size
from commprof.ingest.common.rank_trace import MAX_RANK
from commprof.ingest.discover import regular_file_problem
from commprof.ingest.flight_recorder.unpickle import MAX_DUMP_BYTES, RefusedPickle, load_plain

FLIGHT_RECORDER = pl.Schema({
    "rank": pl.Int32, "record_id": pl.Int64, "pg": pl.String, "pg_desc": pl.String, "seq": pl.Int64,
    "p2p_seq": pl.Int64, "op": pl.String, "is_p2p": pl.Boolean, "state": pl.String, "bytes_in": pl.Int64,
    "sizes": pl.String, "time_created_ns": pl.Int64, "duration_ms": pl.Float64, "file": pl.String,
})
FR_GROUPS = pl.Schema({"rank": pl.Int32(), "pg": pl.String(), "desc": pl.String(), "ranks": pl.List(pl.Int32()),
                       "version": pl.String()})
_RANK = re.compile(r"(\d+)(?:\.json)?$")
_INT64 = 1 << 63


def dump_rank(path: Path) -> int | None:
    match = _RANK.search(path.name)
    if not match or len(match.group(1)) > 8:
        return None
    rank = int(match.group(1))
    return rank if rank < MAX_RANK else None


def load_dump(path: Path) -> dict[str, Any]:
    """A dump's top-level dict (pickle or JSON). Raises ValueError with a one-line reason."""
    why = regular_file_problem(path)
    if why:
        raise ValueError(why)
    if path.stat().st_size > MAX_DUMP_BYTES:
        raise ValueError(f"{path.stat().st_size} bytes: larger than any Flight Recorder dump")
    data = path.read_bytes()
    if data[:1] in (b"{", b" ", b"\n"):
        try:
            doc = json.loads(data.decode("utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as err:
            raise ValueError(f"not valid JSON ({str(err)[:80]})") from None
    else:
        try:
            doc = load_plain(data)
        except RefusedPickle as err:
            raise ValueError(str(err)) from None
    if not isinstance(doc, dict) or not isinstance(doc.get("entries", []), list):
        raise ValueError("not a Flight Recorder dump (no dict with 'entries')")
    return doc


def read_dumps(paths: list[Path], warnings: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Entries and groups of every readable dump; each unreadable one is named in ``warnings``."""
    rows: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    bad: list[str] = []
    for path in paths:
        rank = dump_rank(path)
        try:
            if rank is None:
                raise ValueError("no rank number at the end of its name")
            doc = load_dump(path)
        except (OSError, ValueError) as err:
            bad.append(f"{path.name} ({err})")
            continue
        rows.extend(_row(rank, e, path.name) for e in doc.get("entries") or [] if isinstance(e, dict))
        groups.extend(_groups(rank, doc))
    if bad:
        warnings.append(f"Flight Recorder: {len(bad)} dump(s) unreadable and skipped: {'; '.join(bad[:3])}")
    try:
        entries = pl.DataFrame(rows, schema=FLIGHT_RECORDER, strict=False)
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
        warnings.append("Flight Recorder: entries with values of unexpected types; dumps skipped")
        entries = pl.DataFrame(schema=FLIGHT_RECORDER)
    return entries, pl.DataFrame(groups, schema=FR_GROUPS)


def _groups(rank: int, doc: dict[str, Any]) -> list[dict[str, Any]]:
    config = doc.get("pg_config")
    if not isinstance(config, dict):
        return []
    out = []
    for key, pg in config.items():
        if not isinstance(pg, dict):
            continue
        members = _ranks(pg.get("ranks"))
        out.append({"rank": rank, "pg": str(pg.get("name", key)), "desc": _text(pg.get("desc")),
                    "ranks": members, "version": _text(doc.get("version"))})
    return out


def _ranks(value: Any) -> list[int] | None:
    """``ranks`` is a string like "[0, 1]" (read as a Python literal, never evaluated) or a list."""
    if isinstance(value, str):
        try:
            value = ast.literal_eval(value.strip()[:1_000_000] or "[]")
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    if isinstance(value, (list, tuple)) and all(type(v) is int and 0 <= v < MAX_RANK for v in value):
        return list(value)
    return None


def _text(value: Any) -> str | None:
    return str(value)[:200] if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _int(value: Any) -> int | None:
    if isinstance(value, bool) or value is None:
        return None
    try:
        out = int(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return out if -_INT64 <= out < _INT64 else None


def _size_bytes(sizes: Any, dtypes: Any) -> int | None:
    if not isinstance(sizes, list) or not isinstance(dtypes, list):
        return None
    total = 0
    for shape, dtype in zip(sizes, dtypes, strict=False):
        if not isinstance(shape, list) or not all(type(d) is int and d >= 0 for d in shape):
            return None
        n = 1
        for d in shape:
            n *= d
        size = dtype_size(str(dtype))
        if not size:
            return None
        total += n * size
    return total if total < _INT64 else None


def _row(rank: int, e: dict[str, Any], file: str) -> dict[str, Any]:
    group = e.get("process_group")
    name = e.get("profiling_name")
    op = str(name).split(":", 1)[-1][:80] if name else None
    duration = e.get("duration_ms")
    sizes = e.get("input_sizes")
    try:
        sizes_text = json.dumps(sizes) if sizes is not None else None
    except (TypeError, ValueError, RecursionError):
        sizes_text = None
    return {
        "rank": rank, "record_id": _int(e.get("record_id")),
        "pg": _text(group[0]) if isinstance(group, (list, tuple)) and group else None,
        "pg_desc": _text(group[1]) if isinstance(group, (list, tuple)) and len(group) > 1 else None,
        "seq": _int(e.get("collective_seq_id")), "p2p_seq": _int(e.get("p2p_seq_id")),
        "op": op, "is_p2p": bool(e.get("is_p2p")) if isinstance(e.get("is_p2p"), bool) else None,
        "state": _text(e.get("state")),
        "bytes_in": _size_bytes(sizes, e.get("input_dtypes")),
        "sizes": sizes_text,
        "time_created_ns": _int(e.get("time_created_ns")),
        "duration_ms": float(duration) if isinstance(duration, (int, float)) and not isinstance(duration, bool)
        else None,
        "file": file,
    }
