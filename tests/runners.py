"""The runners the tests compare a result across (in this process, a local pool, a Dask cluster)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest


@contextmanager
def runner_for(where: str, tmp_path: Path) -> Iterator[Any]:
    """A runner of each kind the tests compare, open for the ``with`` block: "in process", "pool" (2 local
    processes) or "dask" (a 2-worker local cluster, closed after; skipped without dask[distributed])."""
    from commprof.ingest.runner import DaskRunner, InProcess, LocalPool

    cluster = None
    if where == "dask":
        distributed = pytest.importorskip("distributed", reason="dask[distributed] is in the dev extra")
        cluster = distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                           local_directory=str(tmp_path / "dask"))
    runner = {"in process": InProcess(), "pool": LocalPool(2)}.get(where) or DaskRunner(
        cluster.scheduler_address if cluster else "")
    try:
        with runner:
            yield runner
    finally:
        if cluster is not None:
            cluster.close()
