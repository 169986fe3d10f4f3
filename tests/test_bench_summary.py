"""bench/summary.py: every bench's rows in one table, each against its floor and HTA (issue 24)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "bench"))
import summary  # noqa: E402


def test_one_table_of_every_row(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "kineto.json").write_text(json.dumps({"rows": [
        {"work": "analyze cold", "now": 1.0, "unit": "s", "floor": 0.5, "floor_what": "imports + decode",
         "hta": 5.0, "target": ">= 8x HTA", "passed": False},
        {"work": "ingest MB/s", "now": 160.0, "unit": "MB/s", "floor": 320.0, "floor_what": "bare decode",
         "hta": None, "target": ">= 150 MB/s per core", "passed": True},
    ]}))
    (tmp_path / "nccl.json").write_text(json.dumps({"rows": [{"work": "nccl log", "now": 2.0, "unit": "s"}]}))
    (tmp_path / "ingest.json").write_text(json.dumps({"sets": {}}))  # an older report without rows: skipped
    (tmp_path / "broken.json").write_text("{not json")
    assert summary.main([str(tmp_path)]) == 0
    out = capsys.readouterr()
    lines = out.out.splitlines()
    cold = next(line for line in lines if "analyze cold" in line)
    assert "2.00x floor" in cold and "HTA/now 5.0x" in cold and "| NO " in cold and "0.5 s (imports + decode)" in cold
    ingest = next(line for line in lines if "ingest MB/s" in line)
    assert "0.50x floor" in ingest and "| yes " in ingest
    partial = next(line for line in lines if "nccl log" in line)
    assert "nccl.json" in partial and "—" in partial
    assert "3 rows, 1 below target" in out.out
    assert "broken.json" in out.err


def test_no_rows(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert summary.main([str(tmp_path)]) == 0
    assert "no bench rows" in capsys.readouterr().out
