"""The Kineto (torch.profiler Chrome-trace JSON) reader: one trace file -> one rank's tables.

``reader.extract`` drives the pass (``scan.Scan``) over the events streamed by ``stream``; ``cpu`` and
``times`` turn what the pass kept into CPU-run tables, step marks and launch times; ``comm`` reads
collective arguments; ``gloo_calls`` / ``gloo_groups`` attribute Gloo worker ops to their calls and groups.
"""

from commprof.ingest.common.rank_trace import RankTrace, rank_from_file_name
from commprof.ingest.kineto.reader import extract

__all__ = ["RankTrace", "extract", "rank_from_file_name"]
