"""Stream NCCL ``NCCL_DEBUG=INFO`` logs (2.18 - 2.30) into records, fast, without ever raising on
their content.

A 128-rank job with ``NCCL_DEBUG_SUBSYS=COLL`` writes one line per rank per collective: millions
of lines, nearly all COLL. So the loop does the least possible per line: find the ``NCCL INFO``
marker, look the prefix up in a per-file cache, and pick a family with substring tests. COLL lines
are not regex-parsed in Python at all: the loop only pulls out the comm pointer (it sets the
context that lazy-connect lines depend on) and keeps the message; chunks of 200k messages are then
split into fields by polars in a worker thread (polars releases the GIL, so that work overlaps the
loop). Everything else is rare enough for Python regexes.

Pieces of 64 KB or more that are dense in NCCL lines skip even that per-line step for their runs of COLL and
TUNING lines: ``bulk`` keys their lines in polars and the runs update the state in one go (``_feed_dense``);
small files are read ahead so that their pieces are keyed together (``parse_files``).
"""

from __future__ import annotations

import io
import mmap
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from commprof.ingest.nccl_logs import bulk
from commprof.ingest.nccl_logs import handlers as hd
from commprof.ingest.nccl_logs import patterns as pt
from commprof.ingest.nccl_logs.colls import COLL_SCHEMA, Segment, chunk_frame
from commprof.ingest.nccl_logs.infer import infer_comms
from commprof.ingest.nccl_logs.records import CommRank, Link, ParseStats, Process, Tuning, Warn
from commprof.ingest.nccl_logs.scan import MARKED, Skipped, is_paste, open_text, read_candidates, text_encoding
from commprof.ingest.nccl_logs.state import Head, State

COLL_CHUNK_ROWS = 25_000  # small enough that little of the polars work is left for the end
HEAD_CACHE_MAX = 50_000
READ_AHEAD_BYTES = 8 << 20  # files up to this size are read ahead and their dense pieces prepared together
BATCH_BYTES = 16 << 20  # dense text prepared together (two batches in memory at a time)


@dataclass
class NcclLogs:
    """Everything read from a set of NCCL logs; tables are built from it in ``commprof.ingest.nccl_logs.tables``."""

    processes: list[Process]
    comms: list[CommRank]
    links: list[Link]
    tuning: list[Tuning]
    warns: list[Warn]
    colls: pl.DataFrame
    stats: ParseStats
    files: list[str] = field(default_factory=list)
    gpu_models: dict[str | None, set[str]] = field(default_factory=dict)  # host -> GPU names seen


class _FileRead:
    """Where the parse of one file stands: its prefixes seen, its messages counted by family."""

    __slots__ = ("counts", "file", "heads", "line_no", "n_coll")

    def __init__(self, file: str) -> None:
        self.file = file
        self.heads: dict[str, Head] = {}
        self.counts: dict[str, int] = {}
        self.line_no = 0
        self.n_coll = 0

    def skip(self, part: Skipped) -> None:
        """Lines the prefilter passed over: the parser would have called each ``empty`` or ``foreign``."""
        self.line_no += part.lines
        for fam, n in (("!empty", part.empty), ("!foreign", part.lines - part.empty)):
            if n:
                self.counts[fam] = self.counts.get(fam, 0) + n


