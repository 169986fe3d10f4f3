"""Processes when the machine misbehaves (issue 22): a ``kill -9`` of a command that started a worker
pool leaves no worker (nor multiprocessing's resource tracker) behind for more than a second or two."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]


def children(pid: int) -> list[int]:
    out = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            fields = (entry / "stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            out.append(int(entry.name))
    return out


def alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"  # a zombie has ended; only its parent (now init) has not reaped it yet


@pytest.fixture(scope="module")
def big_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("orphans") / "run"
    subprocess.run([sys.executable, "-m", "commprof", "synth", str(out), "--nodes", "2", "--gpus-per-node", "8",
                    "--kernels-per-phase", "8"], check=True, capture_output=True, cwd=REPO,
                   env={**os.environ, "PYTHONPATH": str(REPO)})
    return out


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="reads /proc")
@pytest.mark.parametrize("command", ["ingest", "analyze"])
def test_kill_9_of_a_command_leaves_no_worker_behind(big_run: Path, command: str, tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(REPO), "COMMPROF_PARALLEL_MIN_BYTES": "0",
           "COMMPROF_CACHE_DIR": str(tmp_path / "cache")}
    parent = subprocess.Popen([sys.executable, "-m", "commprof", command, str(big_run), "-w", "2"], env=env,
                              cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    deadline = time.monotonic() + 60
    spawned: list[int] = []
    while time.monotonic() < deadline and parent.poll() is None:
        spawned = children(parent.pid)
        if len(spawned) >= 3:  # two workers and the resource tracker
            break
        time.sleep(0.02)
    assert len(spawned) >= 2, f"the pool never started ({spawned})"
    time.sleep(0.3)  # the workers import commprof and take a task
    spawned = children(parent.pid)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    gone_by = time.monotonic() + 2.5
    while time.monotonic() < gone_by and any(alive(p) for p in spawned):
        time.sleep(0.05)
    left = [p for p in spawned if alive(p)]
    for pid in left:  # do not leave them to the next test
        os.kill(pid, signal.SIGKILL)
    assert left == [], f"{len(left)} of {len(spawned)} processes outlived their parent by 2.5 s"
