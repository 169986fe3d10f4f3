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
import marshal
import re
from collections.abc import Callable, Collection, Sequence
from operator import itemgetter
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
# one row per (rank, group) its dump's pg_config names; ``ranks`` (the members) on the first row that gives a
# list, null on later rows that give the same list for the group and where the list is unreadable
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


def read_dumps(paths: list[Path], warnings: list[str],
               columns: Collection[str] | None = None) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Entries and groups of every readable dump; each unreadable one is named in ``warnings``. ``columns``: the
    entry columns to make (``rank`` always; the table has only these, in FLIGHT_RECORDER's order), all by default.

    What costs grow with: the entries (column by column, a chunk of rows at a time) and the distinct member lists
    (each parsed and kept once), not ranks x group size: torch lists the default group's every rank in every dump.
    """
    entries = _Entries(columns)
    members = _Members()
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
        entries.add(rank, doc.get("entries") or [], path.name)
        groups.extend(_groups(rank, doc, members))
    if bad:
        warnings.append(f"Flight Recorder: {len(bad)} dump(s) unreadable and skipped: {'; '.join(bad[:3])}")
    table = entries.table()
    if table is None:
        warnings.append("Flight Recorder: entries with values of unexpected types; dumps skipped")
        table = pl.DataFrame(schema=entries.schema)
    return table, pl.DataFrame(groups, schema=FR_GROUPS)


class _Members:
    """Each group's member list parsed once per distinct text, and listed once: on the first (rank, group) row
    that gives it; a later row giving the same members has null ``ranks`` (it would repeat what is above it).
    A text is found by its length and ends, then compared whole: never hashed whole, once per dump."""

    def __init__(self) -> None:
        self.texts: dict[tuple[int, str, str], list[tuple[str, list[int] | None, int]]] = {}
        self.ids: dict[tuple[int, ...], int] = {}  # each distinct member list's number
        self.listed: set[tuple[str, int]] = set()

    def _parsed(self, value: Any) -> tuple[list[int] | None, int]:
        if type(value) is not str:
            members = _ranks(value)
            return members, self._id(members)
        alike = self.texts.setdefault((len(value), value[:64], value[-64:]), [])
        for text, members, number in alike:
            if text == value:
                return members, number
        members = _ranks(value)
        alike.append((value, members, self._id(members)))
        return members, alike[-1][2]

    def _id(self, members: list[int] | None) -> int:
        return -1 if members is None else self.ids.setdefault(tuple(members), len(self.ids))

    def first(self, pg: str, value: Any) -> list[int] | None:
        members, number = self._parsed(value)
        if members is None or (pg, number) in self.listed:
            return None
        self.listed.add((pg, number))
        return members


def _groups(rank: int, doc: dict[str, Any], members: _Members) -> list[dict[str, Any]]:
    config = doc.get("pg_config")
    if not isinstance(config, dict):
        return []
    out = []
    for key, pg in config.items():
        if not isinstance(pg, dict):
            continue
        name = str(pg.get("name", key))
        out.append({"rank": rank, "pg": name, "desc": _text(pg.get("desc")),
                    "ranks": members.first(name, pg.get("ranks")), "version": _text(doc.get("version"))})
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


def _pg(group: Any) -> str | None:
    return _text(group[0]) if isinstance(group, (list, tuple)) and group else None


def _pg_desc(group: Any) -> str | None:
    return _text(group[1]) if isinstance(group, (list, tuple)) and len(group) > 1 else None


def _op(name: Any) -> str | None:
    return str(name).split(":", 1)[-1][:80] if name else None


def _duration(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def _sizes_text(sizes: Any) -> str | None:
    try:
        return json.dumps(sizes) if sizes is not None else None
    except (TypeError, ValueError, RecursionError):
        return None


def _row(rank: int, e: dict[str, Any], file: str) -> dict[str, Any]:
    """One entry as a row: what ``_Entries`` makes of it, one value at a time (the reference its tests hold it to)."""
    group = e.get("process_group")
    sizes = e.get("input_sizes")
    return {
        "rank": rank, "record_id": _int(e.get("record_id")), "pg": _pg(group), "pg_desc": _pg_desc(group),
        "seq": _int(e.get("collective_seq_id")), "p2p_seq": _int(e.get("p2p_seq_id")),
        "op": _op(e.get("profiling_name")),
        "is_p2p": bool(e.get("is_p2p")) if isinstance(e.get("is_p2p"), bool) else None,
        "state": _text(e.get("state")),
        "bytes_in": _size_bytes(sizes, e.get("input_dtypes")),
        "sizes": _sizes_text(sizes),
        "time_created_ns": _int(e.get("time_created_ns")),
        "duration_ms": _duration(e.get("duration_ms")),
        "file": file,
    }


_CHUNK_ROWS = 1 << 16
# the fields of an entry each column is made of, all in every entry torch writes (duration_ms only when timed)
_SOURCES = {"record_id": ("record_id",), "pg": ("process_group",), "pg_desc": ("process_group",),
            "seq": ("collective_seq_id",), "p2p_seq": ("p2p_seq_id",), "op": ("profiling_name",),
            "is_p2p": ("is_p2p",), "state": ("state",), "bytes_in": ("input_sizes", "input_dtypes"),
            "sizes": ("input_sizes", "input_dtypes"), "time_created_ns": ("time_created_ns",)}


class _Entries:
    """Entries as columns, a frame per chunk of rows, each value taken as ``_row`` takes it: a dump's fields are
    picked in one C call per entry, and a column whose values are all of the plain kind (ints that are ints,
    strings, tuples of strings) is taken whole, or per distinct value, instead of a call per value. Only the
    ``columns`` asked for are made: the hang report reads 8 of the 14."""

    def __init__(self, columns: Collection[str] | None = None) -> None:
        self.want = frozenset(FLIGHT_RECORDER if columns is None else {"rank", *columns} & set(FLIGHT_RECORDER))
        self.keys = tuple(dict.fromkeys(k for c in FLIGHT_RECORDER if c in self.want for k in _SOURCES.get(c, ())))
        self.get = itemgetter(*self.keys) if len(self.keys) > 1 else None
        self.schema = pl.Schema({k: v for k, v in FLIGHT_RECORDER.items() if k in self.want})
        self.cols: dict[str, list[Any]] = {name: [] for name in self.schema}
        self.chunks: list[pl.DataFrame] = []
        self.failed = False
        self.sized: dict[bytes, tuple[int | None, str | None]] = {}

    def _fields(self, es: list[dict[str, Any]]) -> dict[str, Sequence[Any]]:
        if self.get is not None:
            try:
                return dict(zip(self.keys, zip(*map(self.get, es), strict=True), strict=True))
            except KeyError:
                pass  # a field missing somewhere (not torch's dump): one get per field and entry
        return {k: [e.get(k) for e in es] for k in self.keys}

    def add(self, rank: int, entries: list[Any], file: str) -> None:
        es = entries if set(map(type, entries)) == {dict} else [e for e in entries if isinstance(e, dict)]
        if not es:
            return
        f, c, n, want = self._fields(es), self.cols, len(es), self.want
        c["rank"] += [rank] * n
        for name, key in (("record_id", "record_id"), ("seq", "collective_seq_id"), ("p2p_seq", "p2p_seq_id"),
                          ("time_created_ns", "time_created_ns")):
            if name in want:
                c[name] += _ints(f[key])
        for name, key, get in (("pg", "process_group", _pg), ("pg_desc", "process_group", _pg_desc),
                               ("op", "profiling_name", _op), ("state", "state", _text)):
            if name in want:
                c[name] += _per_value(f[key], get)
        if "is_p2p" in want:
            c["is_p2p"] += [v if type(v) is bool else None for v in f["is_p2p"]]
        if "bytes_in" in want or "sizes" in want:
            sized = self._sizes(f["input_sizes"], f["input_dtypes"])
            if "bytes_in" in want:
                c["bytes_in"] += [b for b, _ in sized]
            if "sizes" in want:
                c["sizes"] += [t for _, t in sized]
        if "duration_ms" in want:
            duration = [e.get("duration_ms") for e in es]
            c["duration_ms"] += [None] * n if duration.count(None) == n else [_duration(v) for v in duration]
        if "file" in want:
            c["file"] += [file] * n
        if len(c["rank"]) >= _CHUNK_ROWS:
            self._flush()

    def _sizes(self, sizes: Sequence[Any], dtypes: Sequence[Any]) -> list[tuple[int | None, str | None]]:
        """(bytes_in, sizes) per entry, worked out once per distinct (input_sizes, input_dtypes): keyed by their
        marshal bytes, which tell apart all the results tell apart (1 from True and 1.0, a list from a tuple)."""
        try:
            keys = [marshal.dumps(pair, 2) for pair in zip(sizes, dtypes, strict=True)]
        except ValueError:  # a value marshal cannot write (too deep, a cycle, a bytearray): one at a time
            return [(_size_bytes(s, d), _sizes_text(s)) for s, d in zip(sizes, dtypes, strict=True)]
        memo = self.sized
        for key, s, d in zip(keys, sizes, dtypes, strict=True):
            if key not in memo:
                memo[key] = (_size_bytes(s, d), _sizes_text(s))
        return [memo[k] for k in keys]

    def _flush(self) -> None:
        if self.cols["rank"] and not self.failed:
            try:
                self.chunks.append(pl.DataFrame(self.cols, schema=self.schema, strict=False))
            except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError):
                self.failed = True
        self.cols = {name: [] for name in self.cols}

    def table(self) -> pl.DataFrame | None:
        """Every entry added, or None where a value could not be held by its column."""
        self._flush()
        if self.failed:
            return None
        # chunks kept apart: rechunking would hold the table twice at its peak
        return pl.concat(self.chunks, rechunk=False) if self.chunks else pl.DataFrame(schema=self.schema)


def _ints(values: Sequence[Any]) -> Sequence[int | None]:
    if set(map(type, values)) == {int} and -_INT64 <= min(values) and max(values) < _INT64:
        return values
    return [_int(v) for v in values]


def _per_value(values: Sequence[Any], get: Callable[[Any], str | None]) -> Sequence[str | None]:
    """``get`` of each value, called once per distinct value where every value is a string or a tuple of strings
    (no two such values are equal unless alike: a set merges 1 and True, never two strings)."""
    try:
        distinct = set(values)
    except TypeError:  # a list among them
        distinct = None
    if distinct is None or not all(type(v) is str or (type(v) is tuple and all(type(x) is str for x in v))
                                   for v in distinct):
        return [get(v) for v in values]
    found = {v: get(v) for v in distinct}
    return list(map(found.__getitem__, values))
