"""The shape of an ``analyze --format json`` report as ``check``, ``diff`` and ``--baseline`` read it,
checked once at load: a report edited by hand or by a script (a number turned into text, a list into
an object, NaN, a 400-digit count) is a one-line error naming the file and the field, never a
traceback deep inside a rule or a table renderer.

Only the fields that are read are typed; everything else passes through untouched."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import msgspec

from commprof.errors import InputError

Num = int | float | None
Text = str | None


class _Loose(msgspec.Struct, forbid_unknown_fields=False):
    pass


class Run(_Loose):
    path: str  # the check headline names the run by it
    world_size: int | None = None
    hta_compat: bool | None = None


class Totals(_Loose):
    step_ns: Num = None
    compute_ns: Num = None
    overlapped_comm_ns: Num = None
    exposed_comm_ns: Num = None
    exposed_wait_ns: Num = None
    exposed_transfer_ns: Num = None
    memory_ns: Num = None
    idle_ns: Num = None
    overlap_pct: Num = None
    exposed_comm_pct_of_step: Num = None


class RankRow(_Loose):
    rank: int
    exposed_pct_of_step: Num = None
    exposed_comm_ns: Num = None


class GroupRow(_Loose):
    pg: str | int
    dimension: Text = None
    tier: Text = None
    ranks: list[int] | None = None
    calls: Num = None
    exposed_pct_of_step: Num = None
    exposed_ns_per_step: Num = None


class CollectiveRow(_Loose):
    pg: str | int
    op: str
    dimension: Text = None
    tier: Text = None
    count: Num = None
    bytes: Num = None
    efficiency: Num = None
    peak_gbps: Num = None


class SectionRow(_Loose):
    """A row of ``dimensions`` or ``tiers``."""

    dimension: Text = None
    tier: Text = None
    exposed_ns_per_step: Num = None
    exposed_wait_ns_per_step: Num = None
    exposed_transfer_ns_per_step: Num = None
    overlapped_ns_per_step: Num = None
    comm_ns_per_step: Num = None
    bytes_per_step: Num = None
    busbw_gbps: Num = None


class Straggler(_Loose):
    rank: int
    max_wait_ns: Num = None
    max_wait_pg: str | int | None = None
    max_wait_op: Text = None
    max_wait_call: str | int | None = None
    max_wait_step: int | None = None
    max_wait_late_rank: int | None = None


class Skew(_Loose):
    stragglers: list[Straggler] = []


class Finding(_Loose):
    id: Text = None
    title: Text = None
    severity: Text = None
    rank: int | None = None
    pg: str | int | None = None
    dimension: Text = None
    tier: Text = None
    estimated_saving_ns_per_step: Num = None


class AnalyzeReport(_Loose):
    run: Run
    totals: Totals
    ranks: list[RankRow]
    process_groups: list[GroupRow]
    collectives_summary: list[CollectiveRow]
    dimensions: list[SectionRow]
    tiers: list[SectionRow]
    skew: Skew
    findings: list[Finding] | None = None
    warnings: list[str] | None = None


def _finite(text: str) -> float:
    value = float(text)
    if not math.isfinite(value):
        raise ValueError(f"number {text[:20]} is out of range")
    return value


def _bounded_int(text: str) -> int:
    value = int(text) if len(text) <= 20 else 1 << 64
    if not -(1 << 63) <= value < 1 << 63:
        raise ValueError(f"number {text[:20]}... is out of range")
    return value


def _no_constant(name: str) -> Any:
    raise ValueError(f"{name} is not a JSON number")


def read_json(path: Path) -> Any:
    """The file's JSON, with NaN, Infinity and out-of-range numbers refused (Python's json takes them)."""
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise InputError(f"cannot read the report: {getattr(err, 'strerror', None) or err}", path) from None
    try:
        return json.loads(text, parse_float=_finite, parse_int=_bounded_int, parse_constant=_no_constant)
    except json.JSONDecodeError as err:
        raise InputError(f"not valid JSON: {err.msg}", path, f"line {err.lineno}, column {err.colno}") from None
    except (ValueError, RecursionError) as err:
        raise InputError(f"not valid JSON: {str(err)[:120] or 'nested too deep'}", path) from None


def validate(doc: dict[str, Any], path: Path | str) -> None:
    """Raise InputError naming the first field of the wrong shape."""
    try:
        msgspec.convert(doc, AnalyzeReport)
    except msgspec.ValidationError as err:
        message, _, where = str(err).partition(" - at ")
        raise InputError(f"not a commprof analyze report: {message}", path,
                         where.strip("`").replace("$", "report", 1) or None) from None
