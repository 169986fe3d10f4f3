"""Generate docs/cli.md from the commands' own ``--help``, so the CLI reference cannot drift:
tests/test_cli_reference.py fails when docs/cli.md differs from what this prints.

    python -m commprof.cli.reference > docs/cli.md
"""

from __future__ import annotations

import click

from commprof.cli import COMMANDS, main


def render() -> str:
    ctx = click.Context(main, info_name="commprof", terminal_width=100, max_content_width=100)
    out = ["# commprof command reference", "",
           "Generated from `--help` by `python -m commprof.cli.reference > docs/cli.md`; do not edit by hand.",
           "", "```", main.get_help(ctx), "```", ""]
    for name in sorted(COMMANDS):
        command = main.get_command(ctx, name)
        assert command is not None
        sub = click.Context(command, info_name=f"commprof {name}", parent=None, terminal_width=100,
                            max_content_width=100)
        out += [f"## commprof {name}", "", "```", command.get_help(sub), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
