"""Hostile-input fuzzing shared by the suite (tests/test_fuzz.py, a bounded budget) and ``make fuzz``
(this file as a script, thousands of cases): hypothesis-driven mutators for Kineto traces (structure and
values), NCCL logs, JSON reports and TOML configs, and one runner that holds every case to the promise
of the README: an exit code in {0, 1, 2}, no traceback, a time bounded by a small multiple of a clean
run of the same size, and exit 0 only with a result that says what was skipped.

    python tests/fuzzlib.py --traces 2000 --logs 1000 --reports 300 --configs 300
"""

from __future__ import annotations

import copy
import gzip
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

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "real_traces" / "hta"
EVENTS_PER_BASE = 400
HANG_S = 60.0  # a case still running after this is a hang (the real bound is the ratio below)
RATIO_LIMIT = 10.0  # time of a case / time of a clean case of the same size
FLOOR_S = 0.25  # below this, a case's time is noise, whatever its ratio


# --- base inputs: small slices of real-format traces ---------------------------------------------------


def _load(path: Path) -> dict[str, Any]:
    raw = path.read_bytes()
    doc: dict[str, Any] = json.loads(gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw)
    return doc


def _slice(doc: dict[str, Any], n: int) -> dict[str, Any]:
    """Metadata, step marks and communication events, and every k-th other event: ~n events that
    still hold each kind the ingest reads (kernels, launches, record_param_comms, Gloo ops)."""
    events = doc.get("traceEvents") or []
    keep_words = ("ProfilerStep", "nccl", "gloo", "record_param_comms", "c10d", "commprof:")
    special = [e for e in events if e.get("ph") == "M" or any(w in str(e.get("name")) for w in keep_words)]
    others = [e for e in events if e not in special] if len(events) < 20000 else events
    step = max(1, len(others) // max(1, n - min(len(special), n // 2)))
    kept = special[: n // 2] + others[::step]
    kept.sort(key=lambda e: (e.get("ts") or 0) if isinstance(e.get("ts"), (int, float)) else 0)
    return {**{k: v for k, v in doc.items() if k != "traceEvents"}, "traceEvents": kept[:n]}


_BASES: list[tuple[str, dict[str, Any]]] = []


def bases() -> list[tuple[str, dict[str, Any]]]:
    if not _BASES:
        paths = [REPO / "sample_traces" / "gloo_4rank_profiler" / "rank-0.json.gz",
                 REPO / "sample_traces" / "synth_2x8_tp8_dp2" / "raw" / "traces" / "rank-0.json.gz"]
        paths += [SHARED / "nccl_parser_config" / "nccl_data.json.gz",
                  SHARED / "trace_filter" / "sampled_rank-0.json.gz"]
        _BASES.extend((path.parent.name, _slice(_load(path), EVENTS_PER_BASE)) for path in paths if path.is_file())
    return _BASES


# --- trace mutators ------------------------------------------------------------------------------------

HOSTILE_VALUES: list[Any] = [
    "abc", "nan", "inf", "-inf", "", " 12 ", "1e400", 1e300, -1e300, 1e308, 0, -1, -5, 2**63, 2**64 + 7,
    10**30, -(10**20), None, True, [], {}, [[None]], [1, "x"], {"a": 1}, "\ufffd\u0000", "x" * 5000,
    "ProfilerStep#" + "9" * 30, "[[1, 2], [3]]", "[0,1,,]",
]
RAW_TOKENS = [b"NaN", b"-Infinity", b"1" + b"0" * 400, b'"\\ud800"', b'"\\udc00x"', b"1e99999",
              b"[" * 20000 + b"]" * 20000, b"{}" , b"-0.0000000001", b"18446744073709551616"]
EVENT_FIELDS = ["ts", "dur", "pid", "tid", "name", "cat", "ph", "args", "id", "s"]
ARG_FIELDS = ["stream", "device", "correlation", "External id", "Collective name", "In msg nelems",
              "Out msg nelems", "In split size", "Out split size", "Group size", "dtype", "Process Group Name",
              "Process Group Ranks", "Seq", "Src Rank", "Dst Rank", "Is asynchronized op", "Input Dims",
              "Input type", "name", "labels"]
HEADER_FIELDS = ["baseTimeNanoseconds", "distributedInfo", "deviceProperties", "host_name", "traceEvents"]
DIST_FIELDS = ["rank", "world_size", "backend", "pg_count", "pg_config", "nccl_version"]
MARK = "__RAW_TOKEN_{}__"


@dataclass
class Mutant:
    base: str
    files: dict[str, bytes]  # name -> content, written into a fresh folder
    what: list[str] = field(default_factory=list)
    lossy: bool = False  # the mutation surely drops data: exit 0 must come with a warning
    clean_bytes: int = 0  # text size of the unmutated trace


def _set_value(draw: st.DrawFn, doc: dict[str, Any], what: list[str], raws: list[bytes]) -> bool:
    """One field of one event (or of the header) set to a hostile value. True if an event that
    ingest counts surely becomes unreadable (its ts or dur is no number)."""
    events = doc["traceEvents"]
    if draw(st.integers(0, 9)) == 0 or not events:
        key = draw(st.sampled_from(HEADER_FIELDS + [f"distributedInfo.{k}" for k in DIST_FIELDS]))
        target, name = (doc.setdefault("distributedInfo", {}), key.split(".")[1]) if "." in key else (doc, key)
        if not isinstance(target, dict):
            return False
    else:
        index = draw(st.integers(0, len(events) - 1))
        event = events[index]
        if not isinstance(event, dict):
            return False
        key = draw(st.sampled_from(EVENT_FIELDS + [f"args.{k}" for k in ARG_FIELDS]))
        target, name = (event.setdefault("args", {}), key[5:]) if key.startswith("args.") else (event, key)
        if not isinstance(target, dict):
            return False
    if draw(st.integers(0, 3)) == 0:
        token = draw(st.sampled_from(RAW_TOKENS))
        raws.append(token)
        value: Any = MARK.format(len(raws) - 1)
        shown = token[:24].decode(errors="replace")
    else:
        value = draw(st.sampled_from(HOSTILE_VALUES))
        shown = repr(value)[:24]
    target[name] = value
    what.append(f"{key}={shown}")
    return key in ("ts", "dur") and target.get("ph") == "X" and target.get("cat") in DEVICE_CATS \
        and not _plausible(key, value)


DEVICE_CATS = ("kernel", "gpu_memcpy", "gpu_memset")


def _plausible(key: str, value: Any) -> bool:
    """A value that reads as a sensible time: the event is then not lost (no warning is owed)."""
    if key == "ts" or isinstance(value, bool):
        return False  # no hostile value is near the trace's epoch timestamps
    try:
        number = float(str(value).strip())
    except ValueError:
        return False
    return 0 <= number <= 1e6


def _structural(draw: st.DrawFn, text: bytes, what: list[str]) -> tuple[bytes, bool]:
    """A byte-level change of the serialized trace; True if it surely loses events."""
    kind = draw(st.sampled_from(["none", "none", "flip", "delete", "dup", "insert", "truncate", "ws",
                                 "deep", "nan", "surrogate", "nul"]))
    n = len(text)
    at = draw(st.integers(0, max(0, n - 1)))
    what.append(kind)
    if kind == "flip":
        return text[:at] + bytes([draw(st.integers(0, 255))]) + text[at + 1 :], False
    if kind == "delete":
        return text[:at] + text[at + draw(st.integers(1, 2000)) :], False
    if kind == "dup":
        return text[:at] + text[at : at + draw(st.integers(1, 2000))] + text[at:], False
    if kind == "insert":
        return text[:at] + draw(st.binary(min_size=1, max_size=40)) + text[at:], False
    if kind == "truncate":
        return text[: draw(st.integers(0, max(0, n - 2)))], True
    if kind == "ws":
        return text[:at] + draw(st.sampled_from([b" ", b"\n", b"\t", b"\r\n"])) * draw(
            st.integers(1, 3 << 20)) + text[at:], False
    if kind == "deep":
        depth = draw(st.integers(100, 50000))
        return text[:at] + b"[" * depth + b"]" * depth + text[at:], False
    if kind == "nan":
        return text.replace(b'"dur": ', b'"dur": NaN, "x": ', 1), False
    if kind == "surrogate":
        return text.replace(b'"name": "', b'"name": "\\ud834', draw(st.integers(1, 3))), False
    if kind == "nul":
        return text[:at] + b"\x00" + text[at:], False
    return text, False


@st.composite
def trace_mutant(draw: st.DrawFn) -> Mutant:
    name, base = draw(st.sampled_from(bases()))
    doc = copy.deepcopy(base)
    what: list[str] = []
    raws: list[bytes] = []
    lossy = False
    for _ in range(draw(st.integers(0, 4))):
        lossy |= _set_value(draw, doc, what, raws)
    indent = draw(st.sampled_from([None, None, 1]))
    clean = json.dumps(base, indent=indent).encode()
    text = json.dumps(doc, indent=indent).encode()
    for i, token in enumerate(raws):
        text = text.replace(json.dumps(MARK.format(i)).encode(), token)
    text, lost = _structural(draw, text, what)
    lossy |= lost
    files: dict[str, bytes] = {}
    zipped = draw(st.booleans())
    files["rank-0.json.gz" if zipped else "rank-0.json"] = gzip.compress(text, 1) if zipped else text
    if draw(st.booleans()):  # a clean second rank beside it
        other = copy.deepcopy(base)
        if isinstance(other.get("distributedInfo"), dict):
            other["distributedInfo"]["rank"] = 1
        files["rank-1.json"] = json.dumps(other).encode()
    if zipped and draw(st.integers(0, 7)) == 0:  # a gzip member cut short
        blob = files["rank-0.json.gz"]
        files["rank-0.json.gz"] = blob[: draw(st.integers(10, max(10, len(blob) - 1)))]
        what.append("gzip-cut")
        lossy = True
    return Mutant(name, files, what, lossy, len(clean))


# --- NCCL log mutators ---------------------------------------------------------------------------------

NCCL_FIXTURES = Path(__file__).parent / "fixtures" / "nccl"
SYNTH_NCCL = REPO / "sample_traces" / "synth_2x8_tp8_dp2" / "raw" / "nccl"


def _log_sources() -> dict[str, list[str]]:
    paths = sorted(NCCL_FIXTURES.rglob("*.log")) + sorted(SYNTH_NCCL.glob("*.log"))[:2]
    return {f"{p.parent.name}/{p.name}": p.read_text(errors="replace").splitlines() for p in paths}


_LOGS: dict[str, list[str]] = {}


def log_sources() -> dict[str, list[str]]:
    if not _LOGS:
        _LOGS.update(_log_sources())
    return _LOGS


def _hostile_number(draw: st.DrawFn) -> str:
    return draw(st.sampled_from(["9" * 30, "-1", "18446744073709551616", "1e400", "nan", "0x7fffffffffffffffff",
                                 "00000000000000000000000000000007", "-9223372036854775809", "٣"]))


@st.composite
def log_mutant(draw: st.DrawFn) -> tuple[str, bytes, list[str]]:
    """(file name, bytes, what) of a mutated NCCL log; sometimes a topology XML beside it."""
    key = draw(st.sampled_from(sorted(log_sources())))
    lines = list(log_sources()[key])
    what: list[str] = [key]
    start = draw(st.integers(0, max(0, len(lines) - 1)))
    lines = lines[start : start + draw(st.integers(1, 300))]
    for _ in range(draw(st.integers(0, 10))):
        i = draw(st.integers(0, len(lines) - 1))
        kind = draw(st.sampled_from(["cut", "drop", "noise", "number", "dup", "prefix", "swap", "binary"]))
        what.append(kind)
        line = lines[i]
        if kind == "cut":
            lines[i] = line[: draw(st.integers(0, len(line)))]
        elif kind == "drop":
            del lines[i]
            if not lines:
                lines = [""]
        elif kind == "noise":
            j = draw(st.integers(0, len(line)))
            lines[i] = line[:j] + draw(st.text(max_size=16)) + line[j:]
        elif kind == "number":
            digits = [k for k, c in enumerate(line) if c.isdigit()]
            if digits:
                j = draw(st.sampled_from(digits))
                end = j
                while end < len(line) and line[end].isdigit():
                    end += 1
                lines[i] = line[:j] + _hostile_number(draw) + line[end:]
        elif kind == "dup":
            lines.insert(i, line)
        elif kind == "prefix":
            lines[i] = draw(st.sampled_from(["[1,3]<stderr>:", "2024-01-01T00:00:00Z ", "\x1b[0m", "\ufeff"])) + line
        elif kind == "swap" and i + 1 < len(lines):
            lines[i], lines[i + 1] = lines[i + 1], lines[i]
        elif kind == "binary":
            lines[i] = line + draw(st.binary(max_size=20)).decode("latin-1")
    text = "\n".join(lines) + "\n"
    shape = draw(st.sampled_from(["plain", "plain", "plain", "big-prefix", "utf16", "gzip", "crlf"]))
    what.append(shape)
    if shape == "big-prefix":
        return "train.out", (("x" * 99 + "\n") * (11000)).encode() + text.encode(errors="surrogateescape"), what
    if shape == "utf16":
        return "nccl.log", text.encode("utf-16"), what
    if shape == "gzip":
        return "nccl.log.gz", gzip.compress(text.encode(errors="surrogateescape")), what
    if shape == "crlf":
        return "nccl.log", text.replace("\n", "\r\n").encode(errors="surrogateescape"), what
    return "nccl.log", text.encode(errors="surrogateescape"), what


@st.composite
def topology_xml_mutant(draw: st.DrawFn) -> bytes:
    depth = draw(st.integers(0, 60000))
    body = '<cpu numaid="0"><pci busid="0000:07:00.0" class="0x030200" link_speed="16 GT/s" link_width="16">' \
           '<gpu dev="0" sm="80" rank="0" gdr="1"/></pci></cpu>'
    attrs = draw(st.sampled_from(['', ' rank="99999999999999999999999"', ' dev="-1"', ' link_width="nan"']))
    return (f'<system version="1"{attrs}>' + "<pci>" * depth + body + "</pci>" * depth + "</system>").encode()


# --- JSON report and TOML config mutators --------------------------------------------------------------


def _paths(doc: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    yield prefix
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc[:5]):
            yield from _paths(v, (*prefix, i))


@st.composite
def report_mutant(draw: st.DrawFn, report: dict[str, Any]) -> bytes:
    doc = copy.deepcopy(report)
    all_paths = [p for p in _paths(doc) if p]
    for _ in range(draw(st.integers(1, 6))):
        path = draw(st.sampled_from(all_paths))
        parent: Any = doc
        try:
            for key in path[:-1]:
                parent = parent[key]
            action = draw(st.sampled_from(["set", "set", "set", "delete"]))
            if action == "delete" and isinstance(parent, dict):
                parent.pop(path[-1], None)
            elif isinstance(parent, (dict, list)):
                parent[path[-1]] = draw(st.sampled_from(HOSTILE_VALUES + [float("nan"), float("inf"), -1e308]))
        except (KeyError, IndexError, TypeError):
            continue
    return json.dumps(doc).encode()


TOML_KEYS = ["max_exposed_comm_pct", "max_exposed_ms_per_step", "max_straggler_wait_ms", "fail_on_findings",
             "max_regression_pct", "noise_floor_ms", "baseline", "dimension.tp.max_exposed_comm_pct",
             "tier.nvlink.min_busbw_efficiency", "unknown_key", "peaks.nvlink"]
TOML_VALUES = ["nan", "inf", "-inf", "+nan", "1e400", "-1", "0", "5", "\"5\"", "\"high\"", "\"bogus\"", "[]",
               "{}", "true", "1979-05-27", "\"\"", "9" * 40, "[1, 2]", "{a = 1}"]


@st.composite
def toml_mutant(draw: st.DrawFn) -> str:
    lines = []
    table = draw(st.sampled_from(["", "", "", "[tool.commprof]\n", "[[x]]\n"]))
    for _ in range(draw(st.integers(1, 3))):
        key = draw(st.sampled_from(TOML_KEYS[:7] * 3 + TOML_KEYS))
        value = draw(st.sampled_from(["5", "0", "12.5", "nan", "inf"] * 3 + TOML_VALUES))
        if "." in key:
            key = ".".join(f'"{part}"' if draw(st.booleans()) else part for part in key.split("."))
        lines.append(f"{key} = {value}")
    if draw(st.integers(0, 5)) == 0:
        lines.append(draw(st.text(max_size=20)))
    return table + "\n".join(lines) + "\n"


THRESHOLD_FLAGS = ["--max-exposed-comm-pct", "--max-exposed-ms-per-step", "--max-straggler-wait-ms",
                   "--noise-floor-ms", "--max-regression"]


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
    from commprof.ingest.nccl import build_tables, load_nccl
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
    from commprof.ingest.nccl import build_tables, load_nccl
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
    if out.error is None and out.exit_code == 0 and any(v in " ".join(flags) + text for v in ("nan", "inf")):
        if any(f"= {v}" in text for v in ("nan", "inf", "+nan", "-inf")) or any(
                v in flags for v in ("nan", "inf", "-inf")):
            out.error = f"a NaN/inf threshold passed: {text!r} {flags}"
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
    parser.add_argument("--seed", type=int, default=None)
    parser.add_argument("--show", type=int, default=5, help="failures printed per kind")
    args = parser.parse_args(argv)
    scratch = Path(tempfile.mkdtemp(prefix="commprof-fuzz-"))
    failed = 0
    start = time.perf_counter()
    try:
        for kind, run, n in (("traces", fuzz_traces, args.traces), ("logs", fuzz_logs, args.logs),
                             ("reports", fuzz_reports, args.reports), ("configs", fuzz_configs, args.configs)):
            if n <= 0:
                continue
            t0 = time.perf_counter()
            tally = run(scratch, n, args.seed)
            print(f"{tally.summary(kind)}; {time.perf_counter() - t0:.0f} s", flush=True)
            for failure in tally.failures[: args.show]:
                print("  " + failure.replace("\n", "\n  "), flush=True)
            failed += len(tally.failures)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"fuzz: {failed} failures in {time.perf_counter() - start:.0f} s")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.path.insert(0, str(REPO))
    sys.exit(main())
