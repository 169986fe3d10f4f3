"""A ``commprof record`` rank sidecar (raw/ranks/rank-N.json) checked where it is read: each field that
ingest uses has its type and range verified, and a bad one is dropped with a line saying so (a sidecar
written by hand or half by a dying rank must not become a traceback in the Gloo attribution)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

MAX_RANK = 1 << 24
_TEXT = (str, type(None))


def _plain_int(value: Any, high: int) -> bool:
    return type(value) is int and 0 <= value < high


def clean_sidecar(data: Any, name: str) -> tuple[dict[str, Any] | None, list[str]]:
    """(the sidecar with its bad fields dropped, what was dropped); None when it is not an object."""
    if not isinstance(data, dict):
        return None, [f"{name}: not a rank sidecar (not a JSON object); ignored"]
    out = dict(data)
    problems: list[str] = []
    for key, high in (("rank", MAX_RANK), ("pid", 1 << 62)):
        if out.get(key) is not None and not _plain_int(out[key], high):
            problems.append(f"{name}: ignored {key} {str(out[key])[:30]!r}")
            out[key] = None
    groups = out.get("process_groups")
    if groups is not None and not isinstance(groups, list):
        problems.append(f"{name}: ignored process_groups (not a list)")
        groups = []
    kept = []
    for group in groups or []:
        group_name = group.get("name") if isinstance(group, dict) else None
        if not isinstance(group_name, (str, int)) or isinstance(group_name, bool):
            problems.append(f"{name}: ignored a process group without a name")
            continue
        clean = {**group, "name": str(group_name)}
        tids = clean.get("worker_tids")
        if tids is not None and not (isinstance(tids, list) and all(_plain_int(t, 1 << 62) for t in tids)):
            problems.append(f"{name}: ignored worker_tids of group {clean['name']!r} (not thread ids)")
            clean["worker_tids"] = None
        for key in ("desc", "backend"):
            if not isinstance(clean.get(key), _TEXT):
                clean[key] = None
        if clean.get("size") is not None and not _plain_int(clean["size"], MAX_RANK + 1):
            clean["size"] = None
        if not isinstance(clean.get("ranks"), (list, str, type(None))):
            clean["ranks"] = None
        kept.append(clean)
    if groups is not None:
        out["process_groups"] = kept
    return out, problems


MSGSPEC_FROM = 256  # sidecars: from this many, msgspec reads them (json below: a warm open imports no parser)


def decode_sidecar(raw: bytes, fast: bool = True) -> Any:
    """A sidecar's JSON. ``fast``: msgspec (several times faster than json on the long member lists: 16,384
    sidecars listing the world group's members), json where msgspec refuses what json reads (NaN, integers
    past 64 bits). Raises ValueError where neither reads it."""
    if not fast:
        return json.loads(raw)
    import msgspec

    try:
        return msgspec.json.decode(raw)
    except msgspec.DecodeError:
        return json.loads(raw)


def decode_slim(raw: bytes) -> Any:
    """What the commprof process reads of a sidecar: every field ``clean_sidecar`` checks and ``SidecarIndex``
    keeps, its groups' member lists skipped (msgspec.Raw: scanned, never made into numbers; 16,384 sidecars
    listing the world group's members read ~5x faster). A sidecar whose fields are not of those shapes is read
    whole (:func:`decode_sidecar`), so that ``clean_sidecar`` says what is wrong. Raises ValueError as it does."""
    import msgspec

    decoder = _SLIM_DECODER[0]
    if decoder is None:  # defstruct: this module's annotations are strings, a local class's not resolvable
        fields = ("name", "desc", "size", "backend", "worker_tids")
        group = msgspec.defstruct("Group", [*((f, Any, None) for f in fields),
                                            ("ranks", msgspec.Raw, msgspec.Raw(b"null"))])
        top = ("rank", "pid", "host", "window", "ended_at")
        slim_type = msgspec.defstruct("Slim", [*((f, Any, None) for f in top),
                                               ("process_groups", list[group] | None, None)])  # type: ignore[valid-type]
        decoder = _SLIM_DECODER[0] = msgspec.json.Decoder(slim_type)
    try:
        slim = decoder.decode(raw)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return decode_sidecar(raw)
    out = {f: getattr(slim, f) for f in ("rank", "pid", "host", "window", "ended_at")}
    if slim.process_groups is not None:
        out["process_groups"] = [{"name": g.name, "desc": g.desc, "size": g.size, "backend": g.backend,
                                  "worker_tids": g.worker_tids} for g in slim.process_groups]
    return out


_SLIM_DECODER: list[Any] = [None]


def read_sidecar(path: str) -> dict[str, Any] | None:
    """One sidecar file read and cleaned (its problems were reported where the run's sidecars were read)."""
    try:
        with open(path, "rb") as fh:
            data = decode_sidecar(fh.read())
    except (OSError, ValueError, RecursionError):
        return None
    return clean_sidecar(data, path)[0]


class SidecarIndex:
    """The run's rank sidecars as read once by the commprof process: each one's identity and end (what the
    run's facts use; no member lists) and where its file is. A parse task is sent this index, not the sidecars,
    and reads only the one its trace needs: every sidecar lists its groups' members (16,384 of them for the
    world group at 16,384 ranks), and sending them all to every task cost tasks x ranks x group size.

    Iterating gives the slim sidecars in the order read. ``pick`` keeps the rule of a list of sidecars: the
    first with the trace's rank, else the first with its OS pid."""

    _SLIM = ("rank", "pid", "host", "window", "ended_at")

    def __init__(self) -> None:
        self.paths: list[str] = []
        self.by_rank: dict[int, int] = {}
        self.by_pid: dict[int, int] = {}
        self._slim: list[dict[str, Any]] = []

    def add(self, path: str, clean: dict[str, Any]) -> None:
        index = len(self.paths)
        self.paths.append(path)
        if type(clean.get("rank")) is int:
            self.by_rank.setdefault(clean["rank"], index)
        if type(clean.get("pid")) is int:
            self.by_pid.setdefault(clean["pid"], index)
        self._slim.append({k: clean[k] for k in self._SLIM if k in clean})

    def __iter__(self) -> Iterator[dict[str, Any]]:
        return iter(self._slim)

    def __len__(self) -> int:
        return len(self.paths)

    def __bool__(self) -> bool:
        return bool(self.paths)

    def __getstate__(self) -> dict[str, Any]:  # to a worker: the paths and the lookups only
        return {"paths": self.paths, "by_rank": self.by_rank, "by_pid": self.by_pid}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.paths, self.by_rank, self.by_pid, self._slim = state["paths"], state["by_rank"], state["by_pid"], []

    def pick(self, rank: int | None, pid: Any) -> dict[str, Any] | None:
        index = self.by_rank.get(rank) if rank is not None else None
        if index is None and type(pid) is int:
            index = self.by_pid.get(pid)
        return read_sidecar(self.paths[index]) if index is not None else None
