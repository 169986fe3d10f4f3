"""A cached ``commprof analyze`` (issue 24: warm <= 0.5 s, most of it imports) loads no parser it does not
run: not the NCCL log parser (its compiled patterns), not the Kineto stream and msgspec; and a run unchanged
since its report was kept is answered before the run is opened: no polars, numpy or analyzers at all."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
NOT_NEEDED = ("commprof.ingest.nccl_logs.parser", "commprof.ingest.nccl_logs.patterns",
              "commprof.ingest.kineto.stream", "commprof.ingest.kineto.reader", "msgspec")
NOT_NEEDED_UNCHANGED = (*NOT_NEEDED, "polars", "numpy", "commprof.run", "commprof.ingest.store",
                        "commprof.analyzers.classify", "commprof.analyzers.pipeline")
# the command as the program runs it, less its quick exit (commprof.cli.run), which would end the probe too
PROBE = """
import io, json, sys
sys.argv = ["commprof", "analyze", sys.argv[1], "--format", "json"]
real, sys.stdout = sys.stdout, io.StringIO()
try:
    from commprof.cli import main
    main()
except SystemExit as done:
    assert not done.code, done.code
sys.stdout = real
print(json.dumps(sorted(sys.modules)))
"""


def _modules_of_analyze(run: Path, cache: Path) -> set[str]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "COMMPROF_CACHE_DIR": str(cache)}
    out = subprocess.run([sys.executable, "-c", PROBE, str(run)], env=env, cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout
    return set(json.loads(out.splitlines()[-1]))


def test_cached_analyze_loads_no_parser(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ROOT / "sample_traces" / "tp2_dp2", run)
    cold = _modules_of_analyze(run, tmp_path / "cache")
    assert "commprof.ingest.kineto.stream" in cold  # the first run parses: the probe sees imports
    warm = _modules_of_analyze(run, tmp_path / "cache")
    assert sorted(warm & set(NOT_NEEDED_UNCHANGED)) == []  # the report kept by the cold run, found before opening


def test_a_changed_run_opens_its_tables_but_loads_no_parser(tmp_path: Path) -> None:
    run = tmp_path / "run"
    shutil.copytree(ROOT / "sample_traces" / "tp2_dp2", run)
    _modules_of_analyze(run, tmp_path / "cache")
    (run / "notes.txt").write_text("a new file: the quick key misses, the tables are still cached", encoding="utf-8")
    warm = _modules_of_analyze(run, tmp_path / "cache")
    assert "polars" in warm and sorted(warm & set(NOT_NEEDED)) == []
