"""Parallel parsing falls back to parsing in-process when worker processes cannot start."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def test_script_without_main_guard_still_opens_a_run(tmp_path: Path) -> None:
    # "spawn" re-imports the caller's __main__; without a guard the workers die at start-up
    run = tmp_path / "run"
    shutil.copytree(REPO / "sample_traces" / "gloo_4rank_profiler", run, ignore=shutil.ignore_patterns("tables"))
    script = tmp_path / "noguard.py"
    script.write_text(
        "import commprof\n"
        f"run = commprof.open_run({str(run)!r}, cache_dir={str(tmp_path / 'cache')!r}, jobs=2)\n"
        "print('ranks', run.ranks.height)\n"
    )
    env = {**os.environ, "COMMPROF_PARALLEL_MIN_BYTES": "0"}  # the sample is small: force the worker path
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=180, cwd=tmp_path,
                          env=env)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "ranks 4" in done.stdout
