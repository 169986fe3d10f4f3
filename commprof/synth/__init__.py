"""Synthetic runs whose answers are known by construction.

- ``TraceBuilder`` (``commprof.synth.builder``): hand-built Kineto traces for small test cases.
- ``generate(SynthConfig(...), out)`` (``commprof synth``): a whole multi-node GPU run directory —
  Kineto traces, NCCL logs, topology captures, manifest — and ``truth.json`` with the answers.
- ``commprof.synth_run.make_run``: the tests' fixed-step runs, written by the same generator.
"""

from commprof.synth.builder import CPU_PID, MAIN_TID, TraceBuilder, ns
from commprof.synth.config import SynthConfig
from commprof.synth.writer import generate

__all__ = ["CPU_PID", "MAIN_TID", "SynthConfig", "TraceBuilder", "generate", "ns"]
