"""NCCL RAS status reports (``ncclras``, NCCL 2.24+; ``echo status | nc localhost 28028``) -> rows.

The text report, as the RAS client prints it (src/ras/client_support.cc; 2.24 - 2.30): ``NCCL version …
compiled with CUDA …``, a *Job summary* table, *Communicators… (0.12s)* with one row per group of alike
communicators (``Group  Comms  Nodes  Ranks per node  Ranks per comm  Ranks in group  Status  Errors``), then
*Errors* (``INCOMPLETE``, ``DEAD``, ``#0-0 (<hash>) INCOMPLETE|ERROR``) and *Warnings* (``TIMEOUT``,
``#0-0 (<hash>) MISMATCH``). A MISMATCH block groups a communicator's ranks by what they report: before 2.26
one *collective* operation count, since 2.26 one count per collective (``… different AllReduce operation
counts``), and their status (``… different status``). Each group is ``N ranks have launched up to operation
K`` (or ``have not launched any operations``, 2.26+) followed by its ranks when it is small enough to list
(an outlier: at most 10 ranks and a quarter of the communicator), or a single ``Rank R has launched up to
operation K -- GPU g managed by process p on node n``. The JSON report (2.28.7+, ``ncclras -f json``) holds
every rank's counts. The monitor mode (2.29+) prints ``[time] PEER_DEAD: Process p on node n …`` lines.

A report may sit inside other output (a job's stdout) and may hold several queries one after another
(snapshots, numbered from 0). Lines of a report that cannot be read are named, with file and line, in the
warnings; nothing raises.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import Any

VERSION = re.compile(r"^NCCL version (\S+) compiled with CUDA")
SECTION = re.compile(r"^(Job summary|Communicators\.\.\.(?: \(([\d.]+)s\))?|Errors|Warnings)\s*$")
GROUP_ROW = re.compile(r"^(\d+)\s+(\d+)\s+(\d+)\s+(\d+(?:-\d+)?)\s+(\d+)\s+(\d+)\s+([A-Z]+)\s+([A-Z,]+)$")
COMM_HEAD = re.compile(r"^#(\d+)-(\d+) \(([0-9a-fA-F]+)\) (MISMATCH|INCOMPLETE|ERROR)$")
DIFFERENT = re.compile(r"^Communicator ranks have different (?:(\w+) operation counts|(status))$")
LEVEL = re.compile(r"^(\d+) ranks have (?:launched up to operation (\d+)|(not launched any operations)"
                   r"|status (\w+))$")
ONE_RANK = re.compile(r"^Rank (\d+) has (?:launched up to operation (\d+)|(not launched any operations)"
                      r"|status (\w+))(?: -- (.*))?$")
RANK = re.compile(r"^Rank (\d+) -- (.*)$")
WHERE = re.compile(r"GPU (\S+(?: \(NVML \d+\))?) managed by process (\d+) on node (\S+)")
MISSING_RANKS = re.compile(r"^The missing ranks?: ([\d, ]+)$")
PROCESS = re.compile(r"^Process (\d+) on node (\S+) managing GPUs? (.+)$")
MONITOR = re.compile(r"^\[([^\]]+)\] ([A-Z_]+): (.*)$")
NOTE_LINES = re.compile(r"^(?:Missing communicator data from \d+|\d+ job process|Encountered \d+ communication "
                        r"timeout|Initialization errors? on \d+|Asynchronous errors? on \d+|\d+ ranks reported "
                        r"|Rank \d+ reported |\[could not find information|No communicator data collected)")
DECOR = re.compile(r"^(?:=+|-+|Group\s+Comms\s+Nodes.*|#\s+in group.*|\(total\).*|Nodes\s+Processes.*"
                   r"|per node.*|Processes\s+GPUs|RAS Monitor Mode.*|\d+(?:\s+\d+)+|CUDA runtime version.*"
                   r"|The outlier nodes?:|Node \S+ running process.*)$")
KINDS = ("INCOMPLETE", "DEAD", "TIMEOUT")
# how the report's own lines begin: one of them that cannot be read is named; any other line is output around it
RAS_WORDS = re.compile(r"^(?:Rank |\d+ ranks? |Communicator |#\d|Process \d|Missing |Encountered |The missing "
                       r"|Group |\d+\s+\d+\s)")


@dataclass
class RasRows:
    """What the reports hold, as rows (``commprof.ingest.nccl_ras.tables`` makes frames of them)."""

    groups: list[dict[str, Any]] = field(default_factory=list)  # one per row of a Communicators table
    counts: list[dict[str, Any]] = field(default_factory=list)  # one per group of ranks at one op count / status
    notes: list[dict[str, Any]] = field(default_factory=list)  # errors and warnings other than op counts
    versions: set[str] = field(default_factory=set)


def looks_like_ras(text: str) -> bool:
    """The head of a file reads as a RAS report (text or JSON), wherever in other output it sits."""
    head = text.lstrip()
    if head.startswith("{"):
        return '"communicators' in text and ('"collective_counts"' in text or '"communicators_count"' in text)
    return re.search(r"^\s*(?:Communicators\.\.\.|Group\s+Comms\s+Nodes\s+Ranks|#\d+-\d+ \([0-9a-fA-F]{8,}\) "
                     r"(?:MISMATCH|INCOMPLETE|ERROR)$|RAS Monitor Mode)", text, re.M) is not None


class _TextReader:
    """One file's text, line by line: a small state machine over the report's sections and blocks."""

    def __init__(self, name: str, rows: RasRows, warnings: list[str]) -> None:
        self.name, self.rows, self.warnings = name, rows, warnings
        self.snapshot = -1
        self.section: str | None = None
        self.comm: dict[str, Any] | None = None  # the #g-i block being read
        self.what: str | None = None  # the op (or "status") its levels are about
        self.level: dict[str, Any] | None = None  # the level its "Rank r -- ..." lines join
        self.seen_summary = False
        self.version: str | None = None
        self.bad = 0

    def read(self, text: str) -> None:
        for no, raw in enumerate(text.splitlines(), 1):
            self.line(raw.strip(), no)
        self._close_block(len(text.splitlines()))
        if self.bad > 3:
            self.warnings.append(f"NCCL RAS: {self.name}: {self.bad} lines in all could not be read")

    def _new_snapshot(self) -> None:
        self.snapshot += 1
        self.version = None
        self.section, self.seen_summary = None, False
        self.comm = self.what = self.level = None

    def line(self, line: str, no: int) -> None:
        if not line:
            return
        if (m := VERSION.match(line)) is not None:
            self._close_block(no)
            self._new_snapshot()
            self.version = m.group(1)
            self.rows.versions.add(m.group(1))
            return
        if (m := SECTION.match(line)) is not None:
            self._close_block(no)
            name = m.group(1).split("...")[0].strip()
            if self.snapshot < 0 or (name in ("Job summary", "Communicators") and self.seen_summary):
                self._new_snapshot()  # a query without its version line, or the next query
            self.section = name
            self.seen_summary = self.seen_summary or name == "Communicators"
            return
        if (m := MONITOR.match(line)) is not None:
            if self.snapshot < 0:
                self._new_snapshot()
            self._note(m.group(2), None, None, m.group(3), [], no, time=m.group(1))
            return
        if self.section is None:
            return  # other output around the report
        if (m := COMM_HEAD.match(line)) is not None:
            self._close_block(no)
            self.comm = {"comm": f"#{m.group(1)}-{m.group(2)}", "group": int(m.group(1)),
                         "hash": m.group(3).lower(), "kind": m.group(4), "line": no, "levels": 0}
            if m.group(4) != "MISMATCH":
                self._note(m.group(4), self.comm["comm"], self.comm["hash"], "", [], no)
            return
        if self.section == "Communicators" and (m := GROUP_ROW.match(line)) is not None:
            per_node = m.group(4)
            self.rows.groups.append({
                "file": self.name, "snapshot": self.snapshot, "group": int(m.group(1)), "comms": int(m.group(2)),
                "nodes": int(m.group(3)), "ranks_per_node": per_node, "ranks_per_comm": int(m.group(5)),
                "ranks_in_group": int(m.group(6)), "status": m.group(7), "errors": m.group(8), "line": no,
                "version": self.version})
            return
        if self.comm is not None and self._in_block(line, no):
            return
        if line in KINDS:
            self._close_block(no)
            self.comm = {"comm": None, "group": None, "hash": None, "kind": line, "line": no, "levels": 0}
            self._note(line, None, None, "", [], no)
            return
        if DECOR.match(line) or NOTE_LINES.match(line) or (self.comm is not None and PROCESS.match(line)):
            if self.comm is not None and self.rows.notes and self.rows.notes[-1]["line"] == self.comm["line"]:
                note = self.rows.notes[-1]
                note["detail"] = (note["detail"] + "; " if note["detail"] else "") + line
            return
        if RAS_WORDS.match(line):
            self._unreadable(line, no)
        else:  # the job's own output after the report
            self._close_block(no)
            self.section = None

    def _in_block(self, line: str, no: int) -> bool:
        """A line of a ``#g-i`` (or INCOMPLETE/DEAD/TIMEOUT) block; False when it is none of them."""
        comm = self.comm
        assert comm is not None
        if (m := DIFFERENT.match(line)) is not None:
            self.what, self.level = (m.group(1) or "status"), None
            if self.what != "status" and self.what.lower() == "collective":
                self.what = "collective"  # 2.24 / 2.25: one count over all collectives
            return True
        if comm["kind"] == "MISMATCH" and (m := LEVEL.match(line)) is not None:
            ops = 0 if m.group(3) else int(m.group(2)) if m.group(2) else None
            self.level = self._level(int(m.group(1)), ops, m.group(4), [], no)
            return True
        if comm["kind"] == "MISMATCH" and (m := ONE_RANK.match(line)) is not None:
            ops = 0 if m.group(3) else int(m.group(2)) if m.group(2) else None
            level = self._level(1, ops, m.group(4), [int(m.group(1))], no)
            self._where(level, int(m.group(1)), m.group(5) or "")
            self.level = None
            return True
        if (m := RANK.match(line)) is not None:
            rank = int(m.group(1))
            if self.level is not None:
                self.level["ranks"].append(rank)
                self._where(self.level, rank, m.group(2))
            elif comm["kind"] in ("INCOMPLETE", "ERROR") and self.rows.notes:
                self.rows.notes[-1]["ranks"].append(rank)
            else:
                self._unreadable(line, no)
            return True
        if (m := MISSING_RANKS.match(line)) is not None and self.rows.notes:
            self.rows.notes[-1]["ranks"].extend(int(r) for r in re.findall(r"\d+", m.group(1)))
            return True
        if comm["kind"] in ("INCOMPLETE", "DEAD") and (m := PROCESS.match(line)) is not None and self.rows.notes:
            note = self.rows.notes[-1]
            note["processes"].append(f"{m.group(1)}@{m.group(2)}")
            return True
        return False

    def _level(self, count: int, ops: int | None, status: str | None, ranks: list[int], no: int) -> dict[str, Any]:
        comm = self.comm
        assert comm is not None
        if self.what is None:
            self._unreadable(f"a rank count before 'Communicator ranks have different …' in {comm['comm']}", no)
        comm["levels"] += 1
        level = {"file": self.name, "snapshot": self.snapshot, "comm": comm["comm"], "group": comm["group"],
                 "hash": comm["hash"], "what": self.what or "collective", "ops": ops if status is None else None,
                 "status": status, "ranks_count": count, "ranks": ranks, "nodes": [], "pids": [], "line": no}
        self.rows.counts.append(level)
        return level

    @staticmethod
    def _where(level: dict[str, Any], rank: int, text: str) -> None:
        m = WHERE.search(text)
        level["nodes"].append(m.group(3) if m else None)
        level["pids"].append(int(m.group(2)) if m else None)

    def _note(self, kind: str, comm: str | None, hash_: str | None, detail: str, ranks: list[int], no: int,
              time: str | None = None) -> None:
        self.rows.notes.append({"file": self.name, "snapshot": self.snapshot, "comm": comm, "hash": hash_,
                                "kind": kind, "detail": detail, "ranks": ranks, "processes": [], "line": no,
                                "time": time})

    def _close_block(self, no: int) -> None:
        comm = self.comm
        if comm is not None and comm["kind"] == "MISMATCH" and not comm["levels"]:
            self.warnings.append(f"NCCL RAS: {self.name}:{comm['line']}: the MISMATCH of {comm['comm']} ends "
                                 f"(line {no}) before any rank count: the report is cut")
        self.comm = self.what = self.level = None

    def _unreadable(self, line: str, no: int) -> None:
        self.bad += 1
        if self.bad <= 3:
            self.warnings.append(f"NCCL RAS: {self.name}:{no}: line not read: {line[:120]!r}")


