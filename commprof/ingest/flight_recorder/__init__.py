"""The Flight Recorder reader: PyTorch's per-rank dumps (restricted unpickler, nothing constructed) and the
JSON dumps ``commprof record`` writes -> entries (collectives with group, seq, op, sizes, state, duration
where timed) and each rank's groups. Used beside traces (desync, the hang report) and alone (a folder of
dumps: the hang report, with every timing figure said to be absent)."""

from __future__ import annotations

from pathlib import Path

from commprof.ingest.flight_recorder.dumps import FLIGHT_RECORDER, FR_GROUPS, dump_rank, load_dump, read_dumps

__all__ = ["FLIGHT_RECORDER", "FR_GROUPS", "dump_rank", "find_dumps", "load_dump", "read_dumps"]

_PICKLE_HEADS = (b"\x80\x02", b"\x80\x03", b"\x80\x04", b"\x80\x05")


def _looks_like_dump(path: Path) -> bool:
    """A pickle (protocol 2-5) whose name ends in a rank number: PyTorch's ``<prefix><rank>`` dumps."""
    if dump_rank(path) is None or path.name.startswith("."):
        return False
    try:
        with path.open("rb") as fh:
            return fh.read(2) in _PICKLE_HEADS
    except OSError:
        return False


def find_dumps(root: Path) -> list[Path]:
    """Dumps of a run directory (``raw/flight_recorder/``), of a folder's ``flight_recorder/`` subfolder, or
    lying in the folder itself (PyTorch's pickles, found by their first bytes)."""
    found: list[Path] = []
    for folder in (root / "raw" / "flight_recorder", root / "flight_recorder"):
        if folder.is_dir():
            found += [p for p in folder.iterdir() if p.is_file() and not p.name.startswith(".")
                      and (p.suffix == ".json" or _looks_like_dump(p))]
    if root.is_dir():
        found += [p for p in root.iterdir() if p.is_file() and _looks_like_dump(p)]
    return sorted(set(found), key=lambda p: (dump_rank(p) or 0, str(p)))
