"""A run's collectives written as NCCL Inspector logs (``raw/inspector/<host>-pid<pid>.log``, one per rank,
format v4.0): one ``coll_perf`` (or ``p2p_perf``) record per call, its execution time the kernel's duration
(kernel_gpu timing), its size as NCCL counts it (all-gather and reduce-scatter: one rank's part) and the
plugin's algbw/busbw computed as the plugin does. Read back through the Inspector reader, the calls,
sizes and times must be the ones written (tests/test_inspector.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import polars as pl

from commprof.ingest.tables import RunTables
from commprof.synth.nsys import comm_hash

_COLL = {"all_reduce": "AllReduce", "all_gather": "AllGather", "reduce_scatter": "ReduceScatter",
         "broadcast": "Broadcast", "reduce": "Reduce"}
_P2P = {"send": "Send", "recv": "Recv"}
def _bus_factor(op: str, n: int) -> float:
    """The plugin's factor (inspectorComputeOpBw, nccl-tests' convention)."""
    if op == "all_reduce":
        return 2 * (n - 1) / n
    return (n - 1) / n if op in ("all_gather", "reduce_scatter") else 1.0


def write_logs(tables: RunTables, folder: Path) -> list[Path]:
    folder.mkdir(parents=True, exist_ok=True)
    groups = {pg: sorted(r) for pg, r in tables.process_groups.select("pg", "ranks").iter_rows()}
    hosts = dict(tables.ranks.select("rank", "host").iter_rows())
    nodes = {pg: len({hosts.get(r) for r in ranks}) for pg, ranks in groups.items()}
    out = []
    for info in tables.ranks.iter_rows(named=True):
        rank = info["rank"]
        path = folder / f"{info['host'] or 'host'}-pid{info['pid'] or 1000 + rank}.log"
        sn: dict[tuple[str, str], int] = {}
        lines = []
        for pg, op, size, start, end, peer in tables.collectives.filter(pl.col("rank") == rank).select(
                "pg", "op", "bytes", "start_ns", "end_ns", "peer").iter_rows():
            if pg not in groups or size is None or (op not in _COLL and op not in _P2P):
                continue
            members = groups[pg]
            lines.append(json.dumps(_record(info, pg, op, size, end - start, peer, members, nodes[pg], sn),
                                    separators=(",", ":")))
        path.write_text("\n".join(lines) + ("\n" if lines else ""))
        out.append(path)
    return out


def _record(info: dict[str, Any], pg: str, op: str, size: int, dur_ns: int, peer: int | None,
            members: list[int], nnodes: int, sn: dict[tuple[str, str], int]) -> dict[str, Any]:
    n = len(members)
    sn[(pg, op)] = sn.get((pg, op), 0) + 1
    exec_us = max(1, round(dur_ns / 1000))
    part = size // n if op in ("all_gather", "reduce_scatter") else size
    algbw = size / (exec_us * 1000)
    head = {"id": f"{comm_hash(pg):#x}", "rank": members.index(info["rank"]), "n_ranks": n, "nnodes": nnodes}
    meta = {"inspector_output_format_version": "v4.0", "git_rev": "", "rec_mechanism": "nccl_profiler_interface",
            "dump_timestamp_us": 0, "hostname": info["host"], "pid": info["pid"]}
    kind = "coll" if op in _COLL else "p2p"
    perf: dict[str, Any] = {kind: (_COLL | _P2P)[op], f"{kind}_sn": sn[(pg, op)], f"{kind}_msg_size_bytes": part,
                            f"{kind}_exec_time_us": exec_us, f"{kind}_timing_source": "kernel_gpu",
                            f"{kind}_algobw_gbs": algbw, f"{kind}_busbw_gbs": algbw * _bus_factor(op, n)}
    if kind == "p2p":
        perf["p2p_peer"] = peer
    return {"header": head, "metadata": meta, f"{kind}_perf": perf}
