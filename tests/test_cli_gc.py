"""The CLI's garbage-collector thresholds (issue 24): a command runs with a larger first generation, the
caller's thresholds come back afterwards (also when the command fails), and the dashboard keeps them."""

from __future__ import annotations

import gc
import importlib
from collections.abc import Iterator

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
