"""Readers of what NCCL saw: communicators, transports, NICs, algorithms and link tiers from NCCL's
``NCCL_DEBUG=INFO`` logs (2.18 - 2.30) and its topology / graph XML dumps.

Typical use::

    run = load_nccl("runs/job1")                 # find + parse logs and dumps
    tables = build_tables(run.logs, run.topologies, run.graphs)
    tables.nccl_communicators                    # one row per communicator, with its tier
"""

from commprof.ingest.nccl_logs.link_tiers import network_type, slowest
from commprof.ingest.nccl_logs.load import NcclInputs, NcclRun, find_nccl_inputs, load_nccl
from commprof.ingest.nccl_logs.parser import LogParser, NcclLogs, parse_nccl_logs, parse_nccl_text
from commprof.ingest.nccl_logs.tables import NcclTables, build_tables
from commprof.ingest.nccl_logs.topo_xml import GraphXml, TopologyXml, parse_graph_xml, parse_topology_xml
from commprof.vocab import SLOWNESS

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
