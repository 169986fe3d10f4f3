"""Hostile-input mutators (hypothesis strategies) for tests/fuzzlib.py: Kineto traces (values of every
field the ingest reads, and byte-level damage of the text), NCCL logs and topology dumps, JSON reports and
TOML configs. Each trace mutant says whether it surely loses data (``lossy``): exit 0 must then warn."""

from __future__ import annotations

import copy
import gzip
import json
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hypothesis import strategies as st

REPO = Path(__file__).resolve().parents[1]
SHARED = REPO.parent / "shared" / "real_traces" / "hta"
EVENTS_PER_BASE = 400


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
    if draw(st.integers(0, 9)) == 0 or not events or not isinstance(events, list):
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
