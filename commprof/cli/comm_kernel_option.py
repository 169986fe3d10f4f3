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
    """``[[comm_kernel]]`` of the config file; a wrong entry is an error naming the file and line. Read with tomllib
    alone: a command that finds no entry imports nothing more (``check``'s rules pull the analyzers in)."""
    folder = cwd or Path.cwd()
    if config is not None:
        candidates = [config] if config.is_file() else []  # a missing --config: check says so itself
    else:
        candidates = [c for c in (folder / "commprof.toml", folder / "pyproject.toml") if c.is_file()][:1]
    for path in candidates:
        data, text = _read(path)
        if path.name == "pyproject.toml":
            data = data.get("tool", {}).get("commprof", {}) if isinstance(data.get("tool"), dict) else {}
            if not isinstance(data, dict):
                return ()
        if "comm_kernel" in data:
            return from_entries(data["comm_kernel"], _Where(path, text))
    return ()


class _Where:
    """The file the entries come from (errors name it and the line)."""

    def __init__(self, path: Path | None, text: str | None = None) -> None:
        self.path, self.text = path, text

    def error(self, message: str, key: str | None = None) -> Exception:
        from commprof.errors import CommprofError

        return CommprofError(message, self.path) if self.path is not None else CommprofError(message)


def _read(path: Path) -> tuple[dict[str, Any], str]:
    from commprof.errors import CommprofError

    try:
        import tomllib
    except ImportError:  # pragma: no cover - Python 3.10
        import tomli as tomllib  # type: ignore[no-redef]
    try:
        text = path.read_text(encoding="utf-8")
        return tomllib.loads(text), text
    except (OSError, UnicodeDecodeError) as err:
        raise CommprofError(f"cannot read the config: {getattr(err, 'strerror', None) or err}", path) from None
    except (tomllib.TOMLDecodeError, RecursionError, ValueError) as err:
        raise CommprofError(f"not valid TOML: {err}", path) from None


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
    from commprof.errors import CommprofError as ConfigError

    headers = [i for i, line in enumerate((source.text or "").splitlines(), start=1)
               if re.match(r"\s*\[\[\s*(?:tool\.commprof\.)?comm_kernel\s*\]\]", line)]
    where = f"line {headers[number - 1]}" if number <= len(headers) else None
    text = f"[[comm_kernel]] #{number}: {message}"
    return ConfigError(text, source.path, where) if source.path is not None else ConfigError(text)
