"""Find NCCL logs and XML dumps under a run directory, a folder or a file, and load them.

NCCL logs have no fixed name (``NCCL_DEBUG_FILE=nccl.%h.%p`` gives ``nccl.node01.1234``; often
they are just the job's stdout), so files are recognised by their first bytes, not their names.
Files whose suffix says they are something else (traces, tables, images) are never opened.
"""

from __future__ import annotations

import gzip
import os
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TypeVar

from commprof.errors import InputError
from commprof.ingest.nccl.parser import NcclLogs, parse_nccl_logs
from commprof.ingest.nccl.topo_xml import GraphXml, TopologyXml, parse_graph_xml, parse_topology_xml, xml_kind

SNIFF_BYTES = 1 << 20
LOG_MARKERS = (b"NCCL INFO", b"NCCL WARN", b"NCCL version")
NOT_LOGS = frozenset(
    ".json .parquet .pt .pth .npy .npz .pkl .pickle .png .jpg .jpeg .svg .html .zip .tar .so .py .pyc "
    ".whl .arrow .feather .csv .ipynb .nsys-rep .qdrep .sqlite .db .safetensors .bin .ckpt .pdf".split()
)
SKIP_DIRS = frozenset({"tables", "__pycache__", "node_modules"})
T = TypeVar("T")


class NoNcclLogs(InputError):
    """A readable folder with no NCCL log in it: ``commprof topology`` then shows what the run has instead."""


@dataclass
class NcclInputs:
    root: Path
    logs: list[Path] = field(default_factory=list)
    topologies: list[Path] = field(default_factory=list)
    graphs: list[Path] = field(default_factory=list)


@dataclass
class NcclRun:
    inputs: NcclInputs
    logs: NcclLogs
    topologies: list[TopologyXml]
    graphs: list[GraphXml]


def _is_log(path: Path) -> bool:
    suffixes = [s.lower() for s in path.suffixes[-2:]]
    if suffixes and (suffixes[-1] in NOT_LOGS or (suffixes[-1] == ".gz" and suffixes[:1] == [".json"])):
        return False
    try:
        if path.suffix == ".gz":
            with gzip.open(path, "rb") as gz:
                head = gz.read(SNIFF_BYTES)
        else:
            with open(path, "rb") as f:
                head = f.read(SNIFF_BYTES)
    except (OSError, EOFError):
        return False
    return any(marker in head for marker in LOG_MARKERS)


def _walk(root: Path) -> list[Path]:
    out: list[Path] = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith(".") and d not in SKIP_DIRS)
        out.extend(Path(dirpath) / name for name in sorted(filenames) if not name.startswith("."))
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
    if root.is_file():
        _classify(root, inputs)
        if not inputs.logs:
            raise InputError("not an NCCL log (no 'NCCL INFO' lines)", root)
        return inputs
    raw_nccl = root / "raw" / "nccl"
    if raw_nccl.is_dir():
        for file in _walk(root / "raw"):
            _classify(file, inputs, logs=raw_nccl in file.parents)
    else:
        for file in _walk(root):
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


def load_nccl(path: str | Path) -> NcclRun:
    """Find and parse everything NCCL wrote under ``path``. Broken XML dumps are skipped and listed
    in ``logs.stats.skipped_files``; only a missing path or no log at all raises."""
    inputs = find_nccl_inputs(path)
    logs = parse_nccl_logs(inputs.logs)
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
