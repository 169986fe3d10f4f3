"""Pieces dense in COLL lines are read in bulk (``nccl_logs.bulk``): everything read — records, tables, counts,
warnings, line numbers, the parser's per-thread state — must be what the line loop reads, whatever the mix
of processes, threads, prefixes, odd lines, line breaks, chunk and piece boundaries."""

from __future__ import annotations

import dataclasses
import sys
from pathlib import Path
from typing import Any

import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from commprof.ingest.nccl_logs import build_tables, bulk, parse_nccl_logs, scan
from commprof.ingest.nccl_logs import parser as nccl_parser

FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
sys.path.insert(0, str(FIXTURES))

P = "node01:1234:1235 [0] NCCL INFO "
Q = "node01:1234:1299 [0] NCCL INFO "  # a second thread of the same process
R = "node02:777:777 [1] NCCL INFO "  # another process
ODD_PREFIXES = ["[rank3]:node01:1234:1235 [0] NCCL INFO ", "2026-12-04 10:00:0{} " + P, "pod-7 | " + R]
INITS = [
    P + "ncclCommInitRank comm 0x55d1 rank 0 nranks 4 cudaDev 0 busId 1000 commId 0xabc - Init START",
    P + "ncclCommInitRank comm 0x55d1 rank 0 nranks 4 cudaDev 0 busId 1000 commId 0xabc - Init COMPLETE",
    Q + "ncclCommInitRank comm 0x66e2 rank 1 nranks 2 cudaDev 0 busId 1000 commId 0xdef - Init START",
    R + "ncclCommInitRank comm 0x55d1 rank 1 nranks 4 cudaDev 1 busId 2000 commId 0xabc - Init COMPLETE",
    P + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read",
    R + "Channel 00/0 : 1[1] -> 0[0] via P2P/CUMEM/read",
    P + "Connected all rings",
]
COLL = "{op}: opCount {n} sendbuff 0x1 recvbuff 0x2 count {c} datatype 7 op 0 root 0 comm {ptr} [nranks=4] stream 0x9"
TUNINGS = [
    "{op}: 1048576 Bytes -> Algo Ring proto Simple channel{{Lo..Hi}}={{0..7}}",
    "1024 Bytes -> Algo 1 proto 2 time 12.500000",  # no op name: borrows the thread's last COLL op
    "{op}: 4096 Bytes -> Algo 4 proto 0 time 3.000000",
    "{op}: 12 Bytes -> Algo",  # malformed
]
ODD_COLLS = [
    "AllReduce: opCount zz sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x55d1 [nranks=4] stream 9",
    "AllReduce: opCount 1 sendbuff 0x1 recvbuff  0x2 count 8 datatype 7 op 0 root 0 comm 0x55d1 [nranks=4] stream 9",
    "AllReduce: opCount 12345678901234567 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x55d1",
    "AllReduce: opCount 5 sendbuff 0x1 recvbuff 0x2 count x1 datatype 7 op 0 root 0 comm 0x55d1 [nranks=4] stream 9",
    "Broadcast: opCount 7 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x55d1",  # no nranks
    "AllReduce: opCount 5 sendbuff 0x1 count 8 comm 0x55d1 NCCL INFO Init COMPLETE",  # glued
    "AllReduce opCount 5 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x55d1 [nranks=4] stream 9",
    "opCount 5 comm 0x55d1",
    "AllReduce: opCount 5 sendbuff 0x1 recvbuff 0x2 count 8 datatype 7 op 0 root 0 comm 0x77ff [nranks=4] stream 9",
]
OTHER = ["[rank3]: step 10 loss 2.3", "", "  ", "NCCL version 2.19.3+cuda12.3", "GPU 0: NVIDIA H100", "caf\xe9"]
BREAKS = ["\n", "\n", "\n", "\r\n", "\r"]


def _read(paths: list[Path], bulk_on: bool) -> tuple[Any, ...]:
    old = bulk.DENSE_PIECE_CHARS
    if not bulk_on:
        bulk.DENSE_PIECE_CHARS = 1 << 60
    try:
        logs = parse_nccl_logs(paths)
    finally:
        bulk.DENSE_PIECE_CHARS = old
    frames = {k: v for k, v in vars(build_tables(logs)).items() if isinstance(v, pl.DataFrame)}
    comms = [(c.index, c.touch, c.coll_touched, c.ptr, c.process.index) for c in logs.comms]
    procs = [
        (p.index, p.key, p.current.index if p.current else None, {t: c.index for t, c in p.current_by_tid.items()},
         dict(p.last_coll_by_tid))
        for p in logs.processes
    ]
    tuning = [(t.comm.index if t.comm else None, t.op, t.nbytes, t.algo, t.proto, t.time_us) for t in logs.tuning]
    return dataclasses.asdict(logs.stats), [dataclasses.asdict(w) for w in logs.warns], comms, procs, tuning, \
        logs.colls, frames