def read_text(text: str, name: str, rows: RasRows, warnings: list[str]) -> None:
    _TextReader(name, rows, warnings).read(text)


def read_json(text: str, name: str, rows: RasRows, warnings: list[str]) -> None:
    """``ncclras -f json`` (2.28.7+): every rank's counts per collective, grouped here as the text report does."""
    try:
        doc = json.loads(text)
    except (ValueError, RecursionError) as err:
        warnings.append(f"NCCL RAS: {name}: not readable JSON ({err}); skipped")
        return
    comms = doc.get("communicators") if isinstance(doc, dict) else None
    if not isinstance(comms, list):
        warnings.append(f"NCCL RAS: {name}: a JSON report without a 'communicators' list; skipped")
        return
    if isinstance(doc.get("nccl_version"), str):
        rows.versions.add(doc["nccl_version"])
    for i, comm in enumerate(comms):
        if not isinstance(comm, dict) or not isinstance(comm.get("ranks"), list):
            warnings.append(f"NCCL RAS: {name}: communicator {i} has no list of ranks; skipped")
            continue
        _json_comm(comm, i, name, rows, warnings, doc.get("nccl_version") if isinstance(doc.get("nccl_version"), str)
                   else None)
    timeouts = doc.get("ras", {}).get("timeouts_count") if isinstance(doc.get("ras"), dict) else None
    if isinstance(timeouts, int) and timeouts > 0:
        rows.notes.append({"file": name, "snapshot": 0, "comm": None, "hash": None, "kind": "TIMEOUT",
                           "detail": f"Encountered {timeouts} communication timeout(s)", "ranks": [], "processes": [],
                           "line": None, "time": None})


