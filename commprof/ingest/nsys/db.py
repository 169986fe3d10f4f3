"""An Nsight Systems SQLite export opened read-only, and what its schema version has.

The export schema "can and will change" (tables are created lazily, columns are renamed between minor
versions), so every query is built from what ``sqlite_master`` and ``PRAGMA table_info`` say is there:
a missing table gives no rows, a missing column a NULL, never an error.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import quote

from commprof.errors import InputError

SQLITE_MAGIC = b"SQLite format 3\x00"
FETCH_ROWS = 50_000  # rows per fetch: memory stays bounded whatever the export's size


class NsysExportError(InputError):
    """The file is not a readable SQLite database (truncated, not SQLite, damaged): one line naming it."""


def is_sqlite(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(len(SQLITE_MAGIC)) == SQLITE_MAGIC
    except OSError:
        return False


@dataclass
class Export:
    """A read-only connection and the export's tables with their columns."""

    con: sqlite3.Connection
    path: Path
    columns: dict[str, frozenset[str]] = field(default_factory=dict)

    def has(self, table: str, column: str | None = None) -> bool:
        cols = self.columns.get(table)
        return cols is not None and (column is None or column in cols)

    def col(self, table: str, column: str, alias: str, prefix: str = "") -> str:
        """``prefix.column AS alias`` when the column exists, else ``NULL AS alias``."""
        return f"{prefix}{column} AS {alias}" if self.has(table, column) else f"NULL AS {alias}"

    def rows(self, sql: str, params: Sequence[Any] = ()) -> Iterator[list[tuple[Any, ...]]]:
        """The query's rows, ``FETCH_ROWS`` at a time."""
        try:
            cur = self.con.execute(sql, params)
            while batch := cur.fetchmany(FETCH_ROWS):
                yield batch
        except (sqlite3.DatabaseError, UnicodeDecodeError) as err:
            # a damaged page can put bytes that are not UTF-8 in SQLite's own error text
            raise NsysExportError(f"SQLite error while reading the export ({_said(err)})", self.path) from None

    def all(self, sql: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        return [row for batch in self.rows(sql, params) for row in batch]

    def metadata(self) -> dict[str, str]:
        """``META_DATA_EXPORT`` (schema 3.x) or ``EXPORT_META_DATA`` (2.x) as name -> value."""
        for table in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            if self.has(table, "name") and self.has(table, "value"):
                return {str(n): str(v) for n, v in self.all(f"SELECT name, value FROM {table}")}
        return {}

    def close(self) -> None:
        self.con.close()


def _said(err: Exception) -> str:
    """SQLite's complaint in words; a UnicodeDecodeError is SQLite's message about damaged bytes that Python
    could not decode (its schema text is not UTF-8)."""
    return "damaged text in the database (not UTF-8)" if isinstance(err, UnicodeDecodeError) else str(err)


def open_export(path: Path) -> Export:
    """Open read-only (URI ``mode=ro``, ``immutable=1``: no lock taken, no journal written, the user's file
    is never changed) and read the schema. Raises NsysExportError on a file SQLite cannot read."""
    uri = f"file:{quote(str(path.absolute()))}?mode=ro&immutable=1"
    try:
        con = sqlite3.connect(uri, uri=True, check_same_thread=False)
        # text that is not UTF-8 (a damaged file, a string table from another tool) is read with U+FFFD,
        # never a UnicodeDecodeError in the middle of a query
        con.text_factory = lambda raw: raw.decode("utf-8", "replace")
        names = [r[0] for r in con.execute("SELECT name FROM sqlite_master WHERE type = 'table'")]
        columns = {}
        for name in names:
            if not name.replace("_", "").isalnum():
                continue  # a table name we would have to quote is none of nsys's
            columns[name] = frozenset(str(r[1]) for r in con.execute(f'PRAGMA table_info("{name}")'))
    except (sqlite3.DatabaseError, UnicodeDecodeError) as err:
        raise NsysExportError(f"not a readable SQLite database ({_said(err)})", path) from None
    return Export(con, path, columns)
