"""Hostile-input fuzzing shared by the suite (tests/test_fuzz.py, a bounded budget) and ``make fuzz``
(this file as a script, thousands of cases): hypothesis-driven mutators for Kineto traces (structure and
values), NCCL logs, JSON reports and TOML configs, and one runner that holds every case to the promise
of the README: an exit code in {0, 1, 2}, no traceback, a time bounded by a small multiple of a clean
run of the same size, and exit 0 only with a result that says what was skipped.

    python tests/fuzzlib.py --traces 2000 --logs 1000 --reports 300 --configs 300
"""

from __future__ import annotations

import json
import random
import re
import shutil
import signal
import statistics
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fuzz_mutators import (  # noqa: E402
    REPO,
    THRESHOLD_FLAGS,
    Mutant,
    bases,
    log_mutant,
    log_sources,
    report_mutant,
    toml_mutant,
    topology_xml_mutant,
    trace_mutant,
)

HANG_S = 60.0  # a case still running after this is a hang (the real bound is the ratio below)
RATIO_LIMIT = 10.0  # time of a case / time of a clean case of the same size
FLOOR_S = 0.25  # below this, a case's time is noise, whatever its ratio


# --- the runner ----------------------------------------------------------------------------------------


INTERNAL = re.compile(r"\b(?:[A-Z][A-Za-z]*Error|[A-Z][A-Za-z]*Exception|KeyError|StopIteration): ")


class Hang(BaseException):
    """Raised by the alarm: a case that ran past HANG_S (BaseException: no ``except Exception`` in the
    code under test swallows it)."""


@contextmanager
def time_limit(seconds: float) -> Iterator[None]:
    def on_alarm(signum: int, frame: Any) -> None:
        raise Hang

    previous = signal.signal(signal.SIGALRM, on_alarm)
    signal.setitimer(signal.ITIMER_REAL, seconds)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


@dataclass
class Outcome:
    exit_code: int | None
    seconds: float
    stdout: str = ""
    stderr: str = ""
    error: str | None = None  # a traceback or a hang: a failure of the promise


def run_cli(args: list[str], cache: Path) -> Outcome:
    """``commprof ARGS`` in this process (a fresh interpreter per case would cost 1 s each)."""
    from click.testing import CliRunner

    from commprof.cli import main

    runner = CliRunner()
    start = time.perf_counter()
    try:
        with time_limit(HANG_S):
            result = runner.invoke(main, args, catch_exceptions=True, env={"COMMPROF_CACHE_DIR": str(cache)})
    except Hang:
        return Outcome(None, time.perf_counter() - start, error=f"hang: still running after {HANG_S:.0f} s")
    seconds = time.perf_counter() - start
    out = Outcome(result.exit_code, seconds, result.stdout, result.stderr)
    exc = result.exception
    if exc is not None and not isinstance(exc, SystemExit):
        out.error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
    elif "Traceback" in result.output:
        out.error = result.output[-3000:]
    elif INTERNAL.search(result.output):  # the runner turns a crash in a worker into a skipped file
        found = INTERNAL.search(result.output)
        out.error = f"an internal error passed off as bad input: {result.output[max(0, found.start() - 200):][:600]}" \
            if found else None
    elif result.exit_code not in (0, 1, 2):
        out.error = f"exit code {result.exit_code}"
    elif result.exit_code == 2 and len(result.stderr.strip().splitlines()) != 1 and "\nError: " not in result.stderr:
        out.error = f"exit 2 without exactly one line on stderr: {result.stderr[-500:]!r}"
    return out


def write_files(folder: Path, files: dict[str, bytes]) -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    for name, content in files.items():
        (folder / name).write_bytes(content)
    return folder