def _json_comm(comm: dict[str, Any], i: int, name: str, rows: RasRows, warnings: list[str],
               version: str | None) -> None:
    hash_ = str(comm.get("hash", "")).lower().removeprefix("0x") or None
    label = f"#{i}"
    size = comm.get("size") if isinstance(comm.get("size"), int) else None
    by_op: dict[str, dict[int, list[tuple[int, Any, Any]]]] = {}
    for r in comm["ranks"]:
        counts = r.get("collective_counts") if isinstance(r, dict) else None
        if not isinstance(counts, dict) or not isinstance(r.get("rank"), int):
            warnings.append(f"NCCL RAS: {name}: a rank of communicator {label} without rank or counts; skipped")
            continue
        for op, n in counts.items():
            if isinstance(n, int):
                by_op.setdefault(str(op), {}).setdefault(n, []).append((r["rank"], r.get("host"), r.get("pid")))
    rows.groups.append({"file": name, "snapshot": 0, "group": i, "comms": 1, "nodes": None, "ranks_per_node": None,
                        "ranks_per_comm": size, "ranks_in_group": len(comm["ranks"]), "status": None,
                        "errors": "MISMATCH" if any(len(v) > 1 for v in by_op.values()) else "OK", "line": None,
                        "version": version})
    for op, levels in by_op.items():
        if len(levels) < 2:
            continue  # every rank at one count: nothing ahead or behind
        for ops, members in sorted(levels.items(), key=lambda kv: (-len(kv[1]), kv[0])):
            members.sort()
            rows.counts.append({"file": name, "snapshot": 0, "comm": label, "group": i, "hash": hash_, "what": op,
                                "ops": ops, "status": None, "ranks_count": len(members),
                                "ranks": [m[0] for m in members], "nodes": [_str(m[1]) for m in members],
                                "pids": [m[2] if isinstance(m[2], int) else None for m in members], "line": None})
    missing = [m.get("rank") for m in comm.get("missing_ranks") or [] if isinstance(m, dict)]
    missing = [m for m in missing if isinstance(m, int)]
    if missing:
        rows.notes.append({"file": name, "snapshot": 0, "comm": label, "hash": hash_, "kind": "INCOMPLETE",
                           "detail": f"Missing communicator data from {len(missing)} rank(s)", "ranks": missing,
                           "processes": [], "line": None, "time": None})


def _str(value: Any) -> str | None:
    return value if isinstance(value, str) else None
