"""Find NCCL logs and XML dumps under a run directory, a folder or a file, and load them.

NCCL logs have no fixed name (``NCCL_DEBUG_FILE=nccl.%h.%p`` gives ``nccl.node01.1234``; often
they are just the job's stdout), so files are recognised by their first bytes, not their names.
Files whose suffix says they are something else (traces, tables, images) are never opened.
"""

from __future__ import annotations

import gzip
import os
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from commprof.errors import InputError
from commprof.ingest.discover import regular_file_problem
from commprof.ingest.nccl_logs.topo_xml import GraphXml, TopologyXml, parse_graph_xml, parse_topology_xml, xml_kind
from commprof.ingest.nccl_ras import is_ras_report

SNIFF_BYTES = 1 << 20
LOG_MARKERS = (b"NCCL INFO", b"NCCL WARN", b"NCCL version")
NOT_LOGS = frozenset(
    ".json .parquet .pt .pth .npy .npz .pkl .pickle .png .jpg .jpeg .svg .html .zip .tar .so .py .pyc "
    ".whl .arrow .feather .csv .ipynb .nsys-rep .qdrep .sqlite .db .safetensors .bin .ckpt .pdf".split()
)
SKIP_DIRS = frozenset({"tables", "__pycache__", "node_modules"})
T = TypeVar("T")

if TYPE_CHECKING:
    from commprof.ingest.nccl_logs.parser import NcclLogs


class NoNcclLogs(InputError):
    """A readable folder with no NCCL log in it: ``commprof topology`` then shows what the run has instead."""


@dataclass
class NcclInputs:
    root: Path
    logs: list[Path] = field(default_factory=list)
    topologies: list[Path] = field(default_factory=list)
    graphs: list[Path] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # files passed over, and why


@dataclass
class NcclRun:
    inputs: NcclInputs
    logs: NcclLogs
    topologies: list[TopologyXml]
    graphs: list[GraphXml]


def _is_log(path: Path) -> bool:
    """Whether the file holds NCCL lines anywhere and is no RAS report (which names NCCL's version too)."""
    found, head = _sniff(path)
    return found and not is_ras_report(path, head)


def _sniff(path: Path) -> tuple[bool, bytes]:
    """Whether the file holds NCCL lines anywhere, and its head as read (for the RAS check: one read a file). The
    job's stdout can carry megabytes of other output before NCCL's first line, so the whole file is searched (a
    block at a time, at memchr speed), and UTF-16 text (PowerShell's ``>``) is searched in its own encoding."""
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if suffixes and (suffixes[-1] in NOT_LOGS or (suffixes[-1] == ".gz" and suffixes[:1] == [".json"])):
        return False, b""
    head = b""
    try:
        with gzip.open(path, "rb") if path.suffix == ".gz" else open(path, "rb") as f:
            # a small file's size, not a buffer of SNIFF_BYTES each (16,384 logs of 8 kB)
            head = f.read(SNIFF_BYTES if path.suffix == ".gz" else min(SNIFF_BYTES, os.fstat(f.fileno()).st_size + 1))
            markers = _markers(head)
            tail = b""
            block = head
            while block:
                window = tail + block
                if any(marker in window for marker in markers):
                    return True, head
                tail = window[-64:]
                block = f.read(SNIFF_BYTES)
    except (OSError, EOFError, zlib.error):
        return False, head
    return _is_paste(path, head), head


# words every bare message scan.is_paste counts holds one of (patterns.BARE_MESSAGE): a file without any of them in
# its head is no paste, decided without importing the parser's compiled patterns (a warm analyze of a run that holds
# some other text file stays light: tests/test_warm_imports.py)
_PASTE_WORDS = (b"Channel ", b"Ring ", b"Tree", b"comm 0x", b"nccl", b"NET/", b"Using network", b"Connected ",
                b"coll channels", b"Pattern ", b"NVLS", b"Bootstrap", b"cudaDriverVersion", b"Setting affinity",
                b"P2P Chunksize", b"NCCL_", b"Init timings", b"opCount", b"Bytes -> Algo", b"=== System")


def _is_paste(path: Path, head: bytes = b"") -> bool:
    """A log pasted without its prefixes carries no marker; its messages still read as NCCL's (``scan``)."""
    if head and b"\0" not in head[:64] and not any(word in head for word in _PASTE_WORDS):
        return False
    from commprof.ingest.nccl_logs.scan import is_paste

    try:
        return is_paste(path)
    except (OSError, EOFError, zlib.error, UnicodeError):
        return False


def _markers(head: bytes) -> tuple[bytes, ...]:
    if head[:2] in (b"\xff\xfe", b"\xfe\xff") or head[1:2] == b"\0" or head[:1] == b"\0":
        be = head[:2] == b"\xfe\xff" or head[:1] == b"\0"
        return tuple(m.decode().encode("utf-16-be" if be else "utf-16-le") for m in LOG_MARKERS)
    return LOG_MARKERS


