"""``commprof record``: run a distributed training command unchanged and collect a run directory.

Launcher side (this package): the run directory, the ranks' environment, the child process, the
manifest. Rank side (``commprof.record.rank``): stdlib + torch code injected into every rank through
a ``sitecustomize`` shim. ``pgmap`` helps the ingest name the process group of every Gloo op.
The formats are in ``FORMAT.md``.
"""

from __future__ import annotations
