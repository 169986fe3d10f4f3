"""docs/cli.md is the commands' own --help: a new command or option that is not in it fails here."""

from __future__ import annotations

import difflib
import re
from pathlib import Path

from commprof.cli.reference import render

DOC = Path(__file__).resolve().parents[1] / "docs" / "cli.md"


def test_cli_reference_is_up_to_date() -> None:
    expected, written = render(), DOC.read_text()
    diff = "\n".join(difflib.unified_diff(written.splitlines(), expected.splitlines(), "docs/cli.md", "--help",
                                          lineterm=""))
    assert written == expected, f"docs/cli.md is stale: run `python -m commprof.cli.reference > docs/cli.md`\n{diff}"


def test_every_command_is_documented() -> None:
    text = DOC.read_text()
    for name in ("analyze", "check", "dashboard", "diff", "export", "ingest", "record", "topology"):
        assert f"## commprof {name}" in text


def test_usage_lines_read_as_typed() -> None:
    """Each section's usage line is what a user types (`commprof analyze ...`), not a doubled prefix."""
    text = render()
    sections = re.findall(r"^## commprof (\S+)\n\n```\n(.*)$", text, flags=re.MULTILINE)
    assert sections, "no command sections rendered"
    for name, usage in sections:
        assert usage.startswith(f"Usage: commprof {name} "), f"{name}: {usage!r}"
    assert "commprof commprof" not in text