class LogParser:
    """Feed it files (or lines), then call ``finish`` once."""

    def __init__(self) -> None:
        self.state = State()
        self.files: list[str] = []
        self._coll_msgs: list[str] = []
        self._coll_comm: list[int] = []
        self._coll_proc: list[int] = []
        self._segments: list[Segment] = []  # the chunk's rows before ``_coll_msgs``: raw lists and bulk frames
        self._seg_rows = 0
        self._coll_frames: list[Future[tuple[pl.DataFrame, int]]] = []
        self._pool: ThreadPoolExecutor | None = None
        self._seq_base = 0  # line numbers across files, so "most recently touched" spans files

    def parse_file(self, path: str | Path) -> None:
        name = str(path)
        try:
            file = Path(path)
            if is_paste(file):
                with open_text(file) as f:
                    self.state.stats.pasted_files.append(name)
                    self._parse_paste(f, name)
            elif not self._parse_utf8(file, name):
                with open_text(file) as f:
                    self.parse_lines(f, name)
        except (OSError, EOFError, ValueError) as err:  # unreadable or corrupt gzip
            self.state.stats.skipped_files.append(f"{name}: {err}")

    def _parse_utf8(self, path: Path, name: str) -> bool:
        """A plain UTF-8 file, read through the byte-level prefilter (``scan``); False for the others
        (gzip, UTF-16, files that cannot be mapped), which go line by line."""
        with _utf8_pieces(path) as parts:
            if parts is None:
                return False
            ctx = self._begin(name)
            self._feed_parts(parts, ctx, lambda part: bulk.prepare([part])[0])
        self._end(ctx)
        return True

    def _feed_parts(self, parts: Iterable[str | Skipped], ctx: _FileRead,
                    dense_piece: Callable[[str], bulk.Piece | None]) -> None:
        """A file's pieces in order: skipped stretches counted, dense pieces read in bulk (``dense_piece`` gives
        each one prepared), the others by the line loop."""
        for part in parts:
            if isinstance(part, Skipped):
                ctx.skip(part)
            elif len(part) >= bulk.DENSE_PIECE_CHARS:
                self._feed_dense(dense_piece(part), part, ctx)
            else:
                self._feed(io.StringIO(part, newline=None), ctx)

    def parse_files(self, paths: Iterable[str | Path]) -> None:
        """``parse_file`` of each path, in order. Small plain UTF-8 files are read ahead, up to ``BATCH_BYTES``
        of them, so that their dense pieces are split and keyed by one polars pass (``bulk.prepare``) in a
        worker thread while this one reads the batch before."""
        pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="commprof-nccl-prepare")
        try:
            ahead: deque[tuple[list[tuple[str, list[str | Skipped]]], Future[list[bulk.Piece | None]] | None] | _Other]
            ahead = deque()
            for item in _batches(paths):
                if isinstance(item, _Other):
                    ahead.append(item)
                else:
                    files, dense = item
                    ahead.append((files, pool.submit(bulk.prepare, dense) if dense else None))
                while len(ahead) > 1:
                    self._parse_item(ahead.popleft())
            while ahead:
                self._parse_item(ahead.popleft())
        finally:
            pool.shutdown()

    def _parse_item(
        self, item: tuple[list[tuple[str, list[str | Skipped]]], Future[list[bulk.Piece | None]] | None] | _Other
    ) -> None:
        if isinstance(item, _Other):
            self.parse_file(item.path)
            return
        files, prepared = item
        pieces = iter(prepared.result() if prepared is not None else [])
        for name, parts in files:
            ctx = self._begin(name)
            self._feed_parts(parts, ctx, lambda _part: next(pieces))  # prepared in order, one per dense piece
            self._end(ctx)

    def _parse_paste(self, lines: Iterable[str], file: str) -> None:
        """A paste: each message gets NCCL's marker back, without a prefix (one process per file, its host
        unknown); lines that kept theirs are read as they are. Indentation a paste added is dropped."""
        ctx = self._begin(file)
        heads, counts = ctx.heads, ctx.counts
        for line in lines:
            ctx.line_no += 1
            self.state.seq = self._seq_base + ctx.line_no
            text = line.strip()
            if not text:
                fam = "!empty"
            elif any(m in line for m in MARKED):
                fam = self._line(line, file, ctx.line_no, heads, counts)
            else:
                fam = self._line("NCCL INFO " + text, file, ctx.line_no, heads, counts)
                if fam == hd.OTHER and pt.PASTED_OTHER.match(text) is None:
                    fam = self._bare(text, file)  # not NCCL's: a GPU list, the job's own output
            counts[fam] = counts.get(fam, 0) + 1
        for proc in self.state.processes.values():
            if proc.file == file and proc.host is None:
                proc.pasted = True
        self._end(ctx)

    def parse_lines(self, lines: Iterable[str], file: str) -> None:
        ctx = self._begin(file)
        self._feed(lines, ctx)
        self._end(ctx)

    def _begin(self, file: str) -> _FileRead:
        self.state.stats.files += 1
        self.files.append(file)
        return _FileRead(file)

    def _end(self, ctx: _FileRead) -> None:
        stats = self.state.stats
        self._seq_base += ctx.line_no
        stats.lines_total += ctx.line_no
        counts = ctx.counts
        counts["coll"] = counts.get("coll", 0) + ctx.n_coll
        for fam, n in counts.items():
            stats.messages_total += n
            if fam[0] == "!":
                stats.skipped[fam[1:]] += n
            else:
                stats.parsed[fam] += n

    def _feed(self, lines: Iterable[str], ctx: _FileRead) -> None:
        """The hot loop. COLL lines — nearly all lines of a big log — take the inlined path: find
        the marker, look up the cached prefix, pull the comm pointer, remember the message."""
        st = self.state
        file, heads, counts = ctx.file, ctx.heads, ctx.counts
        msgs, comm_idx, proc_idx = self._coll_msgs, self._coll_comm, self._coll_proc
        base = self._seq_base
        line_no = ctx.line_no
        n_coll = 0
        room = COLL_CHUNK_ROWS - self._seg_rows
        for line in lines:
            line_no += 1
            k = line.find("NCCL INFO ")
            if k >= 0 and "opCount " in line and line.count("NCCL ", k + 10) == 0:
                h = heads.get(line[:k])
                i = line.rfind(" comm ")
                if h is not None and i > k:
                    j = line.find(" ", i + 6)
                    ptr = line[i + 6 : j] if j > 0 else line[i + 6 :].rstrip()
                    proc, tid = h.process, h.tid
                    rec = proc.comm_by_ptr.get(ptr) or st.by_ptr(proc, ptr)
                    if rec is not None:
                        rec.touch = base + line_no
                        rec.coll_touched = True
                        proc.current = rec
                        proc.current_by_tid[tid] = rec
                        comm_idx.append(rec.index)
                    else:
                        comm_idx.append(-1)
                    msg = line[k + 10 :]
                    proc.last_coll_by_tid[tid] = msg
                    msgs.append(msg)
                    proc_idx.append(proc.index)
                    n_coll += 1
                    if len(msgs) >= room:
                        self._flush_colls()
                        msgs, comm_idx, proc_idx = self._coll_msgs, self._coll_comm, self._coll_proc
                        room = COLL_CHUNK_ROWS
                    continue
            st.seq = base + line_no
            fam = self._line(line, file, line_no, heads, counts)
            counts[fam] = counts.get(fam, 0) + 1
            msgs, comm_idx, proc_idx = self._coll_msgs, self._coll_comm, self._coll_proc  # ``_coll`` may flush
            room = COLL_CHUNK_ROWS - self._seg_rows
        ctx.line_no = line_no
        ctx.n_coll += n_coll

    def _line(
        self,
        line: str,
        file: str,
        line_no: int,
        heads: dict[str, Head],
        counts: dict[str, int],
        whole: bool = True,
    ) -> str:
        k = line.find("NCCL INFO ")
        if k >= 0:
            level, msg = "INFO", line[k + 10 :]
        else:
            k = line.find("NCCL WARN ")
            if k >= 0:
                level, msg = "WARN", line[k + 10 :]
            else:
                k = line.find("NCCL TRACE ")
                if k < 0:
                    return self._bare(line, file)
                level, msg = "TRACE", line[k + 11 :]
        if whole and "NCCL " in msg and pt.MESSAGE_START.search(msg) is not None:
            return self._interleaved(line, file, line_no, heads, counts)
        head = line[:k]
        h = heads.get(head)
        if h is None:
            h = self.state.head(head, file)
            if len(heads) < HEAD_CACHE_MAX:
                heads[head] = h
        return self._dispatch(h, level, msg.rstrip(), file, line_no)

    def _interleaved(self, line: str, file: str, line_no: int, heads: dict[str, Head], counts: dict[str, int]) -> str:
        """A line holding several messages: a cut one, then other processes' output glued on.
        Each message is parsed on its own; the cut one usually ends up ``malformed``."""
        self.state.stats.interleaved_lines += 1
        starts = [self._known_host_start(line, m.start()) for m in pt.MESSAGE_START.finditer(line)]
        bounds = [0, *sorted({s for s in starts[1:] if s > 0}), len(line)]
        fam = "!empty"
        for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)):
            if i:
                counts[fam] = counts.get(fam, 0) + 1
            fam = self._line(line[a:b], file, line_no, heads, counts, whole=False)
        return fam

    def _known_host_start(self, line: str, start: int) -> int:
        """A cut line runs into the next prefix ("...via P2node01:12:34 [1] NCCL INFO"): move the
        split to where a host we already know begins."""
        m = pt.NCCL_PREFIX.match(line, start)
        if m is None or m.group(1) in self.state.known_hosts:
            return start
        glued = m.group(1)
        for host in self.state.known_hosts:
            if glued.endswith(host):
                return start + len(glued) - len(host)
        return start

    def _bare(self, line: str, file: str) -> str:
        if not line.strip():
            return "!empty"
        if "NCCL version" in line:
            return hd.version(self.state, None, line, file)
        if "NVIDIA" in line or "GeForce" in line or "Tesla" in line:
            return hd.gpu_model(self.state, line, file)
        return "!foreign"

    def _dispatch(self, h: Head, level: str, msg: str, file: str, line_no: int) -> str:
        st = self.state
        if level == "WARN":
            st.warns.append(Warn(h.process.host, h.process.pid, file, line_no, msg))
            return "warn"
        if "opCount " in msg:
            return self._coll(h, msg)
        if " via " in msg:
            if msg.startswith("CollNet"):
                return hd.collnet(st, h, msg, file, line_no)
            return hd.connection(st, h, msg, file, line_no)
        if "Bytes -> Algo" in msg:
            return hd.tuning(st, h, msg)
        if msg.startswith("Channel "):
            return hd.ring_order(st, h, msg)
        if msg.startswith("Ring "):
            return "ring" if pt.RING_NEIGHBORS.match(msg) else hd.MALFORMED
        if msg.startswith("Tree"):
            return "tree" if msg.startswith("Trees") or pt.TREE.match(msg) else hd.MALFORMED
        if "- Init " in msg or "COMPLETE" in msg or " cudaDev " in msg:
            return hd.init(st, h, msg, file, line_no)
        if " nNodes " in msg:
            return hd.comm_nodes(st, h, msg, file, line_no)
        return self._dispatch_rare(h, msg)

    def _dispatch_rare(self, h: Head, msg: str) -> str:
        st = self.state
        if "NCCL version" in msg or "NCCL git version" in msg:
            return hd.version(st, h, msg, h.process.file)
        if msg.startswith("NET/") or "GPU Direct RDMA" in msg:
            return hd.net_line(st, h, msg)
        if msg.startswith("Using network"):
            return hd.using_network(st, h, msg)
        if "Found network interface" in msg:
            return hd.socket_speed(st, h, msg)
        if "NVLS" in msg:
            return hd.nvls(st, h, msg)
        if "coll channels" in msg:
            return hd.channel_counts(st, h, msg)
        if msg.startswith("Pattern "):
            return hd.pattern(st, h, msg)
        if msg.startswith("Init timings"):
            return hd.init_timings(st, h, msg)
        if msg.startswith("Connected "):
            return hd.connected(st, h, msg)
        if msg.lstrip().startswith(("+ ", "=== System", "CPU/", "GPU/", "NIC/", "NVS/", "=====")):
            return hd.topology(st, h, msg.lstrip())
        return hd.OTHER

    def _coll(self, h: Head, msg: str) -> str:
        i = msg.rfind(" comm ")
        colon = msg.find(":")
        if i < 0 or colon <= 0:
            return hd.MALFORMED
        j = msg.find(" ", i + 6)
        ptr = msg[i + 6 :] if j < 0 else msg[i + 6 : j]
        proc, tid = h.process, h.tid
        rec = proc.comm_by_ptr.get(ptr) or self.state.by_ptr(proc, ptr)
        if rec is not None:
            self.state.touch(rec, proc, tid)
            rec.coll_touched = True
        proc.last_coll_by_tid[tid] = msg
        self._coll_msgs.append(msg)
        self._coll_comm.append(rec.index if rec is not None else -1)
        self._coll_proc.append(proc.index)
        if len(self._coll_msgs) >= COLL_CHUNK_ROWS - self._seg_rows:
            self._flush_colls()
        return "coll"

    def _flush_colls(self) -> None:
        """Hand a chunk of COLL messages to a worker thread: polars releases the GIL, so the
        vectorised parse of one chunk overlaps the Python loop reading the next."""
        self._close_segment()
        if not self._segments:
            return
        if self._pool is None:
            self._pool = ThreadPoolExecutor(max_workers=1, thread_name_prefix="commprof-nccl-coll")
        self._coll_frames.append(self._pool.submit(chunk_frame, self._segments))
        self._segments, self._seg_rows = [], 0

    def _close_segment(self) -> None:
        if self._coll_msgs:
            self._segments.append((self._coll_msgs, self._coll_comm, self._coll_proc))
            self._seg_rows += len(self._coll_msgs)
            self._coll_msgs, self._coll_comm, self._coll_proc = [], [], []

    def _add_colls(self, frame: bulk.BulkRows) -> None:
        """Parsed COLL rows of a bulk run, after the messages gathered so far; chunks cut where the loop cuts them."""
        self._close_segment()
        while frame.height:
            room = COLL_CHUNK_ROWS - self._seg_rows
            self._segments.append(frame.slice(0, room))
            self._seg_rows += min(room, frame.height)
            frame = frame.slice(room, frame.height)
            if self._seg_rows >= COLL_CHUNK_ROWS:
                self._flush_colls()

    # -- pieces dense in COLL lines (see ``bulk``) ---------------------------------------------------------

    def _feed_dense(self, piece: bulk.Piece | None, part: str, ctx: _FileRead) -> None:
        if piece is None:
            self._feed(io.StringIO(part, newline=None), ctx)
            return
        batch, start, n = piece.batch, piece.start, piece.end - piece.start
        row_key = batch.key[start : piece.end]
        fast = batch.kinds[row_key] != bulk.EVENT
        # the first COLL / TUNING line of a prefix this file has not cached goes through the loop (it makes the Head)
        first: dict[str, int] = {}
        for u in bulk.distinct(row_key).tolist():
            key = batch.keys[u]
            if key.kind != bulk.EVENT and key.prefix not in ctx.heads:
                at = int(batch.first[u]) - start
                if at < first.get(key.prefix, n):
                    first[key.prefix] = at
        if first:
            fast[list(first.values())] = False
        edges = np.flatnonzero(np.diff(np.concatenate(([0], fast.view(np.int8), [0]))))
        lines = batch.lines
        pos = 0
        for a, b in zip(edges[::2].tolist(), edges[1::2].tolist(), strict=True):
            if b - a < bulk.MIN_RUN:
                continue
            if a > pos:
                self._feed(lines.slice(start + pos, a - pos).to_list(), ctx)
            if not self._bulk(batch, start + a, start + b, ctx):
                self._feed(lines.slice(start + a, b - a).to_list(), ctx)
            pos = b
        if pos < n:
            self._feed(lines.slice(start + pos, n - pos).to_list(), ctx)

    def _bulk(self, piece: bulk.Batch, a: int, b: int, ctx: _FileRead) -> bool:
        """Lines ``a:b`` of the piece, all COLL lines of the loop's fast path or TUNING lines, in one go;
        False (nothing done) where a prefix is not cached (the cache is full), for the loop to read them."""
        st, keys = self.state, piece.keys
        row_key = piece.key[a:b]
        # per distinct key of the run (not of the batch: a run is a few lines where timestamps make most keys new)
        run_keys = bulk.distinct(row_key)
        nk = len(run_keys)
        local = np.searchsorted(run_keys, row_key)
        rec_k = np.full(nk, -1, dtype=np.int64)
        proc_k = np.zeros(nk, dtype=np.int64)
        thr_k = np.zeros(nk, dtype=np.int64)
        kind_k = np.zeros(nk, dtype=np.int8)
        threads: dict[tuple[int, int], int] = {}
        thread_of: list[tuple[Process, int]] = []
        procs: dict[int, Process] = {}
        for u, k in enumerate(run_keys.tolist()):
            key = keys[k]
            h = ctx.heads.get(key.prefix)
            if h is None:
                return False
            proc, tid = h.process, h.tid
            t = threads.get((proc.index, tid))
            if t is None:
                t = threads[proc.index, tid] = len(thread_of)
                thread_of.append((proc, tid))
            procs[proc.index] = proc
            thr_k[u], proc_k[u], kind_k[u] = t, proc.index, key.kind
            if key.kind == bulk.COLL:
                rec = proc.comm_by_ptr.get(key.ptr) or st.by_ptr(proc, key.ptr)
                if rec is not None:
                    rec_k[u] = rec.index
        kind, rec_row, thr, prc = kind_k[local], rec_k[local], thr_k[local], proc_k[local]
        colls = np.flatnonzero(kind == bulk.COLL)
        named = colls[rec_row[colls] >= 0]  # COLL lines whose communicator is known
        tunings = np.flatnonzero(kind == bulk.TUNING)
        seq0 = self._seq_base + ctx.line_no + 1  # line a's place across files
        comms = st.comms
        if len(tunings):  # they read the state as it stood at their line: before this run's updates
            self._bulk_tuning(piece, row_key, tunings, colls, named, rec_row, thr, prc, thread_of)
            ctx.counts["tuning"] = ctx.counts.get("tuning", 0) + len(tunings)
            st.seq = seq0 + int(tunings[-1])
        for r, j in _last(rec_row[named], named):
            rec = comms[r]
            rec.touch = seq0 + j
            rec.coll_touched = True
        for p, j in _last(prc[named], named):
            procs[p].current = comms[rec_row[j]]
        for t, j in _last(thr[named], named):
            proc, tid = thread_of[t]
            proc.current_by_tid[tid] = comms[rec_row[j]]
        for t, j in _last(thr[colls], colls):
            proc, tid = thread_of[t]
            line: str = lines_item(piece.lines, a + j)
            proc.last_coll_by_tid[tid] = line[len(keys[row_key[j]].prefix) + 10 :]
        if len(colls):
            self._add_colls(bulk.BulkRows(piece, a + colls, rec_row[colls], prc[colls]))
            ctx.n_coll += len(colls)
        ctx.line_no += b - a
        return True

    def _bulk_tuning(
        self,
        piece: bulk.Batch,
        row_key: np.ndarray,
        tunings: np.ndarray,
        colls: np.ndarray,
        named: np.ndarray,
        rec_row: np.ndarray,
        thr: np.ndarray,
        prc: np.ndarray,
        thread_of: list[tuple[Process, int]],
    ) -> None:
        """TUNING lines of a bulk run, as ``handlers.tuning`` reads each: the communicator its thread (else
        its process) touched last, and the op of its thread's last COLL line when it names none."""
        keys, comms = piece.keys, self.state.comms
        t_thr, t_key = thr[tunings], row_key[tunings]
        # the state the run found, per thread: its communicator (-1: none, or no tid), its process's, its COLL op
        at_thr = np.array([_index(proc.current_by_tid.get(tid)) if tid >= 0 else -1 for proc, tid in thread_of] + [-1])
        at_proc = np.array([_index(proc.current) for proc, _ in thread_of] + [-1])
        has_tid = np.array([tid >= 0 for _, tid in thread_of] + [False])
        j = _last_before(thr, named, tunings)  # the thread's last COLL line of a known communicator in the run
        rec = np.where(has_tid[t_thr], np.where(j >= 0, rec_row[j], at_thr[t_thr]), -1)
        j = _last_before(prc, named, tunings)  # ... the process's
        rec = np.where(rec >= 0, rec, np.where(j >= 0, rec_row[j], at_proc[t_thr]))
        tuning_keys = bulk.distinct(t_key)  # each distinct line once
        named_op = np.array([_names_op(keys[k]) for k in tuning_keys.tolist()], dtype=bool)
        named_op = named_op[np.searchsorted(tuning_keys, t_key)]
        j = _last_before(thr, colls, tunings)  # the thread's last COLL line: the op a TUNING line without one takes
        op_from = np.where(named_op, -1, np.where(j >= 0, row_key[j], -2 - t_thr))
        # each distinct (line, communicator, op source) once: one int64 code each (nonnegative, ascending as the
        # triples are; the parts are below the key, communicator and thread counts)
        span_r, span_o = len(self.state.comms) + 1, len(keys) + len(thread_of) + 2
        codes, inverse = np.unique((t_key * span_r + rec + 1) * span_o + op_from + len(thread_of) + 2,
                                   return_inverse=True)
        args = []
        for code in codes.tolist():
            k, r, o = code // (span_r * span_o), code // span_o % span_r - 1, code % span_o - len(thread_of) - 2
            fields = keys[k].fields
            assert fields is not None
            op = fields[0]
            if o >= 0:
                op = keys[o].op
            elif o <= -2:
                proc, tid = thread_of[-2 - o]
                last = proc.last_coll_by_tid.get(tid, "")
                op = last[: last.find(":")] if ":" in last else None
            args.append((comms[r] if r >= 0 else None, op, *fields[1:]))
        # one record per distinct (line, communicator, op): its lines share it (records are read, never changed)
        records = [Tuning(*a) for a in args]
        self.state.tuning.extend([records[c] for c in inverse.reshape(-1).tolist()])

    def _gather_colls(self) -> pl.DataFrame:
        frames = []
        try:
            for future in self._coll_frames:
                frame, bad = future.result()
                frames.append(frame)
                if bad:
                    self.state.stats.parsed["coll"] -= bad
                    self.state.stats.skipped["malformed"] += bad
        finally:
            if self._pool is not None:
                self._pool.shutdown()
                self._pool = None
        self._coll_frames = []
        return pl.concat(frames) if frames else pl.DataFrame(schema=COLL_SCHEMA)

    def finish(self) -> NcclLogs:
        self._flush_colls()
        colls = self._gather_colls()
        st = self.state
        st.settle_links()
        infer_comms(st)
        st.stats.unattributed_links = sum(1 for link in st.links if link.comm is None)
        st.resolve_comm_ids()
        st.versions()
        return NcclLogs(
            processes=list(st.processes.values()),
            comms=st.comms,
            links=st.links,
            tuning=st.tuning,
            warns=st.warns,
            colls=colls,
            stats=st.stats,
            files=self.files,
            gpu_models=st.gpu_models,
        )


