"""Where store.py finds ``NotATraceError`` until its import names ``commprof.ingest.kineto.stream``.

The Kineto streaming reader moved to ``kineto/stream.py`` with the rest of that reader; store.py is being
changed by another piece of work at the same time, so its import line is left for the merge: remove this
module then.
"""

from commprof.ingest.kineto.stream import NotATraceError

__all__ = ["NotATraceError"]
