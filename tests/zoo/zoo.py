"""Run the fault zoo and print its calibration table (``make zoo``; ZOO_ARGS for the options).

    python tests/zoo/zoo.py [--reps 3] [--ab-runs 2] [--ab-steps 40] [--faults a,b] [--out DIR]
    python tests/zoo/zoo.py --reanalyze DIR     # judge DIR's recordings again with this checkout's analysis
                                                # (into DIR/calibration-reanalyzed.md, results-reanalyzed.json)

Every case of zoolib.EXPECT is recorded ``--reps`` times with its fault on every iteration and judged;
every case with an A/B (zoolib.Expect.saving_from) runs its ``--ab`` job ``--ab-runs`` times. The table
(Markdown) is printed and written to DIR/calibration.md, every verdict to DIR/results.json.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import zoolib  # noqa: E402 (test-support module beside this script)


def parse() -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--reps", type=int, default=3)
    p.add_argument("--ab-runs", type=int, default=2)
    p.add_argument("--ab-steps", type=int, default=120)
    p.add_argument("--faults", default=",".join(zoolib.EXPECT), help="comma-separated cases (default: all)")
    p.add_argument("--out", type=Path, default=Path("runs") / time.strftime("zoo-%Y%m%d-%H%M%S", time.gmtime()))
    p.add_argument("--reanalyze", type=Path, help="judge the recordings of an earlier zoo folder again")
    p.add_argument("--ab-from", type=Path, action="append", default=[],
                   help="with --reanalyze: A/B stamps from these zoo folders' ab/ instead (repeatable)")
    return p.parse_args()


def run_case(out: Path, fault: str, reps: int) -> list[dict[str, Any]]:
    rows = []
    for rep in range(reps):
        run_dir = out / fault / f"rep{rep}"
        t0 = time.monotonic()
        zoolib.record(run_dir, fault)
        rows.append(judge_dir(run_dir, fault, rep))
        print(f"zoo: {fault} rep {rep}: {rows[-1]['verdict']} ({time.monotonic() - t0:.0f} s)", flush=True)
    return rows


def judge_dir(run_dir: Path, fault: str, rep: int) -> dict[str, Any]:
    report = zoolib.analyze(run_dir)
    v = zoolib.judge(fault, report)
    return {"fault": fault, "rep": rep, "run_dir": str(run_dir), "ok": v.ok, "named": v.named,
            "false_alarms": v.false_alarms, "others": v.others, "estimate_ms": v.estimate_ms,
            "estimate_model": v.estimate_model, "estimate_low_ms": v.estimate_low_ms,
            "problems": v.problems, "findings": v.findings,
            "step_ms": report["totals"]["step_ns"] / 1e6,
            "exposed_pct": report["totals"]["exposed_comm_pct_of_step"],
            "verdict": "ok" if v.ok else "; ".join(v.problems + [f"false alarm {a}" for a in v.false_alarms])}


def ab_costs(out: Path, fault: str, runs: int, steps: int) -> list[float]:
    costs = []
    for j in range(runs):
        costs.append(zoolib.ab_job(out / "ab" / f"{fault}-{j}", fault, steps=steps))
        print(f"zoo: {fault} A/B {j}: {costs[-1]:.1f} ms/step", flush=True)
    return costs


def table(rows: list[dict[str, Any]], ab: dict[str, list[float]]) -> str:
    """The calibration table: one line per case, then the clean configurations' false alarms per rule."""
    lines = ["| case | expected | named | other findings (> info): runs, kinds | estimate ms/step (median) "
             "| A/B cost ms/step | estimate / A/B | saving verdict |", "|---|---|---|---|---|---|---|---|"]
    for fault, e in zoolib.EXPECT.items():
        mine = [r for r in rows if r["fault"] == fault]
        if not mine:
            continue
        named = sum(r["named"] for r in mine)
        alarms = sorted({a for r in mine for a in r["false_alarms"] + r.get("others", [])})
        ests = [r["estimate_ms"] for r in mine if r["estimate_ms"] is not None]
        est = statistics.median(ests) if ests else None
        costs = ab.get(fault, [])
        model = next((r["estimate_model"] for r in mine if r["estimate_model"]), "")
        lows = [r["estimate_low_ms"] for r in mine if r.get("estimate_low_ms") is not None]
        low = statistics.median(lows) if lows else None
        verdict = zoolib.saving_verdict(est, model, costs, low) if costs else (
            "-" if e.quiet else f"not estimated ({model})" if model else "no finding")
        ratio = f"{est / statistics.median(costs):.2f}" if est is not None and costs and statistics.median(
            costs) > 0 else "-"
        shown = "-" if est is None else f"{est:.1f}" + ("" if low is None else f" (transfer {low:.1f})")
        lines.append(f"| {fault} | {'/'.join(e.kinds) or 'quiet'} | {named}/{len(mine)} | "
                     f"{sum(bool(r['false_alarms'] or r.get('others')) for r in mine)}/{len(mine)} "
                     f"{', '.join(alarms)} | {shown} | {', '.join(f'{c:.1f}' for c in costs) or '-'} | "
                     f"{ratio} | {verdict} |")
    quiet = [r for r in rows if zoolib.EXPECT[r["fault"]].quiet]
    rules = sorted({a.split()[0] for r in quiet for a in r["false_alarms"]})
    lines += ["", f"False alarms per rule on the {len(quiet)} clean-configuration runs: "
              + (", ".join(f"`{k}` {sum(any(a.startswith(k + ' ') for a in r['false_alarms']) for r in quiet)}"
                           f"/{len(quiet)}" for k in rules) or "none")]
    lines += ["", "| case | rep | step ms | exposed % | verdict | findings |", "|---|---|---|---|---|---|"]
    lines += [f"| {r['fault']} | {r['rep']} | {r['step_ms']:.1f} | {r['exposed_pct']:.1f} | {r['verdict']} | "
              f"{'; '.join(r['findings']) or 'none'} |" for r in rows]
    return "\n".join(lines)


