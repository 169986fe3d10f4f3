"""Flight Recorder dumps of a hung job at any scale (issue 39): one pickle per rank, as PyTorch writes them on a
watchdog timeout (``TORCH_NCCL_DUMP_ON_TIMEOUT``, ``TORCH_NCCL_DEBUG_INFO_TEMP_FILE=.../nccl_trace_rank_``),
with one data-parallel group stuck.

The job is ``tp x dp`` ranks (Megatron's order: TP groups are ``tp`` consecutive ranks, DP group ``j`` is every
rank ``r`` with ``r % tp == j``). Each step every rank runs ``tp_calls`` TP all-reduces and ``dp_calls`` DP
reduce-scatters (gradient buckets, the last one the step's last call). Each dump holds the rank's last
``entries`` calls (the ring buffer) and, as torch writes it, every group of the rank in ``pg_config`` with its
members as a string: the default group lists all ``tp x dp`` ranks in every dump.

The hang, in the last step: ``lagging`` members of DP group ``stuck_group`` never issue its last
reduce-scatter (seq N); the group's other members wait in it. With ``cascade`` (what a real job does) every other
rank finishes the step and waits in the next step's first TP all-reduce, which the stuck group's member of its TP
group never reaches: every TP group stalls too, behind the stuck group. Without it the dumps are taken before
the other ranks get there, and the stuck DP group is the only stalled group. Either way the lagging ranks are
behind wherever they appear and never waiting: the hang report's suspects.

Writing is per rank from a template (the calls are the same on every rank but for group names, times and states),
in ``jobs`` processes: 16,384 dumps of 256 entries in well under a minute on two cores.
"""

from __future__ import annotations

import os
import pickle
from concurrent.futures import ProcessPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

PREFIX = "nccl_trace_rank_"  # PyTorch's default TORCH_NCCL_DEBUG_INFO_TEMP_FILE, in the dumps' folder
EPOCH_NS = 1_758_610_000_000_000_000
STEP_NS = 1_200_000_000
TP_DESC, DP_DESC = "TENSOR_MODEL_PARALLEL_GROUP", "DATA_PARALLEL_GROUP"
STEPS_BEFORE = 1_000  # steps the job ran before the ring buffer's oldest entries (seqs and record ids start high)


