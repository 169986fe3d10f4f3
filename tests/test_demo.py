"""`make demo` (the README's first command) ends with the analysis summary: the last lines it prints are
exactly `commprof analyze` of the run it recorded, and before them only its own banner and commprof's
lines, no launcher or profiler noise."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
COMMPROF = ROOT / ".venv" / "bin" / "commprof"

pytestmark = [pytest.mark.torchrun, pytest.mark.slow]


def test_make_demo_ends_with_the_analysis(tmp_path: Path) -> None:
    if shutil.which("make") is None or not COMMPROF.exists():
        pytest.skip("needs make and the project's .venv (make install)")
    out = tmp_path / "demo"
    # -o: take the venv as it is (a stamp older than pyproject.toml would reinstall inside the test)
    done = subprocess.run(["make", "-s", "-o", ".venv/.installed", "demo", f"DEMO_OUT={out}"], cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=420)
    assert done.returncode == 0, done.stdout[-3000:]
    report = tmp_path / "report.txt"
    analyzed = subprocess.run([str(COMMPROF), "analyze", str(out), "-o", str(report)], capture_output=True,
                              text=True, timeout=300)
    assert analyzed.returncode == 0, analyzed.stderr
    expected = report.read_text().rstrip("\n").splitlines()
    printed = done.stdout.rstrip("\n").splitlines()
    assert len(expected) > 10 and "Step time per rank" in report.read_text()
    assert [line.rstrip() for line in printed[-len(expected):]] == [line.rstrip() for line in expected], \
        "\n".join(printed[-len(expected) - 5:])
    before = printed[:-len(expected)]
    noise = [line for line in before if not line.startswith(("demo: ", "commprof: "))]
    assert noise == [], noise
    assert before[-1].startswith(f"commprof: run directory {out} (4 traces); exit code 0"), before
