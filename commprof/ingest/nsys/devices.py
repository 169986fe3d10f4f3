"""The device side of an nsys export: kernels and memory operations with the CPU call that launched each.

One query per table, the launching runtime call joined in SQL (``correlationId`` within the process:
``globalTid >> 24`` is ``globalPid >> 24``), rows fetched a batch at a time into numpy columns, names
kept as ``StringIds`` ids until the end: memory is a few dozen bytes a row, not the rows' text.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from commprof.ingest.nsys.db import Export

KERNEL, MEMCPY, MEMSET = 0, 1, 2
# ENUM_CUDA_MEMCPY_OPER, as the schema reference lists it (0 UNKNOWN ... 13 UVM_DTOD)
COPY_KINDS = ("Unknown", "HtoD", "DtoH", "HtoA", "AtoH", "AtoA", "AtoD", "DtoA", "DtoD", "HtoH", "PtoP",
              "HtoD (UVM)", "DtoH (UVM)", "DtoD (UVM)")
COLUMNS = ("start", "end", "device", "stream", "corr", "name_id", "table", "bytes", "launch", "tid")


@dataclass
class DeviceRows:
    cols: dict[str, npt.NDArray[np.int64]]
    names: dict[int, str]  # StringIds id -> text, only for the ids the kernels use
    missing: list[str]  # tables/columns the export lacks that this reader would have read

    def __len__(self) -> int:
        return int(self.cols["start"].size)


def _runtime_join(ex: Export, table: str) -> tuple[str, str]:
    """The launch of each device row: the first runtime call of its correlation id in its process (an export
    can hold the runtime call and its internal twin, ``cudaLaunchKernel`` and ``cudaLaunchKernel_v7000``)."""
    rt = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not (ex.has(rt, "correlationId") and ex.has(rt, "globalTid") and ex.has(rt, "start")):
        return "NULL, NULL", ""
    per_process = ex.has(table, "globalPid")
    key = "correlationId, globalTid >> 24" if per_process else "correlationId"
    on = "r.corr = d.correlationId" + (" AND r.proc = (d.globalPid >> 24)" if per_process else "")
    return ("r.start, r.globalTid",
            f"LEFT JOIN (SELECT correlationId AS corr, globalTid >> 24 AS proc, MIN(start) AS start, globalTid "
            f"FROM {rt} GROUP BY {key}) r ON {on}")


def _query(ex: Export, table: str, code: int) -> str | None:
    needed = ("start", "end", "deviceId", "streamId")
    if not all(ex.has(table, c) for c in needed):
        return None
    launch, join = _runtime_join(ex, table)
    if code == KERNEL:
        name_col = "demangledName" if ex.has(table, "demangledName") else "shortName"
        name = f"d.{name_col}" if ex.has(table, name_col) else "-1"
        extra = f"{name}, NULL"  # name_id: the kernel's StringIds id
    elif code == MEMCPY:
        # name_id of a memcpy row: its copyKind (the name is "Memcpy <kind>")
        extra = f"{'d.copyKind' if ex.has(table, 'copyKind') else '0'}, {ex.col(table, 'bytes', 'bytes', 'd.')}"
    else:
        extra = f"-1, {ex.col(table, 'bytes', 'bytes', 'd.')}"
    corr = "d.correlationId" if ex.has(table, "correlationId") else "NULL"
    exprs = ", ".join(f"IFNULL({e}, {NULL_INT})" for e in
                      ("d.start", "d.end", "d.deviceId", "d.streamId", corr, *_split(extra), *_split(launch)))
    return f"SELECT {exprs} FROM {table} d {join} WHERE d.start IS NOT NULL AND d.end IS NOT NULL"


def _split(exprs: str) -> list[str]:
    return [e.strip().split(" AS ")[0] for e in exprs.split(",")]


def read_devices(ex: Export) -> DeviceRows:
    parts: dict[str, list[npt.NDArray[np.int64]]] = {c: [] for c in COLUMNS}
    missing = []
    for table, code in (("CUPTI_ACTIVITY_KIND_KERNEL", KERNEL), ("CUPTI_ACTIVITY_KIND_MEMCPY", MEMCPY),
                        ("CUPTI_ACTIVITY_KIND_MEMSET", MEMSET)):
        sql = _query(ex, table, code) if ex.has(table) else None
        if sql is None:
            if ex.has(table):
                missing.append(f"{table} (no start/end/deviceId/streamId)")
            continue
        for batch in ex.rows(sql):
            try:  # the common case: every value an integer or NULL (IFNULL'd in the query)
                arr = np.array(batch, dtype=np.int64).reshape(len(batch), 9)
            except (TypeError, ValueError, OverflowError):  # text or reals where integers belong
                arr = np.array([[_int(v) for v in row] for row in batch], dtype=np.int64).reshape(len(batch), 9)
            for i, c in enumerate(("start", "end", "device", "stream", "corr", "name_id", "bytes", "launch", "tid")):
                parts[c].append(arr[:, i])
            parts["table"].append(np.full(len(batch), code, dtype=np.int64))
    cols = {c: np.concatenate(v) if v else np.zeros(0, dtype=np.int64) for c, v in parts.items()}
    if not ex.has("CUPTI_ACTIVITY_KIND_RUNTIME"):
        missing.append("CUPTI_ACTIVITY_KIND_RUNTIME (no launch times)")
    return DeviceRows(cols, _kernel_names(ex, cols), missing)


NULL_INT = -(1 << 62)  # a NULL column value in the int64 arrays (an SQL integer literal, unlike -2**63)


def _int(value: object) -> int:
    return value if type(value) is int else NULL_INT


def _kernel_names(ex: Export, cols: dict[str, npt.NDArray[np.int64]]) -> dict[int, str]:
    ids = np.unique(cols["name_id"][cols["table"] == KERNEL])
    ids = ids[ids >= 0]
    if not ex.has("StringIds", "id") or not ids.size:
        return {}
    out: dict[int, str] = {}
    for lo in range(0, ids.size, 500):  # bound the SQL parameter count
        chunk = ids[lo:lo + 500].tolist()
        out.update({int(i): str(v) for i, v in ex.all(
            f"SELECT id, value FROM StringIds WHERE id IN ({','.join('?' * len(chunk))})", chunk)})
    return out