@dataclass(frozen=True)
class HangDumps:
    tp: int = 8
    dp: int = 2048
    entries: int = 256  # per rank: the ring buffer (TORCH_FR_BUFFER_SIZE)
    tp_calls: int = 48  # TP all-reduces per step
    dp_calls: int = 4  # DP reduce-scatters per step (gradient buckets)
    stuck_group: int = 3  # the DP group that hangs
    lagging: int = 3  # its members that never issue the stuck call
    cascade: bool = True  # the other ranks go on to the next step and wait in TP there

    @property
    def world(self) -> int:
        return self.tp * self.dp

    def __post_init__(self) -> None:
        if self.tp < 1 or self.dp < 2 or not 0 <= self.stuck_group < self.tp or not 1 <= self.lagging < self.dp:
            raise ValueError("need tp >= 1, dp >= 2, 0 <= stuck_group < tp and 1 <= lagging < dp")
        if self.entries < 1 or self.tp_calls < 1 or self.dp_calls < 1:
            raise ValueError("entries, tp_calls and dp_calls must be >= 1")

    def tp_name(self, rank: int) -> str:
        return str(1 + self.tp + rank // self.tp)  # torch's pg uids: 0 the default, then in creation order

    def dp_name(self, rank: int) -> str:
        return str(1 + rank % self.tp)

    def lagging_ranks(self) -> list[int]:
        """Members of the stuck group spread evenly over it (never all of it)."""
        return [self.stuck_group + self.tp * ((k * self.dp + self.dp // 2) // self.lagging)
                for k in range(self.lagging)]

    def _schedule(self) -> list[tuple[str, int]]:
        """One step's calls in order: ("tp", k) or ("dp", b); the last DP bucket is the step's last call."""
        out: list[tuple[str, int]] = []
        half = self.tp_calls // 2
        after = {half + ((b + 1) * (self.tp_calls - half)) // self.dp_calls - 1: b for b in range(self.dp_calls - 1)}
        for k in range(self.tp_calls):
            out.append(("tp", k))
            if k in after:
                out.append(("dp", after[k]))
        out.append(("dp", self.dp_calls - 1))
        return out

    def truth(self) -> dict[str, Any]:
        steps = STEPS_BEFORE + self._steps()
        return {"config": asdict(self), "world": self.world, "stuck_pg": self.dp_name(self.stuck_group),
                "stuck_desc": DP_DESC, "stuck_seq": steps * self.dp_calls, "stuck_op": "_reduce_scatter_base",
                "lagging": self.lagging_ranks(), "lagging_last_seq": steps * self.dp_calls - 1,
                "stalled_groups": 1 + (self.dp if self.cascade else 0)}

    def _steps(self) -> int:
        """Steps the buffer spans, the stuck one last (one more than the buffer holds: its oldest is cut)."""
        per = self.tp_calls + self.dp_calls
        return -(-self.entries // per) + 1


def write_dumps(cfg: HangDumps, out: Path, jobs: int | None = None) -> dict[str, Any]:
    """``out/nccl_trace_rank_<r>`` for every rank (pickles, protocol 2 as torch writes); returns the truth."""
    out.mkdir(parents=True, exist_ok=True)
    jobs = max(1, min(jobs or os.cpu_count() or 1, 16))
    chunks = [range(lo, min(lo + 256, cfg.world)) for lo in range(0, cfg.world, 256)]
    if jobs == 1 or cfg.world <= 256:
        for chunk in chunks:
            _write_chunk(cfg, out, chunk)
    else:
        with ProcessPoolExecutor(jobs) as pool:
            list(pool.map(_write_chunk, [cfg] * len(chunks), [out] * len(chunks), chunks))
    return cfg.truth()


def _write_chunk(cfg: HangDumps, out: Path, ranks: range) -> None:
    writer = _Writer(cfg)
    for rank in ranks:
        (out / f"{PREFIX}{rank}").write_bytes(pickle.dumps(writer.dump(rank), protocol=2))


class _Writer:
    """The parts every dump shares, built once per process: member strings, op templates, the schedule."""

    def __init__(self, cfg: HangDumps) -> None:
        self.cfg = cfg
        self.schedule = cfg._schedule()
        self.steps = cfg._steps()
        self.lagging = set(cfg.lagging_ranks())
        self.all_ranks = str(list(range(cfg.world)))  # the default group's members, in every dump
        self.dp_ranks = {j: str(list(range(j, cfg.world, cfg.tp))) for j in range(cfg.tp)}
        self.gap_ns = STEP_NS // (len(self.schedule) + 2)
        common = {"p2p_seq_id": 0, "timeout_ms": 600_000, "is_p2p": False, "thread_id": "23437652547264",
                  "thread_name": "pt_autograd_0"}
        bucket = 50_000_000  # fp32 gradient elements per bucket
        self.tp_tmpl = {**common, "profiling_name": "nccl:all_reduce", "input_sizes": [[4096, 1, 5120]],
                        "input_dtypes": ["BFloat16"], "output_sizes": [[4096, 1, 5120]], "output_dtypes": ["BFloat16"]}
        self.dp_tmpl = {**common, "profiling_name": "nccl:_reduce_scatter_base", "input_sizes": [[bucket]],
                        "input_dtypes": ["Float"], "output_sizes": [[bucket // cfg.dp]], "output_dtypes": ["Float"]}

    def _calls(self, rank: int) -> list[tuple[str, int, int, str]]:
        """(kind, seq, created_ns, state) of the rank's calls, oldest first, before the ring buffer's cut."""
        cfg = self.cfg
        stuck = rank % cfg.tp == cfg.stuck_group
        lagging = rank in self.lagging
        jitter = (rank * 7919) % 50_000
        out: list[tuple[str, int, int, str]] = []
        for s in range(self.steps):
            base = EPOCH_NS + (STEPS_BEFORE + s) * STEP_NS + jitter
            last = s == self.steps - 1
            for i, (kind, k) in enumerate(self.schedule):
                per = cfg.tp_calls if kind == "tp" else cfg.dp_calls
                seq = (STEPS_BEFORE + s) * per + k + 1
                final = last and kind == "dp" and k == cfg.dp_calls - 1
                if final and lagging:
                    break  # never issued: the lagging ranks stop before the step's last bucket
                state = "scheduled" if final and stuck else "completed"
                out.append((kind, seq, base + i * self.gap_ns, state))
        if cfg.cascade and not stuck:  # the next step's first TP call, waiting for the stuck group's member
            seq = (STEPS_BEFORE + self.steps) * cfg.tp_calls + 1
            out.append(("tp", seq, EPOCH_NS + (STEPS_BEFORE + self.steps) * STEP_NS + jitter, "scheduled"))
        return out

    def dump(self, rank: int) -> dict[str, Any]:
        cfg = self.cfg
        tp, dp = cfg.tp_name(rank), cfg.dp_name(rank)
        groups = {"tp": ((tp, TP_DESC), 2, self.tp_tmpl), "dp": ((dp, DP_DESC), 1, self.dp_tmpl)}
        calls = self._calls(rank)
        first_id = STEPS_BEFORE * len(self.schedule)
        entries = []
        kept = calls[-cfg.entries:]
        for i, (kind, seq, created, state) in enumerate(kept, start=len(calls) - len(kept)):
            pg, pg_id, tmpl = groups[kind]
            done = state == "completed"
            entries.append({**tmpl, "record_id": first_id + i, "pg_id": pg_id, "process_group": pg,
                            "collective_seq_id": seq, "op_id": seq, "time_created_ns": created, "state": state,
                            "time_discovered_started_ns": created + 5_000 if done else None,
                            "time_discovered_completed_ns": created + 900_000 if done else None, "retired": done})
        status = {}
        for kind, (_, pg_id, _) in groups.items():
            seqs = [(seq, state) for k, seq, _, state in calls if k == kind]
            enqueued = seqs[-1][0] if seqs else -1
            completed = max((seq for seq, state in seqs if state == "completed"), default=-1)
            status[str(pg_id)] = {"last_enqueued_collective": enqueued, "last_started_collective": -1,
                                  "last_completed_collective": completed}
        start = cfg.tp * (rank // cfg.tp)
        config = {"0": {"name": "0", "desc": "default_pg", "ranks": self.all_ranks},
                  dp: {"name": dp, "desc": DP_DESC, "ranks": self.dp_ranks[rank % cfg.tp]},
                  tp: {"name": tp, "desc": TP_DESC, "ranks": str(list(range(start, start + cfg.tp)))}}
        return {"version": "2.9", "pg_config": config, "nccl_version": "2.27.3", "pg_status": status,
                "entries": entries}
