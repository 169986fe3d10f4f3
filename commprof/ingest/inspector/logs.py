"""NCCL Inspector JSON-lines logs -> records.

Each line is one compact JSON object (the plugin's writer; the README prints them pretty, the writer does
not). A line that is not JSON, cut mid-object (a process killed while writing), or lacks ``header`` /
``metadata`` / a perf object is skipped and counted, as the plugin's own exporter skips it. Gzip files
(``.log.gz``, ``.jsonl.gz``) are read too.
"""

from __future__ import annotations

import gzip
import json
import zlib
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import polars as pl

from commprof.ingest.discover import regular_file_problem

INSPECTOR = pl.Schema({
    "file": pl.String(), "host": pl.String(), "pid": pl.Int64(), "comm_id": pl.String(), "comm_name": pl.String(),
    "comm_rank": pl.Int32(), "n_ranks": pl.Int32(), "n_nodes": pl.Int32(), "kind": pl.String(), "op": pl.String(),
    "sn": pl.Int64(), "peer": pl.Int32(), "bytes": pl.Int64(), "exec_us": pl.Float64(), "timing_source": pl.String(),
    "algbw_gbps": pl.Float64(), "busbw_gbps": pl.Float64(), "start_us": pl.Int64(), "version": pl.String(),
})
SUFFIXES = (".log", ".log.gz", ".jsonl", ".jsonl.gz")
_OPS = {"allreduce": "all_reduce", "allgather": "all_gather", "allgatherv": "all_gather",
        "reducescatter": "reduce_scatter", "broadcast": "broadcast", "reduce": "reduce", "send": "send",
        "recv": "recv", "alltoall": "all_to_all"}
_MAX_LINE = 1 << 20  # a record is a few hundred bytes; a longer line is not one


def _lines(path: Path) -> Iterator[bytes]:
    opener = gzip.open if path.name.endswith(".gz") else open
    with opener(path, "rb") as fh:
        yield from fh


def is_inspector_log(path: Path) -> bool:
    """Its first non-empty line is an Inspector record (an NCCL INFO log with the same suffix is not)."""
    if not path.name.endswith(SUFFIXES) or regular_file_problem(path):
        return False
    try:
        for raw in _lines(path):
            line = raw.strip()
            if line:
                return line.startswith(b"{") and b'"header"' in line[:4096]
    except (OSError, EOFError, zlib.error):
        return False
    return False


def find_logs(root: Path) -> list[Path]:
    if root.is_file():
        return [root] if is_inspector_log(root) else []
    found = []
    for folder in (root, root / "raw" / "inspector", root / "inspector"):
        if folder.is_dir():
            found += [p for p in folder.iterdir() if p.is_file() and is_inspector_log(p)]
    return sorted(set(found))


def read_logs(paths: list[Path], warnings: list[str]) -> pl.DataFrame:
    rows: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    for path in paths:
        try:
            for raw in _lines(path):
                if not raw.strip():
                    continue
                row = _record(raw, path.name, skipped)
                if row is not None:
                    rows.append(row)
        except (OSError, EOFError, zlib.error) as err:
            warnings.append(f"NCCL Inspector: {path.name}: read stopped ({err}); "
                            "the records before it are kept")
    if skipped:
        shown = "; ".join(f"{n} × {why}" for why, n in skipped.most_common(3))
        warnings.append(f"NCCL Inspector: skipped {sum(skipped.values())} line(s): {shown}")
    return pl.DataFrame(rows, schema=INSPECTOR, strict=False)


def _record(raw: bytes, file: str, skipped: Counter[str]) -> dict[str, Any] | None:
    if len(raw) > _MAX_LINE:
        skipped["line longer than any record"] += 1
        return None
    try:
        doc = json.loads(raw)
    except (ValueError, UnicodeDecodeError, RecursionError):
        skipped["not JSON (cut mid-line?)"] += 1
        return None
    if not isinstance(doc, dict) or not isinstance(doc.get("header"), dict) or not isinstance(doc.get("metadata"),
                                                                                                 dict):
        skipped["no header/metadata"] += 1
        return None
    head, meta = doc["header"], doc["metadata"]
    kind = "coll" if isinstance(doc.get("coll_perf"), dict) else "p2p" if isinstance(doc.get("p2p_perf"), dict) \
        else None
    if kind is None:
        skipped["no coll_perf/p2p_perf"] += 1
        return None
    perf = doc[f"{kind}_perf"]
    name = perf.get(kind)
    trace = doc.get("event_trace_ts")
    trace = trace if isinstance(trace, dict) else {}
    return {
        "file": file, "host": _text(meta.get("hostname")), "pid": _int(meta.get("pid")),
        "comm_id": _text(head.get("id")), "comm_name": _text(head.get("comm_name")),
        "comm_rank": _int(head.get("rank"), 1 << 24), "n_ranks": _int(head.get("n_ranks"), 1 << 24),
        "n_nodes": _int(head.get("nnodes"), 1 << 24), "kind": kind,
        "op": _OPS.get(str(name).lower(), str(name)[:40].lower()) if name is not None else None,
        "sn": _int(perf.get(f"{kind}_sn")), "peer": _int(perf.get("p2p_peer"), 1 << 24),
        "bytes": _int(perf.get(f"{kind}_msg_size_bytes")), "exec_us": _float(perf.get(f"{kind}_exec_time_us")),
        "timing_source": _text(perf.get(f"{kind}_timing_source")),
        "algbw_gbps": _float(perf.get(f"{kind}_algobw_gbs")), "busbw_gbps": _float(perf.get(f"{kind}_busbw_gbs")),
        "start_us": _int(trace.get(f"{kind}_start_ts")),
        "version": _text(meta.get("inspector_output_format_version")),
    }


def _text(value: Any) -> str | None:
    return str(value)[:200] if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _int(value: Any, high: int = 1 << 63) -> int | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    if isinstance(value, float) and not value.is_integer():
        return None
    number = int(value)
    return number if 0 <= number < high else None


def _float(value: Any) -> float | None:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    number = float(value)
    return number if number == number and abs(number) != float("inf") and number >= 0 else None
