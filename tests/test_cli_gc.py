"""The CLI's garbage-collector thresholds (issue 24): a command runs with a larger first generation, the
caller's thresholds come back afterwards (also when the command fails), and the dashboard keeps them."""

from __future__ import annotations

import gc
import importlib
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import click
import pytest
from click.testing import CliRunner

import commprof.cli as cli


@pytest.fixture
def probe(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[tuple[int, int, int]]]:
    """A ``probe`` command (and a ``dashboard`` stand-in) that record the thresholds they run with."""
    seen: list[tuple[int, int, int]] = []

    @click.command()
    @click.option("--fail", is_flag=True)
    def probe_cmd(fail: bool) -> None:
        seen.append(gc.get_threshold())
        if fail:
            raise click.ClickException("asked to fail")

    commands = {"probe": probe_cmd, "dashboard": probe_cmd}
    monkeypatch.setattr(cli, "COMMANDS", {name: f"probe:{name}" for name in commands})
    monkeypatch.setattr(importlib, "import_module", lambda name: type("M", (), commands))
    before = gc.get_threshold()
    gc.set_threshold(700, 10, 10)
    try:
        yield seen
    finally:
        gc.set_threshold(*before)


def test_command_runs_with_larger_first_generation(probe: list[tuple[int, int, int]]) -> None:
    result = CliRunner().invoke(cli.main, ["probe"])
    assert result.exit_code == 0, result.output
    assert probe == [cli.GC_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)


def test_thresholds_restored_when_the_command_fails(probe: list[tuple[int, int, int]]) -> None:
    result = CliRunner().invoke(cli.main, ["probe", "--fail"])
    assert result.exit_code == 1
    assert probe == [cli.GC_THRESHOLD]
    assert gc.get_threshold() == (700, 10, 10)


def test_dashboard_keeps_the_interpreters_thresholds(probe: list[tuple[int, int, int]]) -> None:
    result = CliRunner().invoke(cli.main, ["dashboard"])
    assert result.exit_code == 0, result.output
    assert probe == [(700, 10, 10)]
    assert gc.get_threshold() == (700, 10, 10)


def test_help_lists_commands_and_restores(probe: list[tuple[int, int, int]]) -> None:
    result = CliRunner().invoke(cli.main, ["--help"])
    assert result.exit_code == 0
    assert "probe" in result.output and "dashboard" in result.output
    assert gc.get_threshold() == (700, 10, 10)


def test_objects_are_frozen_before_the_teardown(tmp_path: Path) -> None:
    """In a real process the freeze is registered once (however often the CLI runs) and runs after the
    exit handlers registered later (the command's), before those registered earlier; the exit status and
    output are the command's."""
    script = tmp_path / "run.py"
    script.write_text(
        "import atexit, gc\n"
        "import commprof.cli as cli\n"
        "atexit.register(lambda: print('earlier handler, frozen:', gc.get_freeze_count() > 0, flush=True))\n"
        "for _ in range(2):\n"
        "    try:\n"
        "        cli.main(['--version'])\n"
        "    except SystemExit as stop:\n"
        "        code = stop.code\n"
        "print('registered once:', cli._freeze_at_exit == [True], flush=True)\n"
        "atexit.register(lambda: print('later handler, frozen:', gc.get_freeze_count() > 0, flush=True))\n"
        "raise SystemExit(3 if code == 0 else 4)\n",
        encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert done.returncode == 3, done.stderr
    lines = done.stdout.splitlines()
    assert sum("version" in line for line in lines) == 2
    assert lines[-3:] == ["registered once: True", "later handler, frozen: False", "earlier handler, frozen: True"]


def test_the_program_keeps_its_thresholds_to_the_end(tmp_path: Path) -> None:
    """As the program (commprof.cli.run: the console script, ``python -m commprof``) the thresholds are not put
    back when the command returns: put back, the next allocation collected the first generation, every container
    the command had made (~27 ms after a cold analyze of the 54 MB trace), and the process ended right after."""
    root = Path(__file__).resolve().parents[1]
    script = tmp_path / "program.py"
    script.write_text(
        "import atexit, gc, sys\n"
        "import commprof.cli as cli\n"
        "after, started = [], []\n"
        "def watch(phase, info):  # a collection once the command ran, with thresholds other than the command's\n"
        "    if phase == 'start' and started and gc.get_threshold() != cli.GC_THRESHOLD:\n"
        "        after.append(info['generation'])\n"
        "gc.callbacks.append(watch)\n"
        "original = cli.LazyGroup.main\n"
        "def main(self, *args, **kwargs):\n"
        "    started.append(True)\n"
        "    return original(self, *args, **kwargs)\n"
        "cli.LazyGroup.main = main\n"
        "atexit.register(lambda: print('collections after:', after, 'thresholds:', gc.get_threshold(), flush=True))\n"
        f"sys.argv = ['commprof', 'analyze', {str(root / 'sample_traces' / 'tp2_dp2')!r}, '--format', 'json']\n"
        "cli.run()\n",
        encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(root), "COMMPROF_CACHE_DIR": str(tmp_path / "cache")})
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[-1] == f"collections after: [] thresholds: {cli.GC_THRESHOLD}"
