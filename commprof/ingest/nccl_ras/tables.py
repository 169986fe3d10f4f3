"""The RAS reports' rows as polars tables (see the package's docstring)."""

from __future__ import annotations

import gzip
import zlib
from pathlib import Path

import polars as pl

from commprof.ingest.nccl_ras.parse import RasRows, read_json, read_text

RAS_GROUPS = pl.Schema({
    "file": pl.String(), "snapshot": pl.Int32(), "group": pl.Int32(), "comms": pl.Int32(), "nodes": pl.Int32(),
    "ranks_per_node": pl.String(), "ranks_per_comm": pl.Int32(), "ranks_in_group": pl.Int32(),
    "status": pl.String(), "errors": pl.String(), "line": pl.Int64(), "version": pl.String(),
})
RAS_COUNTS = pl.Schema({
    "file": pl.String(), "snapshot": pl.Int32(), "comm": pl.String(), "group": pl.Int32(), "hash": pl.String(),
    "what": pl.String(), "ops": pl.Int64(), "status": pl.String(), "ranks_count": pl.Int32(),
    "ranks": pl.List(pl.Int32()), "nodes": pl.List(pl.String()), "pids": pl.List(pl.Int64()), "line": pl.Int64(),
})
RAS_NOTES = pl.Schema({
    "file": pl.String(), "snapshot": pl.Int32(), "comm": pl.String(), "hash": pl.String(), "kind": pl.String(),
    "detail": pl.String(), "ranks": pl.List(pl.Int32()), "processes": pl.List(pl.String()), "line": pl.Int64(),
    "time": pl.String(),
})

class RasTables:
    """The three tables of a set of reports, and the NCCL versions they name."""

    def __init__(self, groups: pl.DataFrame, counts: pl.DataFrame, notes: pl.DataFrame, versions: list[str]):
        self.groups, self.counts, self.notes, self.versions = groups, counts, notes, versions

    @property
    def empty(self) -> bool:
        return not (self.groups.height or self.counts.height or self.notes.height)


def empty_tables() -> RasTables:
    return RasTables(pl.DataFrame(schema=RAS_GROUPS), pl.DataFrame(schema=RAS_COUNTS),
                     pl.DataFrame(schema=RAS_NOTES), [])


def read_reports(paths: list[Path], warnings: list[str]) -> RasTables:
    """Every report's rows; an unreadable file, or a line of one, is named in ``warnings``."""
    rows = RasRows()
    for path in paths:
        try:
            with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
                text = f.read().decode("utf-8", "replace")
        except (OSError, EOFError, zlib.error) as err:
            warnings.append(f"NCCL RAS: {path}: unreadable ({err}); skipped")
            continue
        if text.lstrip().startswith("{"):
            read_json(text, str(path), rows, warnings)
        else:
            read_text(text, str(path), rows, warnings)
    try:
        return RasTables(pl.DataFrame(rows.groups, schema=RAS_GROUPS), pl.DataFrame(rows.counts, schema=RAS_COUNTS),
                         pl.DataFrame(rows.notes, schema=RAS_NOTES), sorted(rows.versions))
    except (TypeError, ValueError, OverflowError, pl.exceptions.PolarsError) as err:
        warnings.append(f"NCCL RAS: values of unexpected types ({err}); reports skipped")
        return empty_tables()
