"""NVTX ranges of an nsys export that commprof reads: NCCL's API ranges (op, size, communicator, peer) and
the ranges that mark training steps. SQL picks the rows (domain, event type, a LIKE on the name); Python
only confirms the few it returns.

NCCL's ranges live in the domain named "NCCL" (the ``eventType = 75`` row holding the domain's name).
Legacy tracing names them ``ncclAllReduce``, ``ncclCommInitRank``, ...; nsys's advanced NCCL tracing
drops the prefix (``AllReduce``) and, with ``--include-json true``, puts the metadata in ``jsonText``.
The legacy binary payload (comm hash, bytes, op; NCCL >= 2.25) is read from the
``DYNAMIC_NVTXPAYLOAD_DATATYPE_*`` tables that ``nsys export --dynamic-tables=all`` writes, keyed by
``eventId``; an export without either has names and times only, and the reader says so.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from commprof.ingest.nsys.db import Export

PUSH_POP, START_END, THREAD_NAME, DOMAIN_CREATE = 59, 60, 39, 75
# the API calls that are collectives or point-to-point, by their name without the "nccl" prefix
NCCL_OPS = {
    "allreduce": "all_reduce", "allgather": "all_gather", "allgatherv": "all_gather",
    "reducescatter": "reduce_scatter", "broadcast": "broadcast", "bcast": "broadcast", "reduce": "reduce",
    "send": "send", "recv": "recv", "alltoall": "all_to_all", "alltoallv": "all_to_all", "gather": "gather",
    "scatter": "scatter",
}
COMM_INIT = frozenset({"comminitrank", "comminitrankconfig", "comminitrankscalable", "commsplit", "commshrink",
                       "commgrow", "comminit"})
DEFAULT_STEP = re.compile(
    r"^(?:ProfilerStep#(?P<n1>\d+)|(?:train(?:ing)?[ _-]?)?(?:step|iteration|iter)(?:[ _#:-]*(?P<n2>\d+))?)$",
    re.IGNORECASE)
_SEPARATED_NUMBER = r"(?:[ _#:-]*(?P<n>\d+))?"
_MPI_RANK = re.compile(r"^MPI Rank (\d+)$")
# payload fields, under the names NCCL's schemas, nsys's composite tables and JSON metadata use
_COMM_KEYS = ("comm", "commHash", "newcomm", "commhash")
_BYTES_KEYS = ("bytes", "msgSize", "messageSize", "Message size [bytes]")
_INT = re.compile(r"^-?(?:0x[0-9a-fA-F]+|\d+)$")


@dataclass
class NcclRange:
    start: int
    end: int
    tid: int  # globalTid
    api: str  # lowercased name without the "nccl" prefix
    op: str | None  # the collective, None for communicator management
    comm: str | None = None  # communicator hash, hex
    bytes: int | None = None
    count: int | None = None
    dtype: str | None = None
    peer: int | None = None
    nranks: int | None = None
    myrank: int | None = None
    seq: int | None = None


@dataclass
class NvtxFacts:
    nccl: list[NcclRange]
    steps: list[tuple[int, int, int, int | None]]  # start, end, globalTid, the step number its name holds
    mpi_rank: int | None
    payloads: int  # NCCL ranges whose payload was read
    domains: dict[int, str]


def _name_sql(ex: Export) -> tuple[str, str]:
    """The range name as one SQL expression (``text``, else the registered string of ``textId``)."""
    if ex.has("NVTX_EVENTS", "textId") and ex.has("StringIds"):
        return "COALESCE(n.text, s.value)", "LEFT JOIN StringIds s ON s.id = n.textId"
    return "n.text", ""


def step_pattern(step_range: str | None) -> re.Pattern[str]:
    """The step ranges: ``step_range`` (a user's name, alone or followed by a step number: "train_batch",
    "train_batch 12", "train_batch#12"; any case, as SQL's LIKE), else ProfilerStep#N and common loop names."""
    if step_range is None:
        return DEFAULT_STEP
    return re.compile(f"^{re.escape(step_range)}{_SEPARATED_NUMBER}$", re.IGNORECASE)


def _step_like(name: str, step_range: str | None) -> tuple[str, list[str]]:
    """The SQL condition that keeps the rows that may be step ranges (the pattern confirms them)."""
    if step_range is None:
        return f"{name} LIKE '%step%' OR {name} LIKE '%iter%'", []
    escaped = step_range.replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_")
    return f"{name} LIKE ? ESCAPE '\\'", [escaped + "%"]


def read_nvtx(ex: Export, step_range: str | None = None) -> NvtxFacts:
    """NCCL's ranges and the step ranges (named ``step_range``, else the defaults: see step_pattern)."""
    if not ex.has("NVTX_EVENTS", "eventType"):
        return NvtxFacts([], [], None, 0, {})
    domains = {int(d): str(t) for d, t in ex.all(
        f"SELECT domainId, text FROM NVTX_EVENTS WHERE eventType = {DOMAIN_CREATE} AND domainId IS NOT NULL "
        "AND text IS NOT NULL")} if ex.has("NVTX_EVENTS", "domainId") else {}
    nccl_ids = sorted(d for d, name in domains.items() if name.upper() == "NCCL")
    name, join = _name_sql(ex)
    key = "n.eventId" if ex.has("NVTX_EVENTS", "eventId") else "n.rowid"
    json_col = ex.col("NVTX_EVENTS", "jsonText", "json", "n.")
    steps_like, params = _step_like(name, step_range)
    is_step = step_pattern(step_range)
    in_nccl = f"n.domainId IN ({','.join(map(str, nccl_ids))})" if nccl_ids else "0"
    # legacy NCCL ranges in a default domain (no domain row kept) still start with "nccl"
    sql = (f"SELECT n.start, n.end, n.globalTid, {name} AS name, {in_nccl} AS is_nccl, {json_col}, {key} "
           f"FROM NVTX_EVENTS n {join} WHERE n.eventType IN ({PUSH_POP}, {START_END}) AND n.end IS NOT NULL "
           f"AND ({in_nccl} OR {name} LIKE 'nccl%' OR {steps_like})")
    payload_rows = _dynamic_payloads(ex)
    nccl: list[NcclRange] = []
    steps: list[tuple[int, int, int, int | None]] = []
    payloads = 0
    for batch in ex.rows(sql, params):
        for start, end, tid, text, is_nccl, js, event_id in batch:
            if not isinstance(text, str) or not isinstance(start, int) or not isinstance(end, int):
                continue
            if step := is_step.match(text):
                number = next((g for g in step.groups() if g is not None), None)
                steps.append((start, end, int(tid or 0), int(number) if number is not None else None))
                continue
            api = text.removeprefix("nccl").lower() if (is_nccl or text.startswith("nccl")) else None
            if api is None or (api not in NCCL_OPS and api not in COMM_INIT):
                continue
            rng = NcclRange(start, end, int(tid or 0), api, NCCL_OPS.get(api))
            fields = {**payload_rows.get(int(event_id), {}), **_json_fields(js)} if event_id is not None \
                else _json_fields(js)
            if fields:
                payloads += 1
                _apply(rng, fields)
            nccl.append(rng)
    return NvtxFacts(nccl, steps, _mpi_rank(ex, name, join), payloads, domains)


def _json_fields(text: Any) -> dict[str, Any]:
    if not isinstance(text, str) or not text.startswith("{"):
        return {}
    try:
        data = json.loads(text)
    except (ValueError, RecursionError):
        return {}
    return data if isinstance(data, dict) else {}


def _dynamic_payloads(ex: Export) -> dict[int, dict[str, Any]]:
    """``eventId`` -> payload fields, from the tables ``--dynamic-tables=all`` writes (NCCL's schemas are
    small: a few fields per call, so this is bounded by the number of NCCL calls)."""
    out: dict[int, dict[str, Any]] = {}
    for table, cols in ex.columns.items():
        if not table.startswith("DYNAMIC_NVTXPAYLOAD_DATATYPE_") or "eventId" not in cols:
            continue
        names = sorted(cols)
        for batch in ex.rows(f"SELECT {', '.join(names)} FROM {table}"):
            for row in batch:
                rec = dict(zip(names, row, strict=True))
                if isinstance(rec.get("eventId"), int):
                    out.setdefault(rec["eventId"], {}).update(rec)
    return out


def _as_int(value: Any) -> int | None:
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and _INT.match(value.strip()):
        return int(value.strip(), 0)
    return None


def _apply(rng: NcclRange, fields: dict[str, Any]) -> None:
    comm = next((_as_int(fields[k]) for k in _COMM_KEYS if k in fields), None)
    rng.comm = f"{comm & ((1 << 64) - 1):#x}" if comm is not None else None
    rng.bytes = next((b for b in (_as_int(fields.get(k)) for k in _BYTES_KEYS) if b is not None and b >= 0), None)
    rng.count = _as_int(fields.get("count"))
    dtype = fields.get("dataType", fields.get("datatype"))
    rng.dtype = str(dtype) if dtype is not None else None
    rng.peer = _as_int(fields.get("peer"))
    rng.nranks = _as_int(fields.get("nranks", fields.get("nRanks")))
    rng.myrank = _as_int(fields.get("myrank", fields.get("rank", fields.get("commRank"))))
    rng.seq = _as_int(fields.get("seqNumber"))


def _mpi_rank(ex: Export, name: str, join: str) -> int | None:
    """The MPI rank nsys recorded: the ``MPI_RANKS`` table (MPI tracing), else the "MPI Rank N" thread name."""
    if ex.has("MPI_RANKS", "rank"):
        ranks = {r for (r,) in ex.all("SELECT DISTINCT rank FROM MPI_RANKS") if isinstance(r, int)}
        if len(ranks) == 1:
            return ranks.pop()
    found = {int(m.group(1)) for (text,) in ex.all(
        f"SELECT {name} FROM NVTX_EVENTS n {join} WHERE n.eventType = {THREAD_NAME} AND {name} LIKE 'MPI Rank %'")
        if isinstance(text, str) and (m := _MPI_RANK.match(text))}
    return found.pop() if len(found) == 1 else None