def _walk(root: Path, skipped: list[str]) -> list[Path]:
    """Regular files only: a FIFO would block the read forever (each one passed over is listed)."""
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS)
        for name in sorted(filenames):
            path = Path(dirpath) / name
            if name.startswith("."):
                continue
            why = regular_file_problem(path)
            if why is None:
                out.append(path)
            else:
                skipped.append(f"{path}: {why}; skipped")
    return out


def _classify(path: Path, inputs: NcclInputs, logs: bool = True) -> None:
    if path.suffix.lower() == ".xml":
        kind = xml_kind(path)
        if kind == "topology":
            inputs.topologies.append(path)
        elif kind == "graph":
            inputs.graphs.append(path)
    elif logs and _is_log(path):
        inputs.logs.append(path)


def find_nccl_inputs(path: str | Path) -> NcclInputs:
    """Logs and XML dumps under ``path``: a run directory (logs in ``raw/nccl/``, dumps anywhere in
    ``raw/``), any folder (searched recursively), or one file. Raises InputError when there is no
    such path or no NCCL log in it."""
    root = Path(path)
    if not root.exists():
        raise InputError("no such file or folder", root)
    inputs = NcclInputs(root=root)
    if not root.is_dir():
        why = regular_file_problem(root)
        if why:
            raise InputError(why, root)
        _classify(root, inputs)
        if not inputs.logs:
            raise InputError("not an NCCL log (no 'NCCL INFO' lines)", root)
        return inputs
    raw_nccl = root / "raw" / "nccl"
    if raw_nccl.is_dir():
        for file in _walk(root / "raw", inputs.skipped):
            _classify(file, inputs, logs=raw_nccl in file.parents)
    else:
        for file in _walk(root, inputs.skipped):
            _classify(file, inputs)
    if not inputs.logs:
        where = raw_nccl if raw_nccl.is_dir() else root
        raise NoNcclLogs("no NCCL logs found (no file with 'NCCL INFO' lines)", where)
    return inputs


def _assign_host(xml: TopologyXml, hosts: set[str]) -> None:
    """A dump named after a host (``topo.node01.xml``) describes that host."""
    name = Path(xml.path).name
    matches = [h for h in hosts if h in name]
    if len(matches) == 1:
        xml.host = matches[0]


def find_all_inputs(paths: Sequence[str | Path]) -> NcclInputs:
    """The NCCL inputs of several folders (the nodes of one job, each its own run directory); raises like
    :func:`find_nccl_inputs` only when none of them holds a log."""
    if len(paths) == 1:
        return find_nccl_inputs(paths[0])
    found: list[NcclInputs] = []
    first_error: InputError | None = None
    for path in paths:
        try:
            found.append(find_nccl_inputs(path))
        except InputError as err:  # noqa: PERF203 - one a folder
            first_error = first_error or err
    if not found:
        raise first_error or NoNcclLogs("no NCCL logs found", Path(paths[0]))
    return merge_inputs(found)


def merge_inputs(found: Sequence[NcclInputs]) -> NcclInputs:
    """The inputs of several folders as one (their order kept); the first folder's root names them."""
    if len(found) == 1:
        return found[0]
    inputs = NcclInputs(root=found[0].root)
    for each in found:
        for name in ("logs", "topologies", "graphs", "skipped"):
            getattr(inputs, name).extend(getattr(each, name))
    return inputs


def load_nccl(path: str | Path | Sequence[str | Path], inputs: NcclInputs | None = None) -> NcclRun:
    """Find and parse everything NCCL wrote under ``path`` (or under each of several paths: the nodes of one
    job); ``inputs``: what was found there already (``find_nccl_inputs``; not looked for again). Broken XML
    dumps are skipped and listed in ``logs.stats.skipped_files``; only a missing path or no log at all raises."""
    # here, not at the top: finding the inputs (every cached ``analyze`` does) needs no parser
    from commprof.ingest.nccl_logs.parser import parse_nccl_logs

    if inputs is None:
        inputs = find_all_inputs([path] if isinstance(path, (str, Path)) else list(path))
    logs = parse_nccl_logs(inputs.logs)
    logs.stats.skipped_files.extend(inputs.skipped)
    hosts = {p.host for p in logs.processes if p.host}
    topologies: list[TopologyXml] = []
    graphs: list[GraphXml] = []
    for xml_path in inputs.topologies:
        topo = _try_xml(parse_topology_xml, xml_path, logs)
        if topo is not None:
            _assign_host(topo, hosts)
            topologies.append(topo)
    for xml_path in inputs.graphs:
        graphs.extend(_try_xml(parse_graph_xml, xml_path, logs) or [])
    return NcclRun(inputs, logs, topologies, graphs)


def _try_xml(parse: Callable[[Path], T], path: Path, logs: NcclLogs) -> T | None:
    try:
        return parse(path)
    except InputError as err:
        logs.stats.skipped_files.append(str(err))
        return None
