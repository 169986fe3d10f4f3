"""NCCL example profiler plugin output -> one row per collective (COLL begin event).

The plugin writes ``<prefix>_<commHash>_<rank>.json`` (NCCL >= 2.27; ``<prefix>-<host>-<tid>.txt`` before) at
communicator finalize: a JSON array, ``[`` then one event per line with a trailing comma, then ``{}]``. NCCL
2.28.3-2.29.2 print ``"datatype": ncclFloat32`` and ``"Stream": 0x...`` unquoted (invalid JSON), and a file
cut by a killed process has no end. So the file is read one line at a time, each line repaired where the
plugin is known to break it; a line still unreadable is skipped and counted.

A COLL event's stop means "enqueued", not "done" (the plugin's API), so its duration is not a transfer
time and is not kept; ``ts`` is microseconds on the process's steady clock, not comparable across ranks.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any

import polars as pl

from commprof.ingest.common import names
from commprof.ingest.discover import regular_file_problem

PLUGIN_COLLS = pl.Schema({
    "file": pl.String(), "comm_hash": pl.String(), "rank": pl.Int32(), "seq": pl.Int64(), "op": pl.String(),
    "count": pl.Int64(), "dtype": pl.String(), "bytes": pl.Int64(), "algorithm": pl.String(),
    "protocol": pl.String(), "channels": pl.Int32(),
})
_UNQUOTED = re.compile(r'("(?:datatype|Datatype|Stream)"\s*:\s*)([A-Za-z_][A-Za-z0-9_]*|0x[0-9a-fA-F]+)(\s*[,}])')
_NCCL_DTYPE_BYTES = {"ncclint8": 1, "ncclchar": 1, "nccluint8": 1, "ncclint32": 4, "ncclint": 4, "nccluint32": 4,
                     "ncclint64": 8, "nccluint64": 8, "ncclfloat16": 2, "ncclhalf": 2, "ncclfloat32": 4,
                     "ncclfloat": 4, "ncclfloat64": 8, "nccldouble": 8, "ncclbfloat16": 2,
                     "ncclfloat8e4m3": 1, "ncclfloat8e5m2": 1}
_HEAD = 4096


def is_plugin_trace(path: Path) -> bool:
    """A file that opens as the plugin's event array (its first event carries a plugin category)."""
    if regular_file_problem(path):
        return False
    try:
        with path.open("rb") as fh:
            head = fh.read(_HEAD)
    except OSError:
        return False
    return head.lstrip().startswith(b"[") and b'"cat"' in head and (
        b'"GROUP' in head or b'"COLL' in head or b'"P2P' in head or b'"KERNEL_LAUNCH"' in head)


def find_traces(root: Path) -> list[Path]:
    if root.is_file():
        return [root] if is_plugin_trace(root) else []
    found: list[Path] = []
    for folder in (root, root / "raw" / "nccl_profiler", root / "nccl_profiler"):
        if folder.is_dir():
            found += [p for p in folder.iterdir()
                      if p.is_file() and p.suffix in (".json", ".txt") and is_plugin_trace(p)]
    return sorted(set(found))


def _event(line: str) -> dict[str, Any] | None:
    text = line.strip().rstrip(",").lstrip("[").rstrip("]").strip().rstrip(",")
    if not text or text == "{}":
        return None
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError):
        doc = json.loads(_UNQUOTED.sub(r'\1"\2"\3', text))  # ValueError again: the caller counts it
    return doc if isinstance(doc, dict) else None


def read_traces(paths: list[Path], warnings: list[str]) -> pl.DataFrame:
    rows: list[dict[str, Any]] = []
    skipped: Counter[str] = Counter()
    for path in paths:
        try:
            with path.open("r", encoding="utf-8", errors="replace") as fh:
                for line in fh:
                    if len(line) > 1 << 20:
                        skipped["a line longer than any event"] += 1
                        continue
                    try:
                        ev = _event(line)
                    except (ValueError, RecursionError):
                        skipped["not an event even after repair"] += 1
                        continue
                    if ev is not None and ev.get("cat") == "COLL" and ev.get("ph") == "b":
                        rows.append(_row(ev, path.name))
        except OSError as err:
            warnings.append(f"NCCL profiler plugin: {path.name}: read stopped ({err.strerror or err})")
    if skipped:
        shown = "; ".join(f"{n} × {why}" for why, n in skipped.most_common(2))
        warnings.append(f"NCCL profiler plugin: skipped {sum(skipped.values())} line(s): {shown}")
    return pl.DataFrame(rows, schema=PLUGIN_COLLS, strict=False)


def _int(value: Any, high: int = 1 << 63) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, str) and value.strip().isdigit():
        value = int(value.strip())
    return value if isinstance(value, int) and 0 <= value < high else None


def _text(value: Any) -> str | None:
    return str(value)[:60] if isinstance(value, (str, int)) and not isinstance(value, bool) else None


def _row(ev: dict[str, Any], file: str) -> dict[str, Any]:
    found = ev.get("args")
    args: dict[str, Any] = found if isinstance(found, dict) else {}
    comm = _int(args.get("CommHash"), 1 << 64)
    count = _int(args.get("Count"))
    dtype = _text(args.get("Datatype"))
    size = _NCCL_DTYPE_BYTES.get((dtype or "").lower())
    name = _text(ev.get("name"))
    return {
        "file": file, "comm_hash": f"{comm:#x}" if comm is not None else None,
        "rank": _int(args.get("Rank"), 1 << 24), "seq": _int(args.get("SeqNum")),
        "op": names.normalize_op(name) if name else None, "count": count, "dtype": dtype,
        "bytes": count * size if count is not None and size and count * size < 1 << 63 else None,
        "algorithm": _text(args.get("Algorithm")), "protocol": _text(args.get("Protocol")),
        "channels": _int(args.get("nChannels"), 1 << 16),
    }