@dataclass
class Tally:
    """Figures of a fuzz session, per kind of input."""

    cases: int = 0
    exits: dict[int, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)
    hangs: int = 0
    tracebacks: int = 0
    silent: int = 0
    lossy: int = 0  # cases that surely lost data (each must fail, or warn about it)
    ratios: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    worst: tuple[float, str] = (0.0, "")  # the slowest case against its clean twin, and what it was

    def add(self, outcome: Outcome, ratio: float, what: str) -> None:
        self.cases += 1
        self.seconds.append(outcome.seconds)
        self.ratios.append(ratio)
        if ratio > self.worst[0]:
            self.worst = (ratio, f"{what[:160]} ({outcome.seconds:.2f} s)")
        if outcome.exit_code is not None:
            self.exits[outcome.exit_code] = self.exits.get(outcome.exit_code, 0) + 1
        if outcome.error:
            if outcome.error.startswith("hang"):
                self.hangs += 1
            else:
                self.tracebacks += 1
            self.failures.append(f"{what}\n{outcome.error}")

    def summary(self, kind: str) -> str:
        worst = max(self.ratios, default=0.0)
        return (f"{kind}: {self.cases} cases, exits {dict(sorted(self.exits.items()))}, {self.tracebacks} tracebacks, "
                f"{self.hangs} hangs, {self.silent} silent passes (of {self.lossy} lossy cases), "
                f"worst time ratio {worst:.1f} "
                f"(median case {statistics.median(self.seconds) if self.seconds else 0:.3f} s)"
                + (f"\n  slowest against its clean twin: {self.worst[1]}" if self.worst[0] else ""))


class TraceFuzz:
    """Analyze mutated traces through the CLI; each case's time is compared with a clean analysis of
    the same base trace (scaled by size)."""

    def __init__(self, scratch: Path) -> None:
        self.scratch = scratch
        self.tally = Tally()
        self.clean_s: dict[str, float] = {}
        self.n = 0

    def clean_time(self, name: str, doc: dict[str, Any]) -> float:
        if name not in self.clean_s:
            times = []
            for i in range(3):
                folder = write_files(self.scratch / f"clean-{name}-{i}", {"rank-0.json": json.dumps(doc).encode()})
                out = run_cli(["analyze", str(folder), "--format", "json", "-j", "1"], self.scratch / "cache")
                assert out.exit_code == 0 and out.error is None, (name, out.stderr, out.error)
                times.append(out.seconds)
                shutil.rmtree(folder, ignore_errors=True)
            self.clean_s[name] = statistics.median(times)
        return self.clean_s[name]

    def case(self, mutant: Mutant) -> Outcome:
        base = dict(bases())[mutant.base]
        clean = self.clean_time(mutant.base, base)
        self.n += 1
        args = ["analyze", "--format", "json", "-j", "1", *(["--allow-partial"] if self.n % 2 else [])]
        size = sum(len(v) for v in mutant.files.values())
        scale = max(1.0, size / max(1, mutant.clean_bytes))
        out = self._run(mutant, args, self.n)
        if out.error is None and out.seconds > FLOOR_S and out.seconds / (clean * scale) > RATIO_LIMIT:
            out.seconds = min(out.seconds, self._run(mutant, args, -self.n).seconds)  # timed twice: noise
        ratio = out.seconds / (clean * scale) if out.seconds > FLOOR_S else 0.0
        if out.error is None and ratio > RATIO_LIMIT:
            out.error = f"hang: {out.seconds:.2f} s, {ratio:.1f} x a clean case of the same size"
        self.tally.lossy += mutant.lossy
        if out.error is None and out.exit_code == 0:
            out.error = self._silent(mutant, out)
            if out.error:
                self.tally.silent += 1
        self.tally.add(out, ratio, f"trace mutant of {mutant.base}: {', '.join(mutant.what)}")
        return out

    def _run(self, mutant: Mutant, args: list[str], n: int) -> Outcome:
        folder = write_files(self.scratch / f"case-{n}", mutant.files)
        try:
            return run_cli([args[0], str(folder), *args[1:]], self.scratch / "cache")
        finally:
            shutil.rmtree(folder, ignore_errors=True)

    @staticmethod
    def _silent(mutant: Mutant, out: Outcome) -> str | None:
        """Exit 0 must come with a report that says what was skipped when data was surely lost."""
        try:
            report = json.loads(out.stdout)
        except ValueError:
            return f"exit 0 without a JSON report: {out.stdout[:200]!r}"
        if not isinstance(report, dict) or not report.get("ranks"):
            return "exit 0 with a report of no ranks"
        if mutant.lossy and not any("rank-0" in str(w) for w in report.get("warnings") or []):
            return f"silent pass: data lost ({', '.join(mutant.what)}) but no warning names rank-0"
        return None


