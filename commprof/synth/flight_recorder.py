"""Flight Recorder dumps of a synthetic run (``raw/flight_recorder/rank-N.json``), as torch writes them
with ``TORCH_NCCL_TRACE_BUFFER_SIZE`` set and ``TORCH_NCCL_DUMP_ON_TIMEOUT``: per rank, the last
``BUFFER`` collective and point-to-point entries of its ring buffer, oldest first."""

from __future__ import annotations

from typing import Any

from commprof.synth.config import SynthConfig
from commprof.synth.engine import Timeline
from commprof.synth.groups import Group
from commprof.synth.kineto import EPOCH_NS

BUFFER = 200
ELEM_BYTES = {"BFloat16": 2, "Float": 4, "Half": 2}
FR_VERSION = "2.4"


def _sizes(op: str, nbytes: int, n: int, dtype: str) -> tuple[list[list[int]], list[list[int]]]:
    nelems = nbytes // ELEM_BYTES.get(dtype, 2)
    if op == "all_gather":
        return [[max(nelems // n, 1)]], [[nelems]]
    if op == "reduce_scatter":
        return [[nelems]], [[max(nelems // n, 1)]]
    return [[nelems]], [[nelems]]


def dump(cfg: SynthConfig, groups: list[Group], line: Timeline) -> dict[str, Any]:
    comm = sorted((a for a in line.activities if a.kind == "comm" and a.call is not None), key=lambda a: a.start)
    entries = []
    p2p_seq = 0
    for record_id, a in enumerate(comm):
        call = a.call
        assert call is not None
        p2p = call.op in ("send", "recv")
        p2p_seq += p2p
        ins, outs = _sizes(call.op, call.nbytes, len(call.ranks), call.dtype)
        entries.append({
            "record_id": record_id, "pg_id": int(call.pg), "process_group": [call.pg, call.desc],
            "collective_seq_id": 0 if p2p else call.seq, "p2p_seq_id": p2p_seq if p2p else 0, "op_id": record_id,
            "profiling_name": f"nccl:{call.op}", "time_created_ns": EPOCH_NS + a.start - 20_000,
            "input_sizes": ins, "input_dtypes": [call.dtype], "output_sizes": outs, "output_dtypes": [call.dtype],
            "state": "completed", "time_discovered_started_ns": EPOCH_NS + a.start,
            "time_discovered_completed_ns": EPOCH_NS + a.end, "retired": True, "timeout_ms": 600_000,
            "is_p2p": p2p, "duration_ms": round((a.end - a.start) / 1e6, 6),
        })
    pgs = {g.name: {"name": g.desc, "desc": g.desc, "ranks": str(list(g.ranks))}
           for g in groups if line.rank in g.ranks}
    return {"version": FR_VERSION, "rank": line.rank, "pg_config": pgs, "pg_status": {},
            "entries": entries[-BUFFER:]}
