"""The ``analyze`` report kept beside the table cache: a warm ``analyze`` of unchanged inputs, with the same
options and the same commprof, answers from it instead of analysing again (issue 24).

This hides the analysis from a warm run (~0.1 s of polars queries and ~50 ms of analyzer imports on the
53.7 MB real Kineto trace); the cold run and any change pay it in full. A report is used only when all of
these are what they were when it was written (the key, a SHA-256 over them):

* the code: path, size and mtime of every ``.py`` and ``.json`` file of the ``commprof`` package and of its
  analyzers (analyzers/calibration.json is read by the rules),
  Python's and polars' versions, and a stat of numpy's ``__init__.py`` (not imported to read its version);
* the options: the analysis settings (every analysis flag), ``--ranks``, ``--allow-partial``,
  ``--step-range``, and every ``COMMPROF_*`` environment variable but the cache folder's;
* the inputs: path, size, mtime, ctime and inode of every file under the run (links to folders followed,
  each real folder once; the table cache left out; a trace as the ingest saw it before reading it), or of
  the one trace file — so a trace or a sidecar (NCCL log, Flight Recorder dump, topology file, manifest)
  added, removed or rewritten is a new key — and the warnings of opening the run.

A warm run looks for its report before it opens the run (:func:`quick_load`): a second key, made without
polars, numpy or the ingest, from the code and the options as typed, the environment and a stat of every file
under the path (the table cache's folders left out), names the report a run with the same key was answered
with (a ``quick-<key>`` file beside the reports). So an unchanged run is answered in the time it takes to
import the command and render (~0.2 s), not to open the run's tables (~0.5 s). Any file changed, added or
removed, any option, environment variable or code change misses it, and the run is opened as before.

Only a report that survives a JSON round trip unchanged (tuples read back as lists) is kept, so the one
read back is the one built; its ``generated_at`` is that of the run that reads it. A folder of more than
``MAX_FILES`` files is not fingerprinted: it is analysed every time. ``COMMPROF_REPORT_CACHE=0`` turns the
reports off.
"""

from __future__ import annotations

import hashlib
import json
import os
import sys
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

KEY_VERSION = 1
FOLDER = "reports"  # under the run's table cache
KEEP = 8  # reports kept per table cache (one per option set), the oldest removed first
MAX_FILES = 200_000


def enabled() -> bool:
    return os.environ.get("COMMPROF_REPORT_CACHE", "1") != "0"


def _stat_row(path: str, rel: str) -> str:
    st = os.stat(path)
    return f"{rel}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ctime_ns}\0{st.st_ino}"


def _code_rows() -> list[str]:
    import commprof
    import commprof.analyzers

    rows: list[str] = []
    folders = {os.path.dirname(os.path.abspath(commprof.__file__)), *map(os.path.abspath, commprof.analyzers.__path__)}
    for top in sorted(folders):
        for folder, dirs, files in os.walk(top):
            dirs[:] = sorted(d for d in dirs if d != "__pycache__")
            # .json: what the rules read besides their code (analyzers/calibration.json: bands, advised steps)
            rows.extend(_stat_row(os.path.join(folder, f), os.path.join(folder, f)) for f in sorted(files)
                        if f.endswith((".py", ".json")))
    return rows


def _input_rows_of(paths: list[Path], entries: list[Any], caches: list[Path]) -> list[str] | None:
    """:func:`_input_rows` of every path given (a job's node folders), each once."""
    rows: list[str] = []
    for i, path in enumerate(paths):
        found = _input_rows(path, entries if i == 0 else [], caches)
        if found is None or len(rows) + len(found) > MAX_FILES:
            return None
        rows += [f"{i}\0{row}" for row in found] if len(paths) > 1 else found
    return rows


