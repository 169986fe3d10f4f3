"""docs/cli.md is the commands' own --help: a new command or option that is not in it fails here."""

from __future__ import annotations

from pathlib import Path

from commprof.cli.reference import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_cli_reference_is_up_to_date() -> None:
    expected = render()
    assert DOC.read_text() == expected, "docs/cli.md is stale: run `python -m commprof.cli.reference > docs/cli.md`"


def test_every_command_is_documented() -> None:
    text = DOC.read_text()
    for name in ("analyze", "check", "dashboard", "diff", "export", "ingest", "record", "topology"):
        assert f"## commprof {name}" in text
