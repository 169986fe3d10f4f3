"""The NCCL Inspector reader: the profiler plugin's JSON-lines logs (``<host>-pid<pid>.log``, one per process,
``coll_perf`` and, from NCCL 2.30.3, ``p2p_perf`` records; output format v4.0 and what came before) -> one
row per record: communicator, its size and node count, the rank in it, op, message size, execution time and
the plugin's own algbw/busbw."""

from commprof.ingest.inspector.logs import INSPECTOR, find_logs, read_logs

__all__ = ["INSPECTOR", "find_logs", "read_logs"]
