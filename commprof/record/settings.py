"""What one ``commprof record`` invocation was asked to do."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from commprof.record.rank.config import WindowSettings

DEFAULT_FR_BUFFER_SIZE = 20000


@dataclass(frozen=True)
class RecordSettings:
    output: Path | None = None  # None: runs/<UTC timestamp>-<random>
    force: bool = False
    window: WindowSettings = field(default_factory=WindowSettings)
    nccl_coll: bool = False
    fr_buffer_size: int = DEFAULT_FR_BUFFER_SIZE  # 0: leave Flight Recorder alone
    topology: bool = True
    job_id: str | None = None  # joins the launchers of one job that share nothing else (see record/job.py)

    def as_manifest(self) -> dict[str, object]:
        w = self.window
        return {
            "window": {
                "mode": w.mode,
                "wait": w.wait,
                "warmup": w.warmup,
                "active": w.active,
                "start_after_s": w.start_after_s,
                "duration_s": w.duration_s,
                "every": w.every,
                "every_s": w.every_s,
                "on_demand": w.on_demand,
                "keep_windows": w.keep_windows,
            },
            "nccl_coll": self.nccl_coll,
            "flight_recorder_buffer_size": self.fr_buffer_size,
            "topology": self.topology,
        }