def _input_rows(path: Path, entries: list[Any], caches: list[Path]) -> list[str] | None:
    """One row per input file; None when the run is too big to fingerprint. A trace's row is the stat the
    ingest saw before it read the trace (``FileEntry.stat_key``), so a trace rewritten while it was being
    read cannot leave a report keyed on its new state. Files are known by their folder's real path and their
    name (one ``realpath`` a folder, not one a file: 5,000 traces cost ~80k ``lstat`` calls that way); a file
    that is itself a link is then not known as its ingested target and gets a row of its own too, which only
    adds to the key."""
    real_folders: dict[str, str] = {}

    def real(file: str) -> str:
        folder, name = os.path.split(file)
        known = real_folders.get(folder)
        if known is None:
            known = real_folders[folder] = os.path.realpath(folder)
        return os.path.join(known, name)

    seen_by_ingest = {real(str(e.path)) for e in entries}
    rows = [f"{e.path}\0{e.stat_key}" for e in entries]
    skip = [os.path.realpath(cache) for cache in caches]
    if path.is_dir():
        walked: set[str] = set()
        for folder, dirs, files in os.walk(path, followlinks=True):
            real_folder = os.path.realpath(folder)
            if real_folder in walked or any(real_folder == c or real_folder.startswith(c + os.sep) for c in skip):
                dirs[:] = []
                continue
            walked.add(real_folder)
            dirs.sort()
            rel_folder = os.path.relpath(folder, path)
            rows.extend(_stat_row(os.path.join(folder, f), os.path.normpath(os.path.join(rel_folder, f)))
                        for f in sorted(files) if os.path.join(real_folder, f) not in seen_by_ingest)
            if len(rows) > MAX_FILES:
                return None
    elif real(str(path)) not in seen_by_ingest:
        rows.append(_stat_row(str(path), str(path)))
    return rows


def _package_row(name: str) -> str:
    """A stat of the package's ``__init__.py``, found without importing it and without reading the installed
    distributions' metadata (importlib.metadata's ``version`` parses METADATA with the email package: ~15 ms
    of imports a cold ``analyze`` paid only for this): any install or upgrade rewrites that file."""
    import importlib.util

    try:
        spec = importlib.util.find_spec(name)
        origin = spec.origin if spec is not None else None
        return _stat_row(origin, origin) if origin else f"{name}\0absent"
    except (ImportError, ValueError, OSError):
        return f"{name}\0unreadable"


# The key's parts that do not depend on the run, read ahead by :func:`prepare`; :func:`key` takes them once.
_PREPARED: dict[str, Any] = {}


def prepare() -> None:
    """Read the code's stat rows and numpy's row now (``analyze`` calls it while the prefetch child reads the
    trace: ~4 ms less after the parse); the next :func:`key` uses them instead of reading them again."""
    code = _PREPARED.get("code")  # read by quick_key already
    _PREPARED.clear()
    try:
        _PREPARED["code"] = code if code is not None else _code_rows()
    except OSError:
        return  # key() reads them again, and meets the error there
    _PREPARED["numpy"] = _package_row("numpy")


def key(run: Any, settings: Any, options: dict[str, Any]) -> str | None:
    """The report's key for this run, settings and options; None when no report is to be used."""
    prepared = dict(_PREPARED)
    _PREPARED.clear()
    if not enabled():
        return None
    import polars

    numpy_row = prepared["numpy"] if "numpy" in prepared else _package_row("numpy")
    try:
        given = list(run.source.given) or [Path(run.path)]
        caches = [Path(run.ingested.cache)]
        # repeating windows: the report holds every window's trend (analyzed.window_trend), so all are inputs
        others = [w for _, folders in getattr(run.source, "windows", ()) for w in folders if w not in given]
        inputs = _input_rows_of(given + others, list(run.ingested.entries), caches + [w / "tables" for w in others])
        if inputs is None:
            return None
        code = prepared["code"] if "code" in prepared else _code_rows()
    except OSError:
        return None
    env = _env_rows()
    parts = [str(KEY_VERSION), sys.version, polars.__version__, numpy_row, run.source.identity,
             repr(settings), repr(getattr(run, "declared", ())), json.dumps(options, sort_keys=True, default=str),
             json.dumps(env),
             json.dumps(list(run.warnings)), *code, "\1", *inputs]
    return _digest(parts)


def _env_rows() -> list[tuple[str, str]]:
    """The ``COMMPROF_*`` environment, but the cache folder's (where the cache is is not what the report says)."""
    return sorted((k, v) for k, v in os.environ.items() if k.startswith("COMMPROF_") and k != "COMMPROF_CACHE_DIR")


def _digest(parts: list[str]) -> str:
    return hashlib.sha256("\n".join(parts).encode("utf-8", "surrogateescape")).hexdigest()


def _keep_newest(folder: Path, pattern: str, keep: int) -> None:
    """Remove all but the ``keep`` newest files of ``folder`` that match ``pattern``."""
    from commprof.safe_write import remove_quietly

    kept = sorted(folder.glob(pattern), key=lambda p: p.stat().st_mtime_ns, reverse=True)
    for old in kept[keep:]:
        remove_quietly(old)


def _file(run: Any, digest: str) -> Path:
    return Path(run.ingested.cache) / FOLDER / f"{digest}.json"