def _same(paths: list[Path]) -> None:
    new, old = _read(paths, True), _read(paths, False)
    for a, b, what in zip(new[:5], old[:5], ["stats", "warns", "comms", "processes", "tuning"], strict=True):
        assert a == b, what
    assert new[5].equals(old[5], null_equal=True), "colls"
    for name, frame in old[6].items():
        assert new[6][name].equals(frame, null_equal=True), name


@pytest.fixture
def small(monkeypatch: pytest.MonkeyPatch) -> None:
    """Bulk reading of everything: tiny pieces, runs and chunks, so that every boundary is crossed."""
    monkeypatch.setattr(bulk, "DENSE_PIECE_CHARS", 1)
    monkeypatch.setattr(bulk, "MIN_RUN", 2)
    monkeypatch.setattr(bulk, "MAX_KEY_SHARE", 1.0)
    monkeypatch.setattr(nccl_parser, "COLL_CHUNK_ROWS", 7)
    monkeypatch.setattr(nccl_parser, "BATCH_BYTES", 3000)
    monkeypatch.setattr(scan, "PIECE_BYTES", 1500)
    monkeypatch.setattr(scan, "DENSE_BYTES", 100_000)


@st.composite
def log_text(draw: st.DrawFn) -> str:
    out = [] if draw(st.booleans()) else list(INITS)
    n = 0
    for _ in range(draw(st.integers(0, 80))):
        kind = draw(st.sampled_from(["coll"] * 6 + ["tuning"] * 2 + ["init", "odd", "other", "prefix"]))
        head = draw(st.sampled_from([P, P, P, Q, R]))
        op = draw(st.sampled_from(["AllReduce", "AllGather", "ReduceScatter"]))
        if kind == "coll":
            ptr = draw(st.sampled_from(["0x55d1", "0x55d1", "0x66e2", "0x9999", "(nil)"]))
            line = head + COLL.format(op=op, n=format(n, "x"), c=draw(st.sampled_from([8, 256])), ptr=ptr)
            n += draw(st.integers(1, 300))
        elif kind == "tuning":
            line = head + draw(st.sampled_from(TUNINGS)).format(op=op)
        elif kind == "init":
            line = draw(st.sampled_from(INITS))
        elif kind == "odd":
            line = head + draw(st.sampled_from(ODD_COLLS))
        elif kind == "other":
            line = draw(st.sampled_from(OTHER))
        else:
            line = draw(st.sampled_from(ODD_PREFIXES)).format(n % 10) + COLL.format(op=op, n=n, c=8, ptr="0x55d1")
        out.append(line)
        if draw(st.integers(0, 3)) == 0:  # a run: the same line a few times, as a big log repeats itself
            out += [line] * draw(st.integers(1, 12))
    breaks = [draw(st.sampled_from(BREAKS)) for _ in out]
    text = "".join(line + brk for line, brk in zip(out, breaks, strict=True))
    return text[: len(text) - draw(st.integers(0, 2))] if draw(st.booleans()) else text


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(texts=st.lists(log_text(), min_size=1, max_size=3))
def test_bulk_reads_what_the_loop_reads(
    texts: list[str], small: None, tmp_path_factory: pytest.TempPathFactory
) -> None:
    folder = tmp_path_factory.mktemp("logs")
    paths = []
    for i, text in enumerate(texts):
        path = folder / f"rank{i}.log"
        path.write_bytes(text.encode())
        paths.append(path)
    _same(paths)


