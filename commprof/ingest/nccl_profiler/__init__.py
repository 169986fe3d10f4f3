"""The NCCL example profiler plugin's traces (``NCCL_PROFILE_DUMP_FILE``): Chrome-trace JSON per
communicator and rank, read leniently -> the algorithm, protocol and channels NCCL actually used per
collective (the only source that says them)."""

from commprof.ingest.nccl_profiler.trace import PLUGIN_COLLS, find_traces, is_plugin_trace, read_traces

__all__ = ["PLUGIN_COLLS", "find_traces", "is_plugin_trace", "read_traces"]
