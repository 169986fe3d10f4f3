"""Calibration of the rank-naming statistics on clean recordings (``make zoo-calibrate``): how often the
straggler rule names a rank where none is slow, at the step counts people record, beside a busy process.

    python tests/zoo/calibrate.py record --out DIR [--reps 4] [--active 40] [--busy 1] [--jobs demo4,demo8,...]
    python tests/zoo/calibrate.py table DIR [--write] [--add]   # --add: DIR's jobs beside the stored others
    python tests/zoo/calibrate.py demo --out DIR [--runs 20] [--busy 1]   # make demo afresh, beside a busy process

``record`` records each job of JOBS ``--reps`` times with ``--active`` profiled steps while ``--busy``
processes spin on the machine (the ordinary state of a shared host; a GPU node with a noisy neighbour).
``table`` cuts every recording into windows of 3, 5, 10 and 20 consecutive profiled steps (disjoint; a
window of a longer recording is what a recording of that many steps would have seen) and judges each window
with the product's own rule (:func:`commprof.analyzers.lateness.stragglers`), then prints the table: per job,
ranks and window length, how many windows named a rank above info, at info, and the highest confidence
stated in a false naming; on the faulty job (``slow``) how many named the slow rank. ``--write`` puts the
table between the calibration markers of docs/findings.md, the measured rates into
analyzers/calibration.json, which the product reads (docs/findings.md, "Calibration"), and what the rule reads of
each recording into tests/data/lateness_recordings.json, which ``make test`` judges again.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ZOO = Path(__file__).resolve().parent
REPO = ZOO.parents[1]
sys.path.insert(0, str(ZOO))
import zoolib  # noqa: E402 (test-support module beside this script)

WINDOWS = (3, 5, 10, 20)
SLOW_RANK = 2  # train_zoo.py's SLOW_RANK


def _train_3d(ranks: int, *args: str) -> list[str]:
    return [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", str(ranks),
            str(REPO / "sample_traces" / "train_3d.py"), "--tp", "2", "--dp", str(ranks // 2), *args]


# name -> (ranks, the training command given the step count, the rank that is slow or None)
JOBS: dict[str, tuple[int, Any, int | None]] = {
    "demo4": (4, lambda steps: _train_3d(4, "--steps", str(steps)), None),
    "demo8": (8, lambda steps: _train_3d(8, "--steps", str(steps)), None),
    "zoo_clean": (4, lambda steps: zoolib.torchrun("clean", "--steps", str(steps)), None),
    "zoo_tp": (4, lambda steps: zoolib.torchrun("tp_megatron", "--steps", str(steps)), None),
    "slow": (4, lambda steps: zoolib.torchrun("slow_rank", "--steps", str(steps)), SLOW_RANK),
    # pp=2 x dp=2 with stage 1 heavier (make test's small budget): no rank is slow within its stage
    "zoo_pp": (4, lambda steps: zoolib.torchrun("pp_uneven", "--steps", str(steps), "--layers", "4", "--batch", "96"),
               None),
}


def record(out: Path, jobs: list[str], reps: int, active: int, busy: int) -> None:
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    try:
        for rep in range(reps):
            for name in jobs:
                run_dir = out / name / f"rep{rep}"
                _, command, _ = JOBS[name]
                cmd = [sys.executable, "-m", "commprof", "record", "-o", str(run_dir), "--force", "--no-analyze",
                       "--wait", "1", "--warmup", "1", "--active", str(active), "--", *command(active + 3)]
                t0 = time.monotonic()
                done = subprocess.run(cmd, env=zoolib.env(), capture_output=True, text=True,
                                      timeout=zoolib.JOB_TIMEOUT_S * 2, cwd=REPO)
                (run_dir / "calibrate-record.log").write_text(done.stdout + done.stderr)
                (run_dir / "calibrate.json").write_text(json.dumps({"job": name, "busy": busy, "active": active}))
                print(f"calibrate: {name} rep {rep}: exit {done.returncode} ({time.monotonic() - t0:.0f} s)",
                      flush=True)
    finally:
        for s in spinners:
            s.kill()


def kept(run_dir: Path, a: Any) -> dict[str, Any]:
    """What the straggler rule reads of one recording, compact (tests/data/lateness_recordings.json): the lateness
    grid and the work per rank and step, the scope, the pipeline stages, the mean step and the run's largest
    exposed wait. ``make test`` judges its windows again without the traces (tests/test_lateness_recorded.py)."""
    from commprof.analyzers import findings_rules, lateness

    c = findings_rules.Ctx(a)
    judged, scope = lateness.judged_calls(c.calls, c.doubtful, int(a.ranks.height), a.facts.world_size)
    grid = lateness.step_lateness(judged)
    work = lateness.rank_work(a.steps.filter(~a.steps["rank"].is_in(list(c.doubtful))))
    meta = json.loads((run_dir / "calibrate.json").read_text())
    return {"job": meta["job"], "busy": meta["busy"], "ranks": JOBS[meta["job"]][0], "slow": JOBS[meta["job"]][2],
            "scope": scope, "step_ns": c.step_ns, "waited_ns": findings_rules._waited(c),
            "stage_of": {str(k): v for k, v in lateness.pipeline_stages(a.process_groups).items()},
            "grid": {k: grid[k].to_list() for k in ("pg", "rank", "step", "late_ns")},
            "work": {k: work[k].to_list() for k in ("rank", "step", "work_ns")}}


def judge(run_dir: Path, keep: list[dict[str, Any]] | None = None) -> list[dict[str, Any]]:
    """Every window of every length of one recording, judged by the product's straggler rule."""
    import commprof
    from commprof.analyzers import findings_rules

    meta = json.loads((run_dir / "calibrate.json").read_text())
    ranks, _, slow = JOBS[meta["job"]]
    a = commprof.analyze(str(run_dir))
    if keep is not None:
        keep.append(kept(run_dir, a))
    steps = sorted(int(s) for s in a.steps["step"].unique().to_list())
    rows = []
    for k in WINDOWS:
        for w in range(len(steps) // k):
            window = steps[w * k:(w + 1) * k]
            for x, sev in findings_rules.judge_stragglers(findings_rules.Ctx(a), frozenset(window)):
                rows.append({"job": meta["job"], "ranks": ranks, "busy": meta["busy"], "steps": k,
                             "window": w, "run": str(run_dir), "rank": x.rank, "severity": sev,
                             "confidence": x.confidence, "slow": slow})
            rows.append({"job": meta["job"], "ranks": ranks, "busy": meta["busy"], "steps": k, "window": w,
                         "run": str(run_dir), "rank": None, "severity": None, "confidence": None, "slow": slow})
    return rows


STORED = REPO / "tests" / "data" / "lateness_recordings.json"


def stored() -> list[dict[str, Any]]:
    """What was kept of the recordings the product's table was measured on (:func:`kept`)."""
    doc: list[dict[str, Any]] = json.loads(STORED.read_text()) if STORED.exists() else []
    return doc


def kept_windows(rec: dict[str, Any]) -> list[dict[str, Any]]:
    """The rows :func:`judge` makes of one recording, from what :func:`kept` kept of it (no traces needed): the
    rule judged again, each row with its ``late`` (the rule's :class:`Late`) where a rank was named."""
    import polars as pl

    from commprof.analyzers import findings_rules, lateness

    grid = pl.DataFrame(rec["grid"], schema={"pg": pl.String, "rank": pl.Int64, "step": pl.Int64,
                                             "late_ns": pl.Float64})
    work = pl.DataFrame(rec["work"], schema={"rank": pl.Int64, "step": pl.Int64, "work_ns": pl.Float64})
    stage_of = {int(k): v for k, v in rec["stage_of"].items()}
    steps = sorted(set(work["step"].to_list()) | set(grid["step"].to_list()))
    rows = []
    base = {"job": rec["job"], "ranks": rec["ranks"], "busy": rec["busy"], "slow": rec["slow"]}
    for k in WINDOWS:
        for w in range(len(steps) // k):
            window = steps[w * k:(w + 1) * k]
            g, wk = grid.filter(pl.col("step").is_in(window)), work.filter(pl.col("step").is_in(window))
            rows.extend({**base, "steps": k, "window": w, "rank": x.rank, "confidence": x.confidence,
                         "severity": findings_rules.straggler_severity(x, rec["step_ns"], rec["waited_ns"]), "late": x}
                        for x in lateness.stragglers(g, rec["scope"], wk, stage_of, rec["step_ns"]))
            rows.append({**base, "steps": k, "window": w, "rank": None, "severity": None, "confidence": None})
    return rows


def summarize(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Per job, ranks and window length: windows, false namings above info and at info, the highest stated
    confidence of a false naming above info, and on the slow job the windows naming the slow rank above info."""
    out: dict[tuple[str, int, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["job"], r["ranks"], r["steps"])
        s = out.setdefault(key, {"job": r["job"], "ranks": r["ranks"], "busy": r["busy"], "steps": r["steps"],
                                 "slow": r["slow"], "windows": 0, "named_above_info": 0, "named_info": 0,
                                 "max_false_confidence": None, "named_slow": 0})
        if r["rank"] is None:
            s["windows"] += 1
        elif r["slow"] is not None and r["rank"] == r["slow"]:
            s["named_slow"] += r["severity"] != "info"
        elif r["severity"] != "info":
            s["named_above_info"] += 1
            s["max_false_confidence"] = max(s["max_false_confidence"] or 0.0, r["confidence"])
        else:
            s["named_info"] += 1
    return [out[k] for k in sorted(out)]


def advised(summary: list[dict[str, Any]]) -> int | None:
    """The fewest steps at which the slow job was named in >= 90 % of its windows and no clean window of any job
    named a rank above info."""
    for k in WINDOWS:
        mine = [s for s in summary if s["steps"] == k]
        slow = [s for s in mine if s["slow"] is not None]
        if not slow or any(s["named_above_info"] for s in mine):
            continue
        if sum(s["named_slow"] for s in slow) >= 0.9 * sum(s["windows"] for s in slow):
            return k
    return None


def markdown(summary: list[dict[str, Any]], steps: int | None, source: str) -> str:
    lines = [f"Measured by `make zoo-calibrate` ({source}). Each recording cut into disjoint windows of that many "
             "profiled steps, each window judged by the straggler rule. False: a rank named where none is slow "
             "(on `slow`, a rank other than the slow one).", "",
             "| job | ranks | steps | windows | false above info | false at info | highest stated confidence, "
             "false | slow rank named above info |", "|---|---|---|---|---|---|---|---|"]
    for s in summary:
        conf = "-" if s["max_false_confidence"] is None else f"{100 * s['max_false_confidence']:.1f} %"
        slow = f"{s['named_slow']} of {s['windows']}" if s["slow"] is not None else "-"
        lines.append(f"| {s['job']} | {s['ranks']} | {s['steps']} | {s['windows']} | {s['named_above_info']} | "
                     f"{s['named_info']} | {conf} | {slow} |")
    lines += ["", f"Advised profiled steps (the fewest at which the slow rank was named in at least 90 % of windows "
                  f"and no clean window named a rank above info): {steps if steps else 'none measured'}."]
    return "\n".join(lines)


BEGIN, END = "<!-- calibration:straggler -->", "<!-- /calibration:straggler -->"


def write(summary: list[dict[str, Any]], source: str) -> str:
    steps = advised(summary)
    text = markdown(summary, steps, source)
    target = REPO / "analyzers" / "calibration.json"
    data = json.loads(target.read_text()) if target.exists() else {}  # the what-if bands stay (whatif_check.py)
    data.update(source=source, straggler={"advised_steps": steps or WINDOWS[-1], "windows": summary})
    target.write_text(json.dumps(data, indent=1) + "\n")
    doc = REPO / "docs" / "findings.md"
    body = doc.read_text()
    if BEGIN in body and END in body:
        head, rest = body.split(BEGIN, 1)
        body = head + BEGIN + "\n" + text + "\n" + END + rest.split(END, 1)[1]
        doc.write_text(body)
    return text


def demo(out: Path, runs: int, busy: int) -> dict[str, Any]:
    """``make demo`` recorded ``runs`` times afresh beside ``busy`` spinning processes, each analyzed: how many named
    a rank above info (issue 36: at most 1 of 20)."""
    spinners = [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(busy)]
    named: list[list[str]] = []
    try:
        for i in range(runs):
            run_dir = out / f"demo-{i}"
            done = subprocess.run(["make", "-s", "-o", ".venv/.installed", "demo", f"DEMO_OUT={run_dir}"], cwd=REPO,
                                  capture_output=True, text=True, timeout=zoolib.JOB_TIMEOUT_S)
            if done.returncode != 0:
                raise RuntimeError(f"make demo failed ({done.returncode}): {done.stderr[-1500:]}")
            report = zoolib.analyze(run_dir)
            loud = [f"{f['id']} [{f['severity']}] ranks {f['ranks']}" for f in report["findings"]
                    if f.get("ranks") and f["severity"] != "info"]
            named.append(loud)
            print(f"calibrate: demo {i}: {'; '.join(loud) or 'no rank named above info'}", flush=True)
    finally:
        for s in spinners:
            s.kill()
    result = {"runs": runs, "busy": busy, "named_above_info": sum(1 for x in named if x), "named": named}
    (out / "demo.json").write_text(json.dumps(result, indent=1))
    return result


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("record")
    r.add_argument("--out", type=Path, required=True)
    r.add_argument("--reps", type=int, default=4)
    r.add_argument("--active", type=int, default=40)
    r.add_argument("--busy", type=int, default=1)
    r.add_argument("--jobs", default=",".join(JOBS))
    d = sub.add_parser("demo")
    d.add_argument("--out", type=Path, required=True)
    d.add_argument("--runs", type=int, default=20)
    d.add_argument("--busy", type=int, default=1)
    t = sub.add_parser("table")
    t.add_argument("dir", type=Path)
    t.add_argument("--write", action="store_true")
    t.add_argument("--add", action="store_true",
                   help="keep the stored recordings of other jobs (tests/data/lateness_recordings.json) and judge "
                        "them again with DIR's: a job added to the calibration without recording the others anew")
    args = p.parse_args()
    if args.cmd == "record":
        record(args.out, args.jobs.split(","), args.reps, args.active, args.busy)
        return 0
    if args.cmd == "demo":
        result = demo(args.out, args.runs, args.busy)
        print(f"calibrate: make demo beside {args.busy} busy process(es): {result['named_above_info']} of "
              f"{result['runs']} fresh runs named a rank above info")
        return 0 if result["named_above_info"] <= max(1, args.runs // 20) else 1
    os.environ.setdefault("COMMPROF_QUIET", "1")
    dirs = [d for d in sorted(args.dir.glob("*/rep*")) if (d / "calibrate.json").exists()]
    if not dirs:
        print(f"calibrate: no recordings under {args.dir} (run the record step first)", file=sys.stderr)
        return 2
    keep: list[dict[str, Any]] = []
    rows = [row for d in dirs for row in judge(d, keep)]
    (args.dir / "windows.json").write_text(json.dumps(rows))
    busy = sorted({r["busy"] for r in rows})
    source = (f"{len(dirs)} recordings, {os.cpu_count()} cores, {'/'.join(map(str, busy))} busy process(es) beside "
              f"each, {time.strftime('%Y-%m-%d', time.gmtime())}")
    if args.add:  # the stored recordings of the other jobs, judged again from what was kept of them
        mine = {r["job"] for r in keep}
        others = [r for r in stored() if r["job"] not in mine]
        old = json.loads((REPO / "analyzers" / "calibration.json").read_text()).get("source", "")
        head, _, base = old.rpartition(" added to ")  # "N recordings: job (n, date); ... added to BASE"
        added = {job: what for job, what in re.findall(r"(\w+) \((\d+, [\d-]+)\)", head)}
        added.update({job: f"{len(dirs)}, {time.strftime('%Y-%m-%d', time.gmtime())}" for job in sorted(mine)})
        source = (f"{len(others) + len(dirs)} recordings: "
                  f"{'; '.join(f'{job} ({what})' for job, what in sorted(added.items()))} added to {base or old}")
        keep = others + keep
        rows = [{k: v for k, v in r.items() if k != "late"} for rec in keep for r in kept_windows(rec)]
    if args.write:
        STORED.parent.mkdir(exist_ok=True)
        STORED.write_text(json.dumps(keep, separators=(",", ":")))
    summary = summarize(rows)
    print(write(summary, source) if args.write else markdown(summary, advised(summary), source))
    return 0


if __name__ == "__main__":
    sys.exit(main())
