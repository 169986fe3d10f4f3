"""Generate docs/cli.md from the commands' own ``--help``, so the CLI reference cannot drift:
tests/test_cli_reference.py fails when docs/cli.md differs from what this prints.

    python -m commprof.cli.reference > docs/cli.md
"""

from __future__ import annotations

from commprof.cli import COMMANDS, main


def render() -> str:
    # real contexts (as an invocation makes them), so context settings such as -h apply as they do live
    ctx = main.make_context("commprof", [], resilient_parsing=True, terminal_width=100, max_content_width=100)
    out = ["# commprof command reference", "",
           "Generated from `--help` by `python -m commprof.cli.reference > docs/cli.md`; do not edit by hand.",
           "", "```", main.get_help(ctx), "```", ""]
    for name in sorted(COMMANDS):
        command = main.get_command(ctx, name)
        assert command is not None
        # info_name is the command's own name: click prefixes the parent's ("commprof"), so the usage line
        # reads as the user types it
        sub = command.make_context(name, [], parent=ctx, resilient_parsing=True)
        out += [f"## commprof {name}", "", "```", command.get_help(sub), "```", ""]
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
