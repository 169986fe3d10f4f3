"""A big kernel-heavy Kineto trace: one rank of the 2x8 sample, its steps repeated until the JSON is ``--mb`` MB.

    python bench/kernel_heavy.py [--mb 300] [--out /scratch/kh] [--source rank-0.json.gz]

Writes ``OUT/plain/rank-0.json`` and ``OUT/gz/rank-0.json.gz`` (the same text, gzip level 1), each alone in its
folder so that ``commprof ingest --workers 1 OUT/plain`` reads just it. Nearly every event is one the ingest
keeps: kernels and memcpys (device rows), their ``cudaLaunchKernel``/``cudaMemcpyAsync`` calls (launch rows,
by correlation id), ``record_param_comms`` ops with their collective args and ``ProfilerStep#N`` marks (CPU
rows): ~775k kept events in 300 MB, against the real trace's many skipped CPU ops, flows and instants.

Each copy of the sample's events is shifted by a whole number of ms past the previous one's end, its
correlation and External ids past the previous copy's largest, each process group's ``Seq`` past that group's
last, and its steps renumbered: a valid trace of 3 x copies steps whose collectives' sequence numbers run on.
Deterministic: the same source and size give the same bytes.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import shutil
import sys
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
SOURCE = REPO / "sample_traces" / "synth_2x8_tp8_dp2" / "raw" / "traces" / "rank-0.json.gz"
STEP = "ProfilerStep#"


def _copy(events: list[dict[str, Any]], k: int, shift_us: int, id_step: int, seq_step: dict[str, int],
          steps: int) -> list[dict[str, Any]]:
    """The sample's complete events, as copy ``k`` of them."""
    out = []
    for ev in events:
        ev = {**ev, "ts": ev["ts"] + k * shift_us}
        args = ev.get("args")
        if args is not None:
            args = ev["args"] = dict(args)
            for key in ("correlation", "External id"):
                if isinstance(args.get(key), int):
                    args[key] += k * id_step
            pg = args.get("Process Group Name")
            if pg is not None and isinstance(args.get("Seq"), int):
                args["Seq"] += k * seq_step[pg]
        if ev["name"].startswith(STEP):
            ev["name"] = f"{STEP}{int(ev['name'][len(STEP):]) + k * steps}"
        out.append(ev)
    return out


def write(mb: float, out: Path, source: Path = SOURCE) -> tuple[Path, Path]:
    """Write the plain and gzipped trace under ``out``; return their paths."""
    with gzip.open(source, "rt") as fh:
        doc = json.load(fh)
    events = doc.pop("traceEvents")
    meta = [ev for ev in events if ev.get("ph") == "M"]
    complete = [ev for ev in events if ev.get("ph") != "M"]
    end = max(ev["ts"] + ev.get("dur", 0) for ev in complete)
    start = min(ev["ts"] for ev in complete)
    shift_us = math.ceil((end - start) / 1000 + 1) * 1000  # a whole number of ms: float ts stay exact
    id_step = 1 + max((ev.get("args") or {}).get(key, 0) for ev in complete for key in ("correlation", "External id")
                      if isinstance((ev.get("args") or {}).get(key, 0), int))
    seq_step: dict[str, int] = {}
    for ev in complete:
        args = ev.get("args") or {}
        if "Process Group Name" in args and isinstance(args.get("Seq"), int):
            pg = args["Process Group Name"]
            seq_step[pg] = max(seq_step.get(pg, 0), args["Seq"])
    steps = sum(1 for ev in complete if ev["name"].startswith(STEP))
    copy_bytes = sum(len(json.dumps(ev)) + 2 for ev in complete)
    copies = max(1, round(mb * 1e6 / copy_bytes))

    plain = out / "plain" / "rank-0.json"
    gz = out / "gz" / "rank-0.json.gz"
    for folder in (plain.parent, gz.parent):
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir(parents=True)
    tmp = plain.with_suffix(".tmp")
    with tmp.open("w") as fh:
        fh.write(json.dumps(doc)[:-1] + ', "traceEvents": [\n')
        fh.write(",\n".join(json.dumps(ev) for ev in meta))
        for k in range(copies):
            fh.write(",\n")
            fh.write(",\n".join(json.dumps(ev) for ev in _copy(complete, k, shift_us, id_step, seq_step, steps)))
        fh.write("\n]}\n")
    os.replace(tmp, plain)
    tmp = gz.with_suffix(".tmp")
    with plain.open("rb") as src, gzip.open(tmp, "wb", compresslevel=1) as dst:
        shutil.copyfileobj(src, dst, 1 << 24)
    os.replace(tmp, gz)
    return plain, gz


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=float, default=300.0, help="MB of JSON to write (about)")
    parser.add_argument("--out", type=Path, default=Path("/scratch/kh"))
    parser.add_argument("--source", type=Path, default=SOURCE, help="a Kineto trace (.json.gz) to repeat")
    args = parser.parse_args(argv)
    plain, gz = write(args.mb, args.out, args.source)
    print(f"{plain}: {plain.stat().st_size / 1e6:.1f} MB; {gz}: {gz.stat().st_size / 1e6:.1f} MB")
    return 0


if __name__ == "__main__":
    sys.exit(main())
