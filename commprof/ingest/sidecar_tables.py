"""The run's non-trace inputs as cached tables: NCCL logs (communicators mapped to global ranks, NIC
speeds), per-host topology captures and Flight Recorder dumps.

Each is parsed once and cached under ``tables/sidecars/`` keyed by the inputs' paths, sizes and mtimes
and the ingest version, so a cached re-open of a run does not re-parse its NCCL logs.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import polars as pl

from commprof.errors import CommprofError
from commprof.ingest.flight_recorder import FLIGHT_RECORDER, FR_GROUPS, dump_rank, find_dumps, read_dumps
from commprof.ingest.nccl_ras import find_reports
from commprof.ingest.nccl_ras.tables import RAS_COUNTS, RAS_GROUPS, RAS_NOTES, read_reports
from commprof.ingest.schema import INGEST_VERSION
from commprof.ingest.topology import CommInfo, HostTopology, comm_rank_sets, read_topologies

if TYPE_CHECKING:
    from commprof.ingest.nccl_logs.load import NcclInputs

NCCL_COMMS = pl.Schema({"comm_id": pl.String(), "ranks": pl.List(pl.Int32()), "tier": pl.String(),
                        "ops": pl.List(pl.String()), "colls": pl.Int64(), "link_gbps": pl.Float64()})
TOPOLOGY = pl.Schema({"host": pl.String, "gpu_a": pl.Int32, "gpu_b": pl.Int32, "path": pl.String})
IB_PORTS = pl.Schema({"host": pl.String, "link_layer": pl.String, "gbps": pl.Float64})
SWITCHES = pl.Schema({"host": pl.String, "switch": pl.String})
TOPOLOGY_CONF = "topology.conf"  # raw/topology/topology.conf: SLURM's switch tree, copied by record
# Per host, what NCCL's set-up chose (the findings' evidence for Socket fallback, GDR/P2P disabled, NVLS):
# links are distinct (communicator, channel, from, to) connections the logs printed.
_COUNTS = ("ib_nics", "gdr_enabled_nics", "gdr_disabled_nics", "net_links", "socket_links", "ib_links", "gdr_links",
           "p2p_links", "shm_links")
NCCL_SETUP = pl.Schema({"host": pl.String(), "processes": pl.Int64(), "networks": pl.List(pl.String()),
                        **{c: pl.Int64() for c in _COUNTS}, "nvls_available": pl.Boolean(), "nvls_comms": pl.Int64()})
@dataclass(frozen=True)
class SidecarTables:
    nccl_comms: pl.DataFrame  # one row per NCCL communicator whose members map to traced ranks
    topology: pl.DataFrame  # nvidia-smi topo -m cells per host
    ib_ports: pl.DataFrame  # active InfiniBand/RoCE ports per host
    flight_recorder: pl.DataFrame  # one row per Flight Recorder entry
    warnings: tuple[str, ...] = ()
    nccl_setup: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=NCCL_SETUP))  # one row per host
    # each dumping rank's process groups as Flight Recorder names them (pg_config)
    flight_recorder_groups: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=FR_GROUPS))
    # host -> its leaf switch, from raw/topology/topology.conf (SLURM's form; commprof.ingest.switches)
    switches: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=SWITCHES))
    # NCCL RAS status reports in raw/ (commprof.ingest.nccl_ras): summary rows, ranks per op count, other notes
    ras_groups: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RAS_GROUPS))
    ras_counts: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RAS_COUNTS))
    ras_notes: pl.DataFrame = field(default_factory=lambda: pl.DataFrame(schema=RAS_NOTES))

    def leaf_switches(self) -> dict[str, str]:
        return dict(self.switches.select("host", "switch").iter_rows())

    def communicators(self) -> list[CommInfo]:
        return [CommInfo(r["comm_id"], frozenset(r["ranks"]), r["tier"], set(r["ops"]), r["colls"], r["link_gbps"])
                for r in self.nccl_comms.iter_rows(named=True)]

    def host_topologies(self) -> dict[str, HostTopology]:
        out: dict[str, HostTopology] = {}
        for host in sorted(set(self.topology["host"].to_list()) | set(self.ib_ports["host"].to_list())):
            cells = self.topology.filter(pl.col("host") == host)
            ports = self.ib_ports.filter(pl.col("host") == host)
            out[host] = HostTopology(
                {(a, b): p for a, b, p in cells.select("gpu_a", "gpu_b", "path").iter_rows()},
                [(layer, gbps) for layer, gbps in ports.select("link_layer", "gbps").iter_rows()],
            )
        return out


def empty_sidecars() -> SidecarTables:
    return SidecarTables(pl.DataFrame(schema=NCCL_COMMS), pl.DataFrame(schema=TOPOLOGY),
                         pl.DataFrame(schema=IB_PORTS), pl.DataFrame(schema=FLIGHT_RECORDER),
                         nccl_setup=pl.DataFrame(schema=NCCL_SETUP))


@dataclass(frozen=True)
class _Found:
    """What one root holds (each looked for once: 16,384 NCCL logs were walked and sniffed twice, the RAS search
    too): the NCCL logs and XML dumps, Flight Recorder dumps, RAS reports, and every input file (the cache key)."""

    files: list[Path]
    nccl: NcclInputs | None
    dumps: list[Path]
    reports: list[Path]


def _inputs(root: Path) -> _Found:
    from commprof.ingest.nccl_logs import find_nccl_inputs

    files: list[Path] = []
    nccl = None
    try:
        nccl = find_nccl_inputs(root)
        files += [*nccl.logs, *nccl.topologies, *nccl.graphs]
    except CommprofError:
        pass
    folder = root / "raw" / "topology"
    if folder.is_dir():
        files += sorted(p for p in folder.glob("*.json") if p.is_file())
        files += [p for p in (folder / TOPOLOGY_CONF,) if p.is_file()]
    dumps, reports = find_dumps(root), find_reports(root, frozenset(nccl.logs) if nccl else ())
    return _Found(sorted(set(files) | set(dumps) | set(reports)), nccl, dumps, reports)


def _key(files: list[Path], ranks: pl.DataFrame) -> str:
    h = hashlib.sha1(f"v{INGEST_VERSION}".encode())
    for f in files:
        st = f.stat()
        h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    # communicator members are mapped through the ranks' hosts, pids and devices
    h.update(ranks.select("rank", "host", "pid", "device", "local_rank").write_csv().encode())
    return h.hexdigest()


def load_sidecars(roots: Sequence[Path], ranks: pl.DataFrame, world_size: int | None,
                  cache: Path) -> SidecarTables:
    """The sidecar tables of a run directory or folder (or of each node's, for a job recorded into several),
    from the cache when nothing changed."""
    roots = [r for r in roots if r.is_dir()]
    if not roots:
        return empty_sidecars()
    found = [_inputs(root) for root in roots]
    files = sorted({f for each in found for f in each.files})
    if not files:
        return empty_sidecars()
    key = _key(files, ranks)
    folder = cache / "sidecars"
    cached = _read_cache(folder, key)
    if cached is not None:
        return cached
    warnings: list[str] = []
    comms, setup = _nccl_comms([each.nccl for each in found if each.nccl is not None], ranks, world_size, warnings)
    fr_entries, fr_groups = read_dumps(sorted({d for each in found for d in each.dumps},
                                                   key=lambda d: (dump_rank(d) or 0, str(d))), warnings)
    ras = read_reports(sorted({r for each in found for r in each.reports}), warnings)
    tables = SidecarTables(comms, *_topology(roots), fr_entries, tuple(warnings), setup, fr_groups,
                           _switches(roots, warnings), ras.groups, ras.counts, ras.notes)
    _write_cache(folder, key, tables)
    return tables


def _nccl_comms(found: Sequence[NcclInputs], ranks: pl.DataFrame, world_size: int | None,
                warnings: list[str]) -> tuple[pl.DataFrame, pl.DataFrame]:
    from commprof.ingest.nccl_logs import build_tables, load_nccl
    from commprof.ingest.nccl_logs.load import merge_inputs

    if not found:
        return pl.DataFrame(schema=NCCL_COMMS), pl.DataFrame(schema=NCCL_SETUP)
    nccl = load_nccl(found[0].root, merge_inputs(found))
    tables = build_tables(nccl.logs, nccl.topologies, nccl.graphs)
    if nccl.logs.stats.pasted_files:
        warnings.append(f"NCCL logs: {len(nccl.logs.stats.pasted_files)} file(s) pasted without their "
                        "host:pid:tid [dev] NCCL INFO prefixes: hosts and ranks unknown, so their communicators "
                        "map to no rank")
    comms = comm_rank_sets(tables, ranks, world_size, warnings)
    rows = [{"comm_id": c.comm_id, "ranks": sorted(c.ranks), "tier": c.tier, "ops": sorted(c.ops),
             "colls": c.colls, "link_gbps": c.link_gbps} for c in comms]
    return pl.DataFrame(rows, schema=NCCL_COMMS), _nccl_setup(nccl.logs.processes, tables.nccl_links,
                                                              tables.nccl_nics, tables.nccl_comms)


def _nccl_setup(processes: list[Any], links: pl.DataFrame, nics: pl.DataFrame, comms: pl.DataFrame) -> pl.DataFrame:
    """Per host: networks NCCL said it uses, its IB/RoCE NICs and their GDR state, connections by transport."""
    hosts = sorted({p.host for p in processes if p.host})
    if not hosts:
        return pl.DataFrame(schema=NCCL_SETUP)
    conn = links.filter(pl.col("host").is_not_null() & (pl.col("transport") != "nvls")).unique(
        ["comm_id", "host", "channel", "from_rank", "to_rank", "transport", "direction"])
    net = pl.col("transport") == "net"
    detail = pl.col("detail").fill_null("").str.to_lowercase()
    per_link = conn.group_by("host").agg(
        net.sum().alias("net_links"), (net & (detail == "socket")).sum().alias("socket_links"),
        (net & detail.str.starts_with("ib")).sum().alias("ib_links"),
        (net & pl.col("gdrdma").fill_null(False)).sum().alias("gdr_links"),
        (pl.col("transport") == "p2p").sum().alias("p2p_links"),
        (pl.col("transport") == "shm").sum().alias("shm_links"))
    ib = nics.filter(pl.col("network").is_in(["ib", "roce"]))
    per_nic = ib.group_by("host").agg(pl.len().alias("ib_nics"),
                                      pl.col("gdr").fill_null(False).sum().alias("gdr_enabled_nics"),
                                      (~pl.col("gdr").fill_null(True)).sum().alias("gdr_disabled_nics"))
    nvls_comms = comms.filter(pl.col("nvls").fill_null(False)).group_by("host").agg(
        pl.col("comm_id").n_unique().alias("nvls_comms"))
    by_host: dict[str, list[Any]] = {}
    for p in processes:  # one pass (a list per host was one pass per host: 2,048 x 16,384 processes)
        if p.host:
            by_host.setdefault(p.host, []).append(p)
    rows = []
    for host in hosts:
        procs = by_host[host]
        nvls = [p.nvls_available for p in procs if p.nvls_available is not None]
        rows.append({"host": host, "processes": len(procs),
                     "networks": sorted({p.net_name for p in procs if p.net_name}),
                     "nvls_available": any(nvls) if nvls else None})
    out = pl.DataFrame(rows, schema={"host": pl.String, "processes": pl.Int64, "networks": pl.List(pl.String),
                                     "nvls_available": pl.Boolean})
    for part in (per_link, per_nic, nvls_comms):
        out = out.join(part, on="host", how="left")
    return out.with_columns(pl.col(c).fill_null(0).cast(pl.Int64) for c in (*_COUNTS, "nvls_comms")).select(
        list(NCCL_SETUP))


def _topology(roots: Sequence[Path]) -> tuple[pl.DataFrame, pl.DataFrame]:
    topos = {host: topo for root in roots for host, topo in read_topologies(root).items()}
    cells = [{"host": h, "gpu_a": a, "gpu_b": b, "path": p}
             for h, t in topos.items() for (a, b), p in t.gpu_paths.items()]
    ports = [{"host": h, "link_layer": layer, "gbps": gbps} for h, t in topos.items() for layer, gbps in t.ib]
    return pl.DataFrame(cells, schema=TOPOLOGY), pl.DataFrame(ports, schema=IB_PORTS)


def _switches(roots: Sequence[Path], warnings: list[str]) -> pl.DataFrame:
    from commprof.ingest.switches import read_topology_conf

    leaf: dict[str, str] = {}
    for root in roots:
        path = root / "raw" / "topology" / TOPOLOGY_CONF
        if path.is_file():
            try:
                leaf.update(read_topology_conf(path))
            except CommprofError as err:
                warnings.append(f"{err}; tiers are decided without it")
    return pl.DataFrame(list(leaf.items()), schema=SWITCHES, orient="row")


def _read_cache(folder: Path, key: str) -> SidecarTables | None:
    try:
        meta = json.loads((folder / "key.json").read_text())
        if meta.get("key") != key:
            return None
        frames = [pl.read_parquet(folder / f"{name}.parquet") for name in _NAMES]
        ras = [pl.read_parquet(folder / f"{name}.parquet") if (folder / f"{name}.parquet").is_file()
               else pl.DataFrame(schema=schema) for name, schema in _RAS_NAMES]
    except (OSError, ValueError, RecursionError, pl.exceptions.PolarsError):
        return None
    return SidecarTables(frames[0], frames[1], frames[2], frames[3], tuple(meta.get("warnings") or ()), frames[4],
                         frames[5], frames[6], *ras)


_NAMES = ("nccl_comms", "topology", "ib_ports", "flight_recorder", "nccl_setup", "flight_recorder_groups", "switches")
# written only for a run with NCCL RAS reports (a run without keeps the files it always had)
_RAS_NAMES = (("ras_groups", RAS_GROUPS), ("ras_counts", RAS_COUNTS), ("ras_notes", RAS_NOTES))


def _write_cache(folder: Path, key: str, tables: SidecarTables) -> None:
    from commprof.safe_write import WriteError, atomic_write

    try:
        ras = [name for name, _ in _RAS_NAMES if getattr(tables, name).height]
        for name in (*_NAMES, *ras):
            atomic_write(folder / f"{name}.parquet", getattr(tables, name).write_parquet, "the sidecar tables",
                         make_parents=True)
        for name, _ in _RAS_NAMES:
            if name not in ras:
                (folder / f"{name}.parquet").unlink(missing_ok=True)  # a report removed since the last parse
        atomic_write(folder / "key.json", lambda tmp: tmp.write_text(json.dumps(
            {"key": key, "warnings": list(tables.warnings)})), "the sidecar tables", make_parents=True)
    except (WriteError, pl.exceptions.PolarsError):
        pass  # a read-only or full cache only costs a re-parse next time (temporary files are removed)