@dataclass(frozen=True)
class _Other:
    """A file ``parse_file`` reads (not read ahead)."""

    path: str | Path


def _batches(
    paths: Iterable[str | Path],
) -> Iterator[tuple[list[tuple[str, list[str | Skipped]]], list[str]] | _Other]:
    """The paths in order: runs of small plain UTF-8 files read ahead (their pieces, and the dense ones among
    them), up to ``BATCH_BYTES`` of dense text a run; any other file as its path, for ``parse_file``."""
    files: list[tuple[str, list[str | Skipped]]] = []
    dense: list[str] = []
    size = 0
    for path in paths:
        parts = _read_ahead(Path(path))
        if parts is None:
            if files:
                yield files, dense
                files, dense, size = [], [], 0
            yield _Other(path)
            continue
        files.append((str(path), parts))
        for p in parts:
            if isinstance(p, str) and len(p) >= bulk.DENSE_PIECE_CHARS:
                dense.append(p)
                size += len(p)
        if size >= BATCH_BYTES:
            yield files, dense
            files, dense, size = [], [], 0
    if files:
        yield files, dense


def _read_ahead(path: Path) -> list[str | Skipped] | None:
    """The pieces of a small plain UTF-8 file (what ``_parse_utf8`` reads); None for any other file, or one
    that fails to read: ``parse_file`` reads those (and says why it could not)."""
    try:
        if path.stat().st_size > READ_AHEAD_BYTES or is_paste(path):
            return None
        with _utf8_pieces(path) as parts:
            return None if parts is None else list(parts)
    except (OSError, EOFError, ValueError):
        return None