def _count_bulk(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls: list[int] = []
    real = nccl_parser.LogParser._bulk

    def counted(self: nccl_parser.LogParser, *args: Any) -> bool:
        calls.append(args[2] - args[1])
        return real(self, *args)

    monkeypatch.setattr(nccl_parser.LogParser, "_bulk", counted)
    return calls


def test_odd_bytes_and_cut_lines(small: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    calls = _count_bulk(monkeypatch)
    body = "".join(P + COLL.format(op="AllReduce", n=i, c=8, ptr="0x55d1") + "\n" for i in range(40))
    path = tmp_path / "odd.log"
    path.write_bytes(INITS[0].encode() + b"\n" + body.encode() + b"\xff\xfe" + body.encode() + body[:77].encode())
    _same([path])
    assert sum(calls) > 40


def test_threads_and_processes_interleaved(small: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """COLL runs of two threads and two processes mixed line by line, TUNING lines between, lazy connects."""
    calls = _count_bulk(monkeypatch)
    lines = list(INITS)
    for i in range(300):
        head = [P, Q, R, P][i % 4]
        lines.append(head + COLL.format(op="AllReduce", n=format(i, "x"), c=8, ptr=["0x55d1", "0x66e2"][i % 3 == 0]))
        if i % 5 == 0:
            lines.append(head + TUNINGS[1])
        if i == 150:
            lines.append(P + "ncclCommInitRank comm 0x9999 rank 0 nranks 4 cudaDev 0 busId 1 commId 0x1 - Init START")
            lines.append(P + "Channel 00/0 : 0[0] -> 1[1] via P2P/CUMEM/read")
    path = tmp_path / "mixed.log"
    path.write_text("\r\n".join(lines))
    _same([path])
    assert sum(calls) > 200


def test_generated_job_takes_the_bulk_path(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The 128-rank generator's job (TUNING lines between COLL lines, lazy connects): same reading, and the
    bulk path is what read its COLL lines."""
    import gen_128rank

    paths = gen_128rank.generate(tmp_path / "job", 15)
    calls = []
    real = nccl_parser.LogParser._bulk

    def counted(self: nccl_parser.LogParser, *args: Any) -> bool:
        calls.append(args[2] - args[1])
        return real(self, *args)

    monkeypatch.setattr(bulk, "DENSE_PIECE_CHARS", 1024)
    monkeypatch.setattr(bulk, "MAX_KEY_SHARE", 1.0)
    monkeypatch.setattr(bulk, "MIN_RUN", 32)  # 15 steps: runs shorter than the default's
    monkeypatch.setattr(nccl_parser.LogParser, "_bulk", counted)
    monkeypatch.setattr(nccl_parser, "COLL_CHUNK_ROWS", 997)
    _same(paths)
    assert sum(calls) > 1000


@pytest.mark.parametrize("chunk_rows", [1, 5, 25_000])
def test_fixtures_in_bulk(chunk_rows: int, small: None, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(nccl_parser, "COLL_CHUNK_ROWS", chunk_rows)
    logs = sorted(p for p in FIXTURES.rglob("*") if p.is_file() and ("." not in p.name or p.suffix == ".log"))
    _same(logs)


def test_op_counts_of_every_width_after_wide_prefixes(
    small: None, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """opCounts of 1 to 15 hex digits, either case, after prefixes with multi-byte characters (the digits are
    read from the text's UTF-8 bytes); keys that differ only past the digits stay apart."""
    calls = _count_bulk(monkeypatch)
    heads = [P, "pod-\xe9 | " + R, "\u2603\ufffd " + Q]
    lines = list(INITS)
    want = []
    for width in range(1, 16):
        for n in ("f" * width, "A" * width, format(width, "x").zfill(width), "1" + "0" * (width - 1)):
            for i, head in enumerate(heads):
                lines.append(head + COLL.format(op="AllReduce", n=n, c=8 << (width % 2), ptr="0x55d1"))
                want.append(int(n, 16))
                if i == 2:
                    lines.append(head + TUNINGS[0].format(op="AllReduce"))
    path = tmp_path / "wide.log"
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    _same([path])
    assert sum(calls) > 100
    assert parse_nccl_logs([path]).colls.get_column("op_count").to_list() == want


def test_every_line_its_own_prefix_goes_through_the_loop(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A timestamp before each NCCL prefix: keying would not pay, the loop reads the piece."""
    calls = _count_bulk(monkeypatch)
    monkeypatch.setattr(bulk, "DENSE_PIECE_CHARS", 1024)
    coll = COLL.format(op="AllReduce", n=7, c=8, ptr="0x55d1")
    lines = [f"2026-12-04 10:00:{i // 1000:02d}.{i % 1000:03d} " + P + coll for i in range(3000)]
    path = tmp_path / "stamped.log"
    path.write_text(INITS[0] + "\n" + "\n".join(lines) + "\n")
    assert not bulk.worth_it(path.read_text())
    _same([path])
    assert not calls


@pytest.mark.parametrize("high", [1, 5, 300, 10**9])
def test_groups_and_distinct_as_numpy_unique(high: int) -> None:
    """``bulk.groups`` and ``bulk.distinct`` give what ``np.unique`` gives (few codes: counted; many: sorted)."""
    import numpy as np

    rng = np.random.default_rng(high)
    for n in (0, 1, 7, 1000):
        code = rng.integers(0, high, n)
        first, inverse = bulk.groups(code)
        _, want_first, want_inverse = np.unique(code, return_index=True, return_inverse=True)
        assert first.tolist() == want_first.tolist()
        assert inverse.tolist() == want_inverse.reshape(-1).tolist()
        if high < 10**9:
            assert bulk.distinct(code).tolist() == np.unique(code).tolist()
