"""Readers of what NCCL saw: communicators, transports, NICs, algorithms and link tiers from NCCL's
``NCCL_DEBUG=INFO`` logs (2.18 - 2.30) and its topology / graph XML dumps.

Typical use::

    run = load_nccl("runs/job1")                 # find + parse logs and dumps
    tables = build_tables(run.logs, run.topologies, run.graphs)
    tables.nccl_communicators                    # one row per communicator, with its tier
"""

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from commprof.ingest.nccl_logs.link_tiers import network_type, slowest
    from commprof.ingest.nccl_logs.load import NcclInputs, NcclRun, find_nccl_inputs, load_nccl
    from commprof.ingest.nccl_logs.parser import LogParser, NcclLogs, parse_nccl_logs, parse_nccl_text
    from commprof.ingest.nccl_logs.tables import NcclTables, build_tables
    from commprof.ingest.nccl_logs.topo_xml import GraphXml, TopologyXml, parse_graph_xml, parse_topology_xml
    from commprof.vocab import SLOWNESS

# name -> the module that holds it, loaded on first use: a cached ``analyze`` looks for NCCL logs (the
# ``load`` module) on every run, and the parser's compiled patterns cost ~30 ms of imports it rarely needs
_HOME = {
    "network_type": "link_tiers", "slowest": "link_tiers",
    "NcclInputs": "load", "NcclRun": "load", "find_nccl_inputs": "load", "load_nccl": "load",
    "LogParser": "parser", "NcclLogs": "parser", "parse_nccl_logs": "parser", "parse_nccl_text": "parser",
    "NcclTables": "tables", "build_tables": "tables",
    "GraphXml": "topo_xml", "TopologyXml": "topo_xml", "parse_graph_xml": "topo_xml",
    "parse_topology_xml": "topo_xml",
}

__all__ = [
    "SLOWNESS",
    "GraphXml",
    "LogParser",
    "NcclInputs",
    "NcclLogs",
    "NcclRun",
    "NcclTables",
    "TopologyXml",
    "build_tables",
    "find_nccl_inputs",
    "load_nccl",
    "network_type",
    "parse_graph_xml",
    "parse_nccl_logs",
    "parse_nccl_text",
    "parse_topology_xml",
    "slowest",
]


def __getattr__(name: str) -> Any:
    if name == "SLOWNESS":
        from commprof.vocab import SLOWNESS

        return SLOWNESS
    if name in _HOME:
        import importlib

        return getattr(importlib.import_module(f"{__name__}.{_HOME[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