def load(run: Any, digest: str | None) -> dict[str, Any] | None:
    """The report kept under ``digest``, with this run's ``generated_at``; None when there is none."""
    if digest is None:
        return None
    return _read(_file(run, digest))


def _read(path: Path) -> dict[str, Any] | None:
    try:
        report = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError):
        return None
    if not isinstance(report, dict) or "generated_at" not in report:
        return None
    report["generated_at"] = datetime.now(timezone.utc).isoformat(timespec="seconds")
    return report


def _as_json(value: Any) -> Any:
    """``value`` as JSON gives it back: tuples as lists (the report holds a few empty tuples)."""
    if isinstance(value, dict):
        return {k: _as_json(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_as_json(v) for v in value]
    return value


def store(run: Any, digest: str | None, report: dict[str, Any]) -> None:
    """Keep ``report`` under ``digest`` (best effort: a cache that cannot be written is no error)."""
    if digest is None:
        return
    from commprof.safe_write import atomic_write_text

    text = json.dumps(report)
    if json.loads(text) != _as_json(report):  # read back, it would not be the report built: keep none
        return
    target = _file(run, digest)
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(target, text, "the analyze report cache")
        _keep_newest(target.parent, "*.json", KEEP)
    except Exception:  # noqa: BLE001 - a read-only or full cache folder must not fail the command
        return


# --- the report found before the run is opened -------------------------------------------------------------------

QUICK = "quick-"  # a file ``reports/quick-<quick key>`` holds the key of the report such a run was answered with
_DIGEST_CHARS = frozenset("0123456789abcdef")


@dataclass(frozen=True)
class QuickKey:
    """The key :func:`quick_key` makes, and the table-cache folders where its report may be kept."""

    digest: str
    places: list[Path]


def quick_key(path_arg: str | list[str], options: dict[str, Any]) -> QuickKey | None:
    """The key of a run before it is opened: the code, ``options`` (every option of the analysis as typed),
    the ``COMMPROF_*`` environment, Python's version, polars and numpy as installed (neither is imported) and
    a stat of every file under ``path_arg`` but the table caches. None when none is to be used
    (reports off, too many files, anything unreadable: the run is opened and says what is wrong)."""
    if not enabled():
        return None
    try:
        from commprof.ingest.cache_place import default_places
        from commprof.ingest.discover import discover_paths

        given = [path_arg] if isinstance(path_arg, str) else path_arg
        source = discover_paths(given)
        places = [place.absolute() for place in default_places(source)]
        inputs = _input_rows_of([Path(p) for p in given], [], places)
        if inputs is None:
            return None
        code = _code_rows()
    except Exception:  # noqa: BLE001 - no shortcut; the run is opened and reports the problem
        return None
    _PREPARED["code"] = code  # the full key's too (prepare and key take it from there)
    env = _env_rows()
    parts = [str(KEY_VERSION), "quick", sys.version, *map(_package_row, ("polars", "numpy")),
             source.identity, json.dumps(options, sort_keys=True, default=str), json.dumps(env),
             *code, "\1", *inputs]
    digest = _digest(parts)
    return QuickKey(digest, places)


def quick_load(quick: QuickKey | None) -> dict[str, Any] | None:
    """The report a run of the same quick key was answered with, with this run's ``generated_at``; None when
    there is none (or it is gone: the cache keeps ``KEEP`` reports)."""
    if quick is None:
        return None
    for place in quick.places:
        folder = place / FOLDER
        try:
            digest = (folder / f"{QUICK}{quick.digest}").read_text(encoding="ascii").strip()
        except (OSError, ValueError):
            continue
        if len(digest) != 64 or not set(digest) <= _DIGEST_CHARS:
            continue
        report = _read(folder / f"{digest}.json")
        if report is not None:
            return report
    return None


def remember(run: Any, quick: QuickKey | None, digest: str | None) -> None:
    """After a run answered with the report kept under ``digest``: the next run of the same quick key finds it
    before opening the run. Best effort, as :func:`store`."""
    if quick is None or digest is None or not _file(run, digest).is_file():
        return
    from commprof.safe_write import atomic_write_text

    target = _file(run, digest).parent / f"{QUICK}{quick.digest}"
    try:
        if target.is_file() and target.read_text(encoding="ascii").strip() == digest:
            return
        atomic_write_text(target, digest, "the analyze report cache")
        _keep_newest(target.parent, f"{QUICK}*", 4 * KEEP)
    except Exception:  # noqa: BLE001 - a read-only or full cache folder must not fail the command
        return
