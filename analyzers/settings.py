"""The options of an analysis (``analyze``'s flags), in a module of their own: the command reads them, and
keys its report cache on them, before it knows whether the analysis (commprof.analyzers.pipeline, which
re-exports this class) has to be imported at all."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from commprof.analyzers.classify import Layout


@dataclass(frozen=True)
class AnalysisSettings:
    hta_compat: bool = False
    top: int = 10
    layout: Layout | None = None  # --layout: decides dimensions before names and structure
    network: str | None = None  # --network ib|roce|ethernet: groups across nodes when nothing else says
    gpus_per_node: int | None = None  # --gpus-per-node: hosts = rank // N when traces carry none
    peaks: dict[str, float] = field(default_factory=dict)  # --peak: GB/s per tier, over the defaults
    what_if: tuple[str, ...] = ()  # --what-if changes, estimated together (analyzers/whatif.py)
    # --switches: (host, leaf switch) from SLURM's topology.conf, over the run's raw/topology/topology.conf
    switches: tuple[tuple[str, str], ...] = ()
