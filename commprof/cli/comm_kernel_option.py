"""``--comm-kernel REGEX=OP[:DIM[:TIER]]`` and ``[[comm_kernel]]`` in commprof.toml: kernel families of a library
commprof does not know (an in-house all-to-all, a fork of a known one), declared communication by the user.

Flags come first, then the file's entries (the first family that matches a kernel's name decides). The file is
the one ``check`` reads: ``commprof.toml`` in the working directory, else ``[tool.commprof]`` of its
``pyproject.toml`` (``check --config FILE``: that file)::

    [[comm_kernel]]
    pattern = 'myco::fabric::(push|pull)_\\w+'   # searched in the kernel's name as the trace spells it
    op = "all_to_all"                            # all_reduce, all_gather, reduce_scatter, all_to_all, send, ...
    dimension = "ep"                             # optional: tp, cp, ep, dp, pp, world
    tier = "nvlink"                              # optional: nvlink, pcie, ib, roce, ethernet, ... or network
    name = "fabric"                              # optional: the group's name in the report
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click

if TYPE_CHECKING:
    from commprof.ingest.common.comm_kernels import Declared

ENTRY_KEYS = ("pattern", "op", "dimension", "tier", "name")
HELP = ("Count a kernel family commprof does not know as communication: kernels whose name the regular expression "
        "finds run OP (all_reduce, all_gather, reduce_scatter, all_to_all, send, recv, ...), in dimension DIM and on "
        "TIER where given, e.g. 'myco::fabric::\\w+=all_to_all:ep'. Repeat for several; also [[comm_kernel]] in "
        "commprof.toml. The report lists the largest kernels that look like communication but are not counted.")


def _flags(ctx: click.Context, param: click.Parameter, value: tuple[str, ...]) -> tuple[Declared, ...]:
    from commprof.ingest.common.comm_kernels import parse_declared

    try:
        return tuple(parse_declared(spec) for spec in value)
    except ValueError as err:
        raise click.BadParameter(str(err)) from None


def comm_kernel_option(f: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--comm-kernel", "comm_kernels", multiple=True, metavar="REGEX=OP[:DIM[:TIER]]",
                        callback=_flags, help=HELP)(f)


def with_configured(flags: tuple[Declared, ...], config: Path | None = None,
                    cwd: Path | None = None) -> tuple[Declared, ...]:
    """The flags' families, then those of ``config`` (default: the file ``check`` would read, module doc)."""
    return flags + configured(config, cwd)


def configured(config: Path | None = None, cwd: Path | None = None) -> tuple[Declared, ...]:
    """``[[comm_kernel]]`` of the config file; a wrong entry is an error naming the file and line."""
    folder = cwd or Path.cwd()
    if config is None and not (folder / "commprof.toml").is_file() and not (folder / "pyproject.toml").is_file():
        return ()  # the usual case, without importing the config's reader
    from commprof.check import config as check_config

    if config is not None:
        if not config.is_file():
            return ()  # check says so itself, with its own message
        data, text = check_config._read_toml(config)
        if config.name == "pyproject.toml":
            data = data.get("tool", {}).get("commprof", {})
        found: tuple[Path, dict[str, Any], str] | None = (config, data, text)
    else:
        found = check_config.find_config(folder)
    if found is None or "comm_kernel" not in found[1]:
        return ()
    path, data, text = found
    return from_entries(data["comm_kernel"], check_config._Source(path, text))


def from_entries(value: Any, source: Any) -> tuple[Declared, ...]:
    """The ``[[comm_kernel]]`` array of tables as families (``source`` names the file and line in errors)."""
    from commprof.ingest.common.comm_kernels import declared

    if not isinstance(value, list) or not all(isinstance(v, dict) for v in value):
        raise source.error("comm_kernel must be an array of tables: [[comm_kernel]] with pattern = '...' and "
                           "op = '...'", "comm_kernel")
    out = []
    for number, entry in enumerate(value, start=1):
        try:
            unknown = [k for k in entry if k not in ENTRY_KEYS]
            if unknown:
                raise ValueError(f"unknown key {unknown[0]!r}; known: {', '.join(ENTRY_KEYS)}")
            missing = [k for k in ("pattern", "op") if k not in entry]
            if missing:
                raise ValueError(f"give {' and '.join(missing)} (pattern = '<regex>', op = 'all_to_all')")
            bad = [k for k in ENTRY_KEYS if k in entry and not isinstance(entry[k], str)]
            if bad:
                raise ValueError(f"{bad[0]} must be a string, not {entry[bad[0]]!r}")
            out.append(declared(entry["pattern"], entry["op"], entry.get("dimension", ""), entry.get("tier", ""),
                                entry.get("name", "")))
        except ValueError as err:  # noqa: PERF203 - a handful of entries, each error names its own
            raise _entry_error(source, number, str(err)) from None
    return tuple(out)


def _entry_error(source: Any, number: int, message: str) -> Exception:
    """An error naming the file and the line of the ``number``-th ``[[comm_kernel]]`` table."""
    from commprof.check.config import ConfigError

    headers = [i for i, line in enumerate((source.text or "").splitlines(), start=1)
               if re.match(r"\s*\[\[\s*(?:tool\.commprof\.)?comm_kernel\s*\]\]", line)]
    where = f"line {headers[number - 1]}" if number <= len(headers) else None
    text = f"[[comm_kernel]] #{number}: {message}"
    return ConfigError(text, source.path, where) if source.path is not None else ConfigError(text)