def main() -> None:
    args = parse()
    faults = [f for f in args.faults.split(",") if f]
    unknown = set(faults) - set(zoolib.EXPECT)
    if unknown:
        sys.exit(f"zoo: unknown case(s) {sorted(unknown)}; known: {', '.join(zoolib.EXPECT)}")
    if args.reanalyze:
        out = args.reanalyze
        old = json.loads((out / "results.json").read_text())
        ab_dirs = [d / "ab" for d in args.ab_from] or [out / "ab"]
        ab = {f: [zoolib.ab_cost_ms(d) for a in ab_dirs for d in sorted(a.glob(f"{f}-*"))] for f in old["ab_ms"]}
        rows = [judge_dir(Path(r["run_dir"]), r["fault"], r["rep"]) for r in old["rows"] if r["fault"] in faults]
    else:
        out = args.out
        out.mkdir(parents=True, exist_ok=True)
        rows, ab = [], {}
        for fault in faults:
            rows += run_case(out, fault, args.reps)
            if zoolib.EXPECT[fault].saving_from:
                ab[fault] = ab_costs(out, fault, args.ab_runs, args.ab_steps)
    text = table(rows, ab)
    header = (f"Fault zoo: {len(rows)} recorded runs, 4 ranks Gloo on CPU, `python tests/zoo/zoo.py "
              f"{' '.join(sys.argv[1:])}`, {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n\n")
    # a re-judgement keeps the recording's own files (its results.json lists every run to re-judge)
    suffix = "-reanalyzed" if args.reanalyze else ""
    (out / f"calibration{suffix}.md").write_text(header + text + "\n")
    (out / f"results{suffix}.json").write_text(json.dumps({"rows": rows, "ab_ms": ab}, indent=1))
    print(header + text)
    print(f"\nzoo: written to {out}/calibration{suffix}.md and {out}/results{suffix}.json")


if __name__ == "__main__":
    main()