def nccl_case(scratch: Path, name: str, content: bytes, xml: bytes | None, tally: Tally, clean_s: float,
              what: list[str] | None = None) -> None:
    """Load a mutated log (and XML dump) as a run's NCCL inputs, build the tables, summarize."""
    from commprof.errors import CommprofError
    from commprof.ingest.nccl_logs import build_tables, load_nccl
    from commprof.nccl import summarize

    folder = scratch / f"nccl-{tally.cases}"
    write_files(folder / "raw" / "nccl", {name: content})
    if xml is not None:
        write_files(folder / "raw" / "topology", {"topo.xml": xml})

    def once() -> Outcome:
        start = time.perf_counter()
        out = Outcome(0, 0.0)
        try:
            with time_limit(HANG_S):
                run = load_nccl(folder)
                summarize(run, build_tables(run.logs, run.topologies, run.graphs))
        except CommprofError:
            out.exit_code = 2
        except Hang:
            out.error = f"hang: still running after {HANG_S:.0f} s"
        except Exception as exc:  # the failure being hunted
            out.error = "".join(traceback.format_exception(type(exc), exc, exc.__traceback__))[-3000:]
        out.seconds = time.perf_counter() - start
        return out

    out = once()
    scale = max(1.0, (len(content) + len(xml or b"")) / 50_000)
    if out.error is None and out.seconds > FLOOR_S and out.seconds / (clean_s * scale) > RATIO_LIMIT:
        out.seconds = min(out.seconds, once().seconds)  # a slow case is timed twice: the machine is noisy
    shutil.rmtree(folder, ignore_errors=True)
    ratio = out.seconds / (clean_s * scale) if out.seconds > FLOOR_S else 0.0
    if out.error is None and ratio > RATIO_LIMIT:
        out.error = f"hang: {out.seconds:.2f} s, {ratio:.1f} x a clean log of the same size"
    tally.add(out, ratio, f"log mutant {name} ({', '.join(what or [])}; xml {len(xml or b'')} bytes)")


