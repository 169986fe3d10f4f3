"""Where a run's table cache lives, and whether a cached trace is still the file on disk.

The place, in order: ``COMMPROF_CACHE_DIR`` (when set) or ``tables/`` beside the raw files, when files can
be created there; else a ``tables/`` that the run ships and that is up to date for every trace (read, never
written: a read-only run directory copied with its cache); else the per-user cache
(``~/.cache/commprof``); else, with nowhere writable, a private temporary folder that lives as long as
this process (the analysis runs, nothing is kept, and a warning says so).

Freshness: a cached trace is the file on disk when its size, mtime, ctime and inode are those recorded
at parse time. ctime cannot be set back by a user (``touch -r`` restores mtime only, and bumps ctime), so
an edit in place always shows. A copied or moved run (new ctime and inode, same content) is checked by a
hash of the whole file against the one recorded at parse time: it costs one read of the file (blake2b at
~1 GB/s, ~40x less than a parse) and only when the inode changed.
"""

from __future__ import annotations

import atexit
import hashlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from commprof.ingest.discover import Source
from commprof.safe_write import CACHE_HINT, WriteError, sweep_temporaries, writable_folder

CACHE_ENV = "COMMPROF_CACHE_DIR"
_CHUNK = 1 << 20


def content_digest(path: Path) -> str:
    """blake2b-128 of the whole file (raises OSError)."""
    digest = hashlib.blake2b(digest_size=16)
    with path.open("rb") as fh:
        while chunk := fh.read(_CHUNK):
            digest.update(chunk)
    return digest.hexdigest()


@dataclass(frozen=True)
class CachePlace:
    folder: Path
    writable: bool
    note: str | None = None  # a warning for the user: the cache is not where they would look for it


def _user_cache(source: Source, base: Path) -> Path:
    digest = hashlib.sha1(source.identity.encode()).hexdigest()[:16]
    return base / digest


def _beside(source: Source) -> bool:
    """A cache beside the raw files: in the run's folder, or in the parent folder of a job's node folders;
    not for one file, nor for folders given apart (their common parent may be anything, / included)."""
    return source.kind != "file" and (source.kind != "job" or len(source.given) == 1)


def default_places(source: Source) -> list[Path]:
    """Where a writable cache is looked for, first choice first."""
    env = os.environ.get(CACHE_ENV)
    if env:
        return [_user_cache(source, Path(env))]
    beside = [source.root / "tables"] if _beside(source) else []
    return [*beside, _user_cache(source, Path.home() / ".cache" / "commprof")]


def choose(source: Source, explicit: Path | None, up_to_date: Callable[[Path], bool]) -> CachePlace:
    """The cache folder for ``source``. ``up_to_date(folder)``: that folder's cache holds every trace,
    fresh (then a read-only one is used as it is)."""
    if explicit is not None:
        why = writable_folder(explicit)
        if why is None:
            return CachePlace(explicit, True)
        if up_to_date(explicit):
            return CachePlace(explicit, False)
        raise WriteError("the table cache", explicit, why, CACHE_HINT)
    places = default_places(source)
    problems: list[tuple[Path, OSError]] = []
    first = places[0]
    why = writable_folder(first)
    if why is None:
        _sweep(first)
        return CachePlace(first, True)
    problems.append((first, why))
    shipped = source.root / "tables"
    if _beside(source) and shipped.is_dir() and up_to_date(shipped):
        return CachePlace(shipped, False)
    for place in places[1:]:
        why = writable_folder(place)
        if why is None:
            _sweep(place)
            return CachePlace(place, True)
        problems.append((place, why))
    return _temporary(problems)


def _sweep(folder: Path) -> None:
    """Temporary files of processes killed while writing (they are never read, only in the way)."""
    sweep_temporaries(folder, max_depth=3)


def _temporary(problems: list[tuple[Path, OSError]]) -> CachePlace:
    reasons = "; ".join(f"{p}: {(e.strerror or str(e)).lower()}" for p, e in problems)
    try:
        import tempfile  # here, with shutil: the command forks kineto.prefetch's child before it needs them

        folder = Path(tempfile.mkdtemp(prefix="commprof-tables-"))
    except OSError:
        path, err = problems[0]
        raise WriteError("the table cache", path, err,
                         f"nowhere else is writable either (temporary folder included); {CACHE_HINT}") from None
    import shutil

    atexit.register(shutil.rmtree, folder, True)
    note = (f"no table cache can be written ({reasons}): this analysis keeps its tables in a temporary folder "
            f"({folder}) removed when it ends, and the next one parses the traces again; {CACHE_HINT} to keep them")
    return CachePlace(folder, True, note)
