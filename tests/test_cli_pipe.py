"""`commprof ... | head`: a reader that goes away is not an error: no traceback, no "Exception ignored"."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from click.testing import Result

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = "sample_traces/tp2_dp2"
SYNTH = "sample_traces/synth_2x8_tp8_dp2"
COMMANDS = [
    ["analyze", SAMPLE], ["analyze", SAMPLE, "--format", "json"], ["analyze", SAMPLE, "--format", "markdown"],
    ["topology", SYNTH], ["topology", SYNTH, "--format", "json"],
    ["topology", SAMPLE], ["check", SAMPLE], ["check", SAMPLE, "--format", "junit"],
    ["diff", SAMPLE, "sample_traces/tp2_pp2_dp2"], ["ingest", SAMPLE], ["--help"], ["record", "--help"],
    ["export", SAMPLE, "--perfetto", "-"],
]


@pytest.mark.slow
@pytest.mark.parametrize("args", COMMANDS, ids=[" ".join(a[:3]) for a in COMMANDS])
def test_closed_pipe_is_quiet(args: list[str], tmp_path: Path) -> None:
    read, write = os.pipe()
    os.close(read)  # every write to stdout fails with EPIPE, as after `head` has exited
    env = {**os.environ, "COMMPROF_CACHE_DIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, "-m", "commprof", *args], cwd=ROOT, stdout=write,
                            stderr=subprocess.PIPE, env=env)
    os.close(write)
    _, err = proc.communicate(timeout=120)
    text = err.decode()
    assert "Traceback" not in text and "Exception ignored" not in text and "BrokenPipe" not in text, text
    assert proc.returncode in (0, 1), (proc.returncode, text)


def test_export_to_standard_output(cli: Callable[..., Result], tmp_path: Path) -> None:
    """`--perfetto -` writes the trace to stdout (not to a file named "-")."""
    import json

    result = cli("export", SAMPLE, "--perfetto", "-", env={"COMMPROF_CACHE_DIR": str(tmp_path)})
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout)["traceEvents"] and "wrote standard output" in result.stderr
    assert not (ROOT / "-").exists()