@contextmanager
def _utf8_pieces(path: Path) -> Iterator[Iterable[str | Skipped] | None]:
    """The pieces ``scan.read_candidates`` cuts a plain UTF-8 file into, read while the file is open; None for
    gzip, another encoding or a file that cannot be mapped (they go line by line). Open errors propagate."""
    if path.suffix == ".gz":
        yield None
        return
    with open(path, "rb") as raw:
        if text_encoding(raw.read(2)) != "utf-8":
            yield None
            return
        try:
            view = mmap.mmap(raw.fileno(), 0, access=mmap.ACCESS_READ)
        except ValueError:  # empty
            yield ()
            return
        except OSError:
            yield None
            return
        with view:
            yield read_candidates(view, raw.fileno())


def lines_item(lines: pl.Series, i: int) -> str:
    value: str = lines[i]
    return value


def _names_op(key: bulk.Key) -> bool:
    return key.fields is not None and key.fields[0] is not None


def _index(rec: CommRank | None) -> int:
    return rec.index if rec is not None else -1


def _last(values: np.ndarray, at: np.ndarray) -> list[tuple[int, int]]:
    """Each distinct value and the last of the positions ``at`` where it stands."""
    if not len(values):
        return []
    if values.max() > 4 * len(values) + 1024:  # few values among many (communicators of a big run): no table of all
        flipped = values[::-1]
        uniq, first = np.unique(flipped, return_index=True)
        return list(zip(uniq.tolist(), at[len(values) - 1 - first].tolist(), strict=True))
    last = np.full(int(values.max()) + 1, -1, dtype=np.int64)
    np.maximum.at(last, values, np.arange(len(values)))
    uniq = np.flatnonzero(last >= 0)
    return list(zip(uniq.tolist(), at[last[uniq]].tolist(), strict=True))


def _last_before(groups: np.ndarray, at: np.ndarray, targets: np.ndarray) -> np.ndarray:
    """For each target row, the last of the rows ``at`` (ascending) before it in the same group; -1 if none."""
    out = np.full(len(targets), -1, dtype=np.int64)
    if not len(at):
        return out
    tg = groups[targets]
    for g in np.unique(tg).tolist():
        pos = at[groups[at] == g]
        if not len(pos):
            continue
        sel = np.flatnonzero(tg == g)
        j = np.searchsorted(pos, targets[sel]) - 1
        out[sel] = np.where(j >= 0, pos[np.maximum(j, 0)], -1)
    return out


def parse_nccl_logs(paths: Iterable[str | Path]) -> NcclLogs:
    """Parse NCCL log files into records. Unreadable files are listed in ``stats.skipped_files``;
    lines that cannot be parsed are counted by kind in ``stats.skipped``; nothing raises."""
    parser = LogParser()
    parser.parse_files(paths)
    return parser.finish()


def parse_nccl_text(text: str, file: str = "<text>") -> NcclLogs:
    """Parse log text held in memory (tests, and logs that arrive inside other files)."""
    parser = LogParser()
    parser.parse_lines(text.splitlines(), file)
    return parser.finish()
