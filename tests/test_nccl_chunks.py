"""COLL lines are parsed by polars a chunk at a time in a worker thread: the chunk size must not
change anything read (tables, counts, warnings), down to chunks of one row."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from concurrent.futures import Future
from pathlib import Path
from typing import Any

import polars as pl
import pytest

from commprof.ingest.nccl_logs import build_tables, parse_nccl_logs
from commprof.ingest.nccl_logs import parser as nccl_parser

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
LOGS = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and ("." not in p.name or p.suffix == ".log"))
P = "node01:1234:1235 [0] NCCL INFO "
Q = "node01:1234:1299 [0] NCCL INFO "  # a second thread: its first COLL line goes the slow way
COLL = "AllReduce: opCount {} sendbuff 0x1 recvbuff 0x2 count {} datatype 7 op 0 root 0 comm 0x55d1 [nranks=4] stream 9"
ODD = (
    [P + "ncclCommInitRank comm 0x55d1 rank 0 nranks 4 cudaDev 0 busId 1000 commId 0xabc - Init COMPLETE"]
    + [P + COLL.format(i, 256) for i in range(5)]
    + [Q + COLL.format(9, 64), P + COLL.format(5, "x1")]  # the second: a garbled count (dropped, malformed)
    + [(Q if i % 3 else P) + COLL.format(i, 128) for i in range(6, 20)]
    + [P + "AllReduce: opCount 20 sendbuff 0x1 recvbuff  0x2 count 8 datatype 7 op 0 root 0 comm 0x55d1 [nranks=4] "
       "stream 0x9"]  # two spaces: the regex path
)


class _AtOnce:
    """An executor that runs the work when it is handed over, so a list changed after hand-over
    (a stale reference in the hot loop) shows as lost rows instead of depending on thread timing."""

    def __init__(self, **_: Any) -> None:
        pass

    def submit(self, fn: Callable[..., Any], *args: Any) -> Future[Any]:
        future: Future[Any] = Future()
        future.set_result(fn(*[list(a) for a in args]))
        return future

    def shutdown(self) -> None:
        pass


def _read(paths: list[Path], chunk_rows: int, monkeypatch: pytest.MonkeyPatch) -> tuple[Any, ...]:
    monkeypatch.setattr(nccl_parser, "COLL_CHUNK_ROWS", chunk_rows)
    monkeypatch.setattr(nccl_parser, "ThreadPoolExecutor", _AtOnce)
    logs = parse_nccl_logs(paths)
    frames = {k: v for k, v in vars(build_tables(logs)).items() if isinstance(v, pl.DataFrame)}
    return dataclasses.asdict(logs.stats), [dataclasses.asdict(w) for w in logs.warns], frames


@pytest.mark.parametrize("chunk_rows", [1, 2, 3, 7, 25])
def test_chunk_size_changes_nothing(chunk_rows: int, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    odd = tmp_path / "odd.log"
    odd.write_text("\n".join(ODD) + "\n")
    paths = [*LOGS, odd]
    whole = _read(paths, 10**9, monkeypatch)
    chunked = _read(paths, chunk_rows, monkeypatch)
    assert whole[2]["nccl_colls"].height > 50  # many chunks at these sizes
    assert chunked[0] == whole[0]
    assert chunked[1] == whole[1]
    for name, frame in whole[2].items():
        assert chunked[2][name].equals(frame, null_equal=True), name