def clean_nccl_seconds(scratch: Path) -> float:
    """Time to load and summarize a clean ~50 KB log (the unit of the log ratio)."""
    from commprof.ingest.nccl_logs import build_tables, load_nccl
    from commprof.nccl import summarize

    key = sorted(log_sources())[0]
    text = "\n".join(log_sources()[key]) + "\n"
    text = (text * (50_000 // max(1, len(text)) + 1))[:50_000]
    folder = write_files(scratch / "nccl-clean" / "raw" / "nccl", {"nccl.log": text.encode()}).parent.parent
    times = []
    for _ in range(3):
        start = time.perf_counter()
        run = load_nccl(folder)
        summarize(run, build_tables(run.logs, run.topologies, run.graphs))
        times.append(time.perf_counter() - start)
    return max(statistics.median(times), 0.01)


def reference_report(scratch: Path) -> dict[str, Any]:
    folder = scratch / "ref-run"
    if not folder.exists():
        shutil.copytree(REPO / "sample_traces" / "gloo_4rank_profiler", folder,
                        ignore=shutil.ignore_patterns("tables", "*.py"))
    out = run_cli(["analyze", str(folder), "--format", "json", "-j", "1"], scratch / "cache")
    assert out.exit_code == 0, out.stderr
    report: dict[str, Any] = json.loads(out.stdout)
    return report


def report_case(scratch: Path, blob: bytes, tally: Tally, ref: Path, n: int) -> None:
    path = scratch / f"report-{n}.json"
    path.write_bytes(blob)
    command = random.Random(n).choice([["check", str(path)], ["check", str(path), "--baseline", str(ref)],
                                       ["check", str(ref), "--baseline", str(path)], ["diff", str(ref), str(path)],
                                       ["diff", str(path), str(ref), "--format", "markdown"],
                                       ["check", str(path), "--format", "junit"]])
    out = run_cli(command, scratch / "cache")
    path.unlink()
    tally.add(out, 0.0, f"report mutant, {' '.join(command[:1])}: {blob[:300]!r}")


def config_case(scratch: Path, text: str, flags: list[str], tally: Tally, ref: Path, n: int) -> None:
    path = scratch / f"config-{n}.toml"
    path.write_text(text)
    out = run_cli(["check", str(ref), "--config", str(path), *flags], scratch / "cache")
    path.unlink()
    used = dict(zip(flags[::2], flags[1::2], strict=True))  # a repeated flag: the last one counts
    non_finite = ("nan", "inf", "-inf", "+nan", "nan%")
    if out.error is None and out.exit_code in (0, 1) and (
            any(v.lower() in non_finite for v in used.values())
            or any(f"= {v}\n" in text for v in non_finite)):
        out.error = f"a NaN/inf threshold was accepted: {text!r} {flags}"
    tally.add(out, 0.0, f"config mutant {text!r} {flags}")


# --- the session (``make fuzz`` and the suite's budget) --------------------------------------------------

FUZZ_SETTINGS = dict(database=None, deadline=None, derandomize=False,
                     suppress_health_check=list(HealthCheck))


def fuzz_traces(scratch: Path, n: int, seed: int | None = None) -> Tally:
    fuzz = TraceFuzz(scratch)

    @settings(max_examples=n, **FUZZ_SETTINGS)  # type: ignore[arg-type]
    @given(trace_mutant())
    def one(mutant: Mutant) -> None:
        fuzz.case(mutant)

    _seeded(one, seed)()
    return fuzz.tally


def fuzz_logs(scratch: Path, n: int, seed: int | None = None) -> Tally:
    tally = Tally()
    clean_s = clean_nccl_seconds(scratch)

    @settings(max_examples=n, **FUZZ_SETTINGS)  # type: ignore[arg-type]
    @given(log_mutant(), st.one_of(st.none(), topology_xml_mutant()))
    def one(log: tuple[str, bytes, list[str]], xml: bytes | None) -> None:
        nccl_case(scratch, log[0], log[1], xml, tally, clean_s, log[2])

    _seeded(one, seed)()
    return tally


def fuzz_reports(scratch: Path, n: int, seed: int | None = None) -> Tally:
    tally = Tally()
    report = reference_report(scratch)
    ref = scratch / "ref-report.json"
    ref.write_text(json.dumps(report))
    counter = [0]

    @settings(max_examples=n, **FUZZ_SETTINGS)  # type: ignore[arg-type]
    @given(report_mutant(report))
    def one(blob: bytes) -> None:
        counter[0] += 1
        report_case(scratch, blob, tally, ref, counter[0])

    _seeded(one, seed)()
    return tally


def fuzz_configs(scratch: Path, n: int, seed: int | None = None) -> Tally:
    tally = Tally()
    ref = scratch / "ref-report.json"
    if not ref.exists():
        ref.write_text(json.dumps(reference_report(scratch)))
    counter = [0]

    @settings(max_examples=n, **FUZZ_SETTINGS)  # type: ignore[arg-type]
    @given(toml_mutant(), st.lists(st.tuples(st.sampled_from(THRESHOLD_FLAGS),
                                             st.sampled_from(["nan", "inf", "-inf", "NaN%", "5", "1e400", "-0"])),
                                   max_size=2))
    def one(text: str, flags: list[tuple[str, str]]) -> None:
        counter[0] += 1
        config_case(scratch, text, [x for pair in flags for x in pair], tally, ref, counter[0])

    _seeded(one, seed)()
    return tally


def fuzz_other_inputs(scratch: Path, n: int, seed: int | None = None) -> Tally:
    """nsys exports, Flight Recorder pickles, NCCL Inspector logs and profiler-plugin traces, mutated
    (tests/fuzz_other_inputs.py)."""
    import fuzz_other_inputs as other

    tally = Tally()
    marker = Path("/tmp/commprof-fuzz-pickle-ran")
    marker.unlink(missing_ok=True)
    counter = [0]

    @settings(max_examples=n, **FUZZ_SETTINGS)  # type: ignore[arg-type]
    @given(st.one_of(other.nsys_mutant().map(lambda m: ("nsys", m)),
                     other.pickle_mutant().map(lambda m: ("fr", m)),
                     other.inspector_mutant().map(lambda m: ("inspector", m)),
                     other.plugin_mutant().map(lambda m: ("plugin", m))))
    def one(case: tuple[str, Any]) -> None:
        counter[0] += 1
        folder = scratch / f"other-{counter[0]}"
        shutil.rmtree(folder, ignore_errors=True)
        folder.mkdir()
        kind, mutant = case
        if kind == "nsys":
            other.apply_nsys(other.nsys_export(folder), mutant)
        elif kind == "fr":
            (folder / "nccl_trace_rank_0").write_bytes(mutant)
        elif kind == "plugin":
            (folder / "prof_1_0.json").write_bytes(mutant)
        else:
            (folder / "host-pid1.log").write_bytes(mutant)
        out = run_cli(["analyze", str(folder), "--format", "json"], scratch / "cache")
        if marker.exists():
            out.error = "a pickle ran code while being read"
        tally.add(out, 0.0, f"{kind} mutant {str(mutant)[:300]}")
        shutil.rmtree(folder, ignore_errors=True)

    _seeded(one, seed)()
    return tally


def _seeded(test: Callable[[], None], seed: int | None) -> Callable[[], None]:
    if seed is None:
        return test
    from hypothesis import seed as hypothesis_seed

    return hypothesis_seed(seed)(test)  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--traces", type=int, default=2000)
    parser.add_argument("--logs", type=int, default=1000)
    parser.add_argument("--reports", type=int, default=300)
    parser.add_argument("--configs", type=int, default=300)
    parser.add_argument("--operator", type=int, default=30,
                        help="operator faults: kills, concurrent runs, full disks (tests/fuzz_operator.py)")
    parser.add_argument("--others", type=int, default=600, help="nsys exports, Flight Recorder, Inspector logs")
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--show", type=int, default=5, help="failures printed per kind")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="commprof-fuzz-"))
    failed = 0
    start = time.perf_counter()
    try:
        for kind, run, n in (("traces", fuzz_traces, args.traces), ("logs", fuzz_logs, args.logs),
                             ("reports", fuzz_reports, args.reports), ("configs", fuzz_configs, args.configs),
                             ("other inputs", fuzz_other_inputs, args.others)):
            if n <= 0:
                continue
            t0 = time.perf_counter()
            tally = run(scratch, n, args.seed)
            print(f"{tally.summary(kind)}; {time.perf_counter() - t0:.0f} s", flush=True)
            for failure in tally.failures[: args.show]:
                print("  " + failure.replace("\n", "\n  "), flush=True)
            failed += len(tally.failures)
        if args.operator > 0:
            from fuzz_operator import fuzz_operator

            t0 = time.perf_counter()
            operator = fuzz_operator(scratch, args.operator, args.seed)
            print(f"{operator.summary()}; {time.perf_counter() - t0:.0f} s", flush=True)
            for failure in operator.failures[: args.show]:
                print("  " + failure.replace("\n", "\n  "), flush=True)
            failed += len(operator.failures)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"fuzz: {failed} failures in {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
