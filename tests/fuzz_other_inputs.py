"""Hostile versions of the inputs other than Kineto traces and NCCL logs, for tests/fuzzlib.py: nsys SQLite
exports (cut short, bytes overwritten, a table dropped, a column's values replaced by text, NULL or huge
numbers), Flight Recorder pickles (cut short, bytes overwritten, a class named, values of the wrong type)
and NCCL Inspector logs (lines cut, keys dropped, values of the wrong type). Each goes through
``commprof analyze`` and must keep the promise: exit 0/1/2, no traceback, no hang."""

from __future__ import annotations

import json
import os
import pickle
import sqlite3
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

FIXTURES = Path(__file__).parent / "fixtures"
NSYS_SQL = FIXTURES / "nsys" / "schema2_nccl_generations.sql"
INSPECTOR_LOG = FIXTURES / "inspector" / "h1-pid100.log"
WEIRD = st.sampled_from([None, "x", "", -1, 1 << 70, 1.5e308, float("nan"), [], {}, [[1, "a"]], True, "[0, 1"])


class _Named:
    """Pickles as a call of os.system: loading it must refuse before anything runs."""

    def __reduce__(self) -> tuple[Any, ...]:
        return (os.system, ("touch /tmp/commprof-fuzz-pickle-ran",))


def nsys_export(folder: Path) -> Path:
    path = folder / "rank0.sqlite"
    path.unlink(missing_ok=True)
    con = sqlite3.connect(path)
    con.executescript(NSYS_SQL.read_text())
    con.commit()
    con.close()
    return path


@st.composite
def nsys_mutant(draw: st.DrawFn) -> tuple[str, Any]:
    kind = draw(st.sampled_from(["cut", "bytes", "drop", "column"]))
    if kind == "cut":
        return kind, draw(st.floats(0.0, 0.99))
    if kind == "bytes":
        return kind, draw(st.lists(st.tuples(st.floats(0.0, 0.999), st.binary(min_size=1, max_size=8)),
                                   min_size=1, max_size=6))
    tables = ["CUPTI_ACTIVITY_KIND_KERNEL", "CUPTI_ACTIVITY_KIND_RUNTIME", "NVTX_EVENTS", "StringIds",
              "CUPTI_ACTIVITY_KIND_MEMCPY", "TARGET_INFO_SESSION_START_TIME", "EXPORT_META_DATA"]
    if kind == "drop":
        return kind, draw(st.sampled_from(tables))
    columns = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid", "globalTid", "demangledName",
               "textId", "text", "eventType", "value", "utcEpochNs", "copyKind", "id"]
    return kind, (draw(st.sampled_from(tables)), draw(st.sampled_from(columns)), draw(WEIRD))


def apply_nsys(path: Path, mutant: tuple[str, Any]) -> None:
    kind, arg = mutant
    if kind in ("cut", "bytes"):
        data = bytearray(path.read_bytes())
        if kind == "cut":
            data = data[: int(len(data) * arg)]
        else:
            for where, chunk in arg:
                at = int(len(data) * where)
                data[at:at + len(chunk)] = chunk
        path.write_bytes(bytes(data))
        return
    con = sqlite3.connect(path)
    try:
        if kind == "drop":
            con.execute(f"DROP TABLE IF EXISTS {arg}")
        else:
            table, column, value = arg
            cols = {r[1] for r in con.execute(f"PRAGMA table_info({table})")}
            if column in cols:
                value = json.dumps(value) if isinstance(value, (list, dict)) else value
                value = str(value) if isinstance(value, int) and abs(value) >= 1 << 63 else value
                try:
                    con.execute(f"UPDATE {table} SET {column} = ?", (value,))
                except sqlite3.IntegrityError:
                    pass  # a NOT NULL column: this mutant leaves it as it was
        con.commit()
    finally:
        con.close()


@st.composite
def pickle_mutant(draw: st.DrawFn) -> bytes:
    entry = {"record_id": draw(WEIRD), "process_group": draw(st.sampled_from([("7", "TP"), ["7"], "7", None, ()])),
             "collective_seq_id": draw(st.one_of(st.integers(-5, 1 << 64), WEIRD)), "profiling_name": draw(WEIRD),
             "state": draw(WEIRD), "input_sizes": draw(WEIRD), "input_dtypes": draw(WEIRD),
             "time_created_ns": draw(st.one_of(st.integers(), WEIRD)), "duration_ms": draw(WEIRD),
             "is_p2p": draw(WEIRD)}
    doc: Any = {"version": draw(WEIRD), "pg_config": draw(st.sampled_from(
        [{"7": {"name": "7", "desc": "TP", "ranks": draw(WEIRD)}}, [], None])), "entries": [entry] * draw(
        st.integers(0, 3))}
    if draw(st.booleans()):
        doc["entries"].append(_Named())
    data = pickle.dumps(doc, protocol=draw(st.integers(2, 5)))
    cut = draw(st.floats(0.05, 1.0))
    return data[: max(2, int(len(data) * cut))]


@st.composite
def inspector_mutant(draw: st.DrawFn) -> bytes:
    lines = INSPECTOR_LOG.read_bytes().splitlines()[:3]
    out = []
    for line in lines:
        doc = json.loads(line)
        how = draw(st.sampled_from(["keep", "cut", "drop", "weird"]))
        if how == "cut":
            out.append(line[: draw(st.integers(0, len(line)))])
            continue
        part = draw(st.sampled_from(["header", "metadata", "coll_perf"]))
        if how == "drop":
            doc.pop(part, None)
        elif how == "weird":
            key = draw(st.sampled_from(sorted(doc[part]) or ["x"])) if isinstance(doc.get(part), dict) else "x"
            doc[part] = {**doc[part], key: draw(WEIRD)} if isinstance(doc.get(part), dict) else draw(WEIRD)
        out.append(json.dumps(doc).encode())
    return b"\n".join(out) + b"\n"


PLUGIN_TRACE = FIXTURES / "nccl_profiler" / "prof_14627581913227093503_0.json"


@st.composite
def plugin_mutant(draw: st.DrawFn) -> bytes:
    lines = PLUGIN_TRACE.read_bytes().splitlines()
    out = []
    for line in lines:
        how = draw(st.sampled_from(["keep", "keep", "cut", "weird"]))
        if how == "cut":
            out.append(line[: draw(st.integers(0, len(line)))])
        elif how == "weird":
            value = json.dumps(draw(WEIRD)).encode()
            out.append(line.replace(b'"RING"', value).replace(b"262144", value).replace(b"14627581913227093503", value))
        else:
            out.append(line)
    return b"\n".join(out)
