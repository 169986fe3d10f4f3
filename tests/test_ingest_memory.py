"""Ingest memory follows what is kept, not the trace's JSON (issue 13), and the way it is kept — rows in
columns, times converted in batches, text decoded in pieces — never changes a table.

Memory is measured with tracemalloc (Python objects, numpy arrays and the text buffers; polars' own
allocator is not traced), which is deterministic: no timing, no RSS noise. The process-level figures
(RSS per worker against trace size) are in ``make bench-scale``.
"""

from __future__ import annotations

import gzip
import tracemalloc
from pathlib import Path

import pytest

from commprof.ingest.kineto import RankTrace, extract, stream
from commprof.ingest.kineto import scan as kineto_scan
from commprof.synth import SynthConfig, generate

REPO_ROOT = Path(__file__).resolve().parents[1]
SAMPLES = REPO_ROOT / "sample_traces"
TABLES = ("intervals", "collectives", "step_marks", "process_groups")


@pytest.fixture(scope="module")
def big_trace(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """One rank's synthetic GPU trace of about 12 MB of JSON (kernels, launches, CPU ops, NCCL calls)."""
    out = tmp_path_factory.mktemp("big") / "run"
    generate(SynthConfig(nodes=1, gpus_per_node=2, sizes={"tp": 2}, steps=3, kernels_per_phase=100, seed=1),
             out, compresslevel=1)
    return out / "raw" / "traces" / "rank-0.json.gz"


def _json_bytes(path: Path) -> int:
    with gzip.open(path, "rb") as fh:
        return sum(len(block) for block in iter(lambda: fh.read(1 << 20), b""))


def _same(a: RankTrace, b: RankTrace) -> None:
    for table in TABLES:
        assert getattr(a, table).equals(getattr(b, table)), table
    assert (a.warnings, a.rank, a.mode, a.device, a.corrupt) == (b.warnings, b.rank, b.mode, b.device, b.corrupt)


@pytest.mark.slow
def test_extract_holds_a_fraction_of_the_json(big_trace: Path) -> None:
    """Kept as Python tuples with their times as text, a trace's rows took about three times its JSON
    (35.7 MB traced for this 12.2 MB trace, 44 MB for a 20 MB one); as columns, less than the JSON
    (7.4 MB; 8.5 MB for the 20 MB one). One piece of text and one batch of pending times are all that
    is held besides the kept columns."""
    size = _json_bytes(big_trace)
    assert size > 10e6, size
    extract(big_trace)  # imports and caches, outside the measure
    tracemalloc.start()
    try:
        trace = extract(big_trace)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert trace.intervals.height > 15_000
    assert peak < size, f"extract traced {peak / 1e6:.1f} MB for {size / 1e6:.1f} MB of JSON"


@pytest.mark.parametrize("path", [
    SAMPLES / "synth_2x8_tp8_dp2" / "raw" / "traces" / "rank-5.json.gz",  # GPU, NCCL kernels
    SAMPLES / "tp2_pp2_dp2" / "raw" / "traces" / "rank-3.json.gz",  # Gloo on CPU, send/recv
    SAMPLES / "gloo_4rank_profiler" / "rank-1.json.gz",  # plain torch.profiler
], ids=["gpu", "gloo-record", "gloo-profiler"])
def test_batches_and_pieces_never_change_a_table(path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Times are converted a batch at a time and the text decoded a piece at a time: tiny batches and
    pieces (a batch every few rows, a piece every few events) give the same tables as one of each."""
    if not path.exists():  # the sample's file names
        path = next(path.parent.glob("*.json*"))
    whole = extract(path)
    monkeypatch.setattr(kineto_scan, "BATCH", 7)
    monkeypatch.setattr(stream, "PIECE_BYTES", 2048)
    monkeypatch.setattr(stream, "TEXT_BLOCK", 1024)
    _same(extract(path), whole)
    monkeypatch.setattr(kineto_scan, "BATCH", 1 << 40)
    monkeypatch.setattr(stream, "PIECE_BYTES", 1 << 40)
    _same(extract(path), whole)
