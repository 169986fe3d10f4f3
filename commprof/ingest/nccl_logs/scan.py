"""Find the lines of a log that can matter to the NCCL parser without decoding the rest.

NCCL's lines often sit inside a job's stdout: gigabytes of application output with a few thousand NCCL
lines at its ends. Decoding and looping over every line in Python caps the parse at a few tens of MB/s,
so a UTF-8 file is read in pieces and searched in bytes, at memchr speed, for the only markers the parser
acts on outside blank lines: ``NCCL `` (every message, and the bare version line) and the GPU names
(``NVIDIA``, ``GeForce``, ``Tesla``) it reads from nccl-tests' and nvidia-smi's lines. Lines without a
marker are counted, not decoded: the parser would count each as ``empty`` (whitespace only) or
``foreign``, so the counts, the line numbers and everything built from them stay what a line-by-line
pass gives. Pieces dense in markers (a log that is all NCCL) are decoded whole and read as before.

Line breaks are the universal newlines text mode uses (``\\n``, ``\\r\\n``, a lone ``\\r``); bytes that are
not UTF-8 read as U+FFFD, as ``errors="replace"`` does: neither can hide or fake an ASCII marker.
"""

from __future__ import annotations

import gzip
import mmap
import os
import re
from collections.abc import Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import polars as pl

from commprof.ingest.nccl_logs import patterns as pt

PIECE_BYTES = 4 << 20
# A piece with a marker every DENSE_BYTES or closer is decoded whole: one line at a time costs more there.
DENSE_BYTES = 2048
NUMPY_BYTES = 1 << 16  # regions this long count their lines with numpy (imported only then)
SAMPLE_BYTES = 1 << 16  # a piece whose first 64 KB are dense in markers is taken as dense without a full search
MARKERS = (b"NCCL ", b"NVIDIA", b"GeForce", b"Tesla")
MARKER_TEXT = [m.decode() for m in MARKERS]


# What ``str.strip()`` removes (``str.isspace``) but line breaks; tests check it against every code point.
WHITESPACE = "\t\x0b\x0c\x1c\x1d\x1e\x1f \x85\xa0\u1680" + "".join(map(chr, range(0x2000, 0x200B))) + \
    "\u2028\u2029\u202f\u205f\u3000"
_ASCII_WS = rb"[\t\x0b\x0c\x1c-\x1f ]"
_WS = b"(?:" + b"|".join(re.escape(c.encode()) for c in WHITESPACE) + b")"
_MB_LEADS = (b"\xc2", b"\xe1", b"\xe2", b"\xe3")  # the first bytes of the non-ASCII whitespace above
# A blank line after a line break (\n, or a lone \r: ``\r(?!\n)`` keeps a \r\n pair one break): whitespace
# up to the next break. The literal first byte lets ``re`` jump from break to break; regions without a
# non-ASCII whitespace lead byte take the single-byte class, cheaper per line.
_BLANK_ASCII = (re.compile(rb"\n" + _ASCII_WS + rb"*(?=[\r\n])"),
                re.compile(rb"\r(?!\n)" + _ASCII_WS + rb"*(?=[\r\n])"))
_BLANK_ANY = (re.compile(rb"\n" + _WS + rb"*(?=[\r\n])"), re.compile(rb"\r(?!\n)" + _WS + rb"*(?=[\r\n])"))
_BLANK_LINE = re.compile(_WS + rb"*(?:[\r\n]|\Z)")
_BLANK_TO_BREAK = re.compile(_WS + rb"*[\r\n]")


@dataclass(frozen=True)
class Skipped:
    """Lines without a marker: how many, and how many of them are whitespace only."""

    lines: int
    empty: int


def read_candidates(view: mmap.mmap, fd: int | None = None) -> Iterator[str | Skipped]:
    """The file's text where it may hold NCCL lines (whole lines, decoded, line breaks as they were),
    and counts of the lines between, in file order. In a file of several pieces, a worker thread finds
    the markers of the next piece (polars releases the GIL) while this one counts the lines of the last.
    ``fd``: the mapped file, read with ``pread`` (a copy from the page cache, ~4x cheaper than faulting the
    mapping's pages in); the mapping only finds where pieces end."""
    pieces = _pieces(view, fd)
    first = next(pieces, None)
    if first is None:
        return
    second = next(pieces, None)
    if second is None:
        yield from _split(first, _hits(first))
        return
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="commprof-nccl-scan") as pool:
        cur = (first, pool.submit(_hits, first))
        nxt = (second, pool.submit(_hits, second))
        for b in pieces:
            yield from _split(cur[0], cur[1].result())
            cur, nxt = nxt, (b, pool.submit(_hits, b))
        yield from _split(cur[0], cur[1].result())
        yield from _split(nxt[0], nxt[1].result())


def _pieces(view: mmap.mmap, fd: int | None) -> Iterator[bytes]:
    start, size = 0, len(view)
    while start < size:
        end = _cut(view, start, size)
        piece = os.pread(fd, end - start, start) if fd is not None else b""
        yield piece if len(piece) == end - start else view[start:end]
        start = end


def _cut(view: mmap.mmap, start: int, size: int) -> int:
    """The end of the piece that starts at ``start``: after its last \\n, so that no line (nor a \\r\\n pair)
    is split; a piece without \\n ends after a \\r that is not its last byte, else grows."""
    width = PIECE_BYTES
    while start + width < size:
        end = start + width
        nl = view.rfind(b"\n", start, end)
        if nl >= 0:
            return nl + 1
        cr = view.rfind(b"\r", start, end - 1)
        if cr >= 0:
            return cr + 1
        width *= 2
    return size


def _split(b: bytes, hits: list[int] | None) -> Iterator[str | Skipped]:
    if hits is not None and not hits:
        yield _skipped(b, 0, len(b))
        return
    if hits is None or len(b) // len(hits) < DENSE_BYTES:
        yield b.decode("utf-8", "replace")
        return
    pos = 0
    for at in hits:
        if at < pos:
            continue  # on a line already handed over
        start = max(b.rfind(b"\n", pos, at), b.rfind(b"\r", pos, at), pos - 1) + 1
        end = _line_end(b, at)
        if start > pos:
            yield _skipped(b, pos, start)
        yield b[start:end].decode("utf-8", "replace")
        pos = end
    if pos < len(b):
        yield _skipped(b, pos, len(b))


def _hits(b: bytes) -> list[int] | None:
    """Where the markers start in ``b``, in order (at least one per line that holds any): one pass of
    polars' Aho-Corasick over the piece (several times faster than a ``bytes.count`` per marker) when the
    piece is UTF-8, else a ``bytes.find`` loop per marker. None when the piece's head is dense in ``NCCL ``
    (an all-NCCL log): it is decoded whole, and listing its hundred thousand markers would cost more than
    the count it replaces."""
    head = b.count(b"NCCL ", 0, SAMPLE_BYTES)
    if head and min(len(b), SAMPLE_BYTES) // head < DENSE_BYTES:
        return None
    return _markers_at(b)


def _markers_at(b: bytes) -> list[int]:
    if b and len(b) < 1 << 32:
        try:
            text = pl.Series([b], dtype=pl.Binary).cast(pl.String)
        except Exception:  # not UTF-8 (ComputeError), or anything else polars refuses: the bytes path below
            pass
        else:
            found: list[int] = text.str.find_many(MARKER_TEXT).item().to_list()
            return found
    out = []
    for m in MARKERS:
        at = b.find(m)
        while at >= 0:
            out.append(at)
            at = b.find(m, at + len(m))
    out.sort()
    return out


def _line_end(b: bytes, at: int) -> int:
    """Just after the break of the line holding ``at`` (\\n, \\r\\n or \\r), or the end of ``b``."""
    nl = b.find(b"\n", at)
    cr = b.find(b"\r", at, nl if nl >= 0 else len(b))
    if cr >= 0:
        return cr + 2 if cr + 1 == nl else cr + 1
    return nl + 1 if nl >= 0 else len(b)


def _skipped(b: bytes, a: int, e: int) -> Skipped:
    """Count the lines of ``b[a:e]`` (``a`` starts a line, ``e`` ends one or the file) and the blank ones."""
    lines, blank = _count_numpy(b, a, e) if e - a >= NUMPY_BYTES else _count_re(b, a, e)
    if e > a and b[e - 1] not in (10, 13):
        lines += 1  # the file's last line, without a break: blank if whitespace runs to the end
        last = max(b.rfind(b"\n", a, e), b.rfind(b"\r", a, e))
        if last >= 0 and _BLANK_LINE.match(b, last + 1, e) is not None:
            blank += 1
    if e > a and _BLANK_LINE.match(b, a, e) is not None:
        blank += 1  # the first line (one without a break before it)
    return Skipped(lines, blank)


def _count_re(b: bytes, a: int, e: int) -> tuple[int, int]:
    """Breaks, and blank lines after a break: ``re`` jumps from break to break on the literal first byte;
    regions without a lead byte of non-ASCII whitespace take the single-byte class, cheaper per line."""
    lone_cr = b.count(b"\r", a, e) - b.count(b"\r\n", a, e) if b.find(b"\r", a, e) >= 0 else 0
    wide = any(b.find(lead, a, e) >= 0 for lead in _MB_LEADS)
    after_nl, after_cr = _BLANK_ANY if wide else _BLANK_ASCII
    blank = len(after_nl.findall(b, a, e)) + (len(after_cr.findall(b, a, e)) if lone_cr else 0)
    return b.count(b"\n", a, e) + lone_cr, blank


# byte -> what a line starting with it may be: 0 not blank, 1 blank (a break), 2 maybe (ASCII whitespace:
# look at the next byte), 3 maybe (a lead byte of non-ASCII whitespace: ask ``_BLANK_LINE``)
_OTHER, _BREAK, _SPACE, _WIDE = range(4)
_LINE_START: Any = None
LOOK_AHEAD = 16  # bytes of leading whitespace followed byte by byte before ``_BLANK_LINE`` takes over


def _count_numpy(b: bytes, a: int, e: int) -> tuple[int, int]:
    """Breaks and the blank lines after them, vectorised: each line's first bytes are classified together,
    a step per byte of leading whitespace; the few lines left undecided go to ``_BLANK_LINE``."""
    import numpy as np

    global _LINE_START
    if _LINE_START is None:
        table = np.zeros(256, dtype=np.uint8)
        table[list(b"\t\x0b\x0c\x1c\x1d\x1e\x1f ")] = _SPACE
        table[[c[0] for c in _MB_LEADS]] = _WIDE
        table[[10, 13]] = _BREAK
        _LINE_START = table
    n = e - a
    arr = np.frombuffer(b, dtype=np.uint8, count=n, offset=a)
    if b.find(b"\r", a, e) >= 0:  # one pass finds both kinds of break (and the few other bytes below 14)
        brk = np.flatnonzero(arr <= 13)
        kind = arr[brk]
        starts = brk[kind == 10] + 1
        cr = brk[kind == 13]
        after = cr + 1
        lone = cr[(after >= n) | (arr[np.minimum(after, n - 1)] != 10)]
        starts = np.concatenate((starts, lone + 1))
    else:
        starts = np.flatnonzero(arr == 10) + 1
    lines = len(starts)
    undecided = starts[starts < n]  # a break ending the region starts no line in it
    blank, slow = 0, []
    for _ in range(LOOK_AHEAD):
        if not len(undecided):
            break
        kind = _LINE_START[arr[undecided]]
        blank += int(np.count_nonzero(kind == _BREAK))
        slow.append(undecided[kind == _WIDE])
        undecided = undecided[kind == _SPACE] + 1
        undecided = undecided[undecided < n]  # whitespace up to the region's end: the last line, counted apart
    for p in np.concatenate((*slow, undecided)).tolist():
        blank += _BLANK_TO_BREAK.match(b, a + p, e) is not None
    return lines, blank


@contextmanager
def open_text(path: Path) -> Iterator[TextIO]:
    if path.suffix == ".gz":
        with gzip.open(path, "rb") as raw:
            encoding = text_encoding(raw.peek(2)[:2] if hasattr(raw, "peek") else b"")
        with gzip.open(path, "rt", encoding=encoding, errors="replace") as gz:
            yield gz
    else:
        with open(path, "rb") as raw:
            encoding = text_encoding(raw.read(2))
        with open(path, encoding=encoding, errors="replace") as f:
            yield f


PASTE_SNIFF_LINES = 400  # NCCL lines (with or without the marker) a paste is judged on
PASTE_SNIFF_CHARS = 1 << 20  # and at most this much of the file's head
MARKED = ("NCCL INFO ", "NCCL WARN ", "NCCL TRACE ")


def is_paste(path: Path) -> bool:
    """At the file's head, at least three lines read as NCCL's messages without their ``host:pid:tid [dev] NCCL
    INFO`` prefix, and no more lines carry NCCL's marker: a paste may keep a few whole lines, or its WARN lines'
    ``file.cc:123 NCCL WARN`` (a prefix stripped up to the host only), and still be one."""
    if path.suffix != ".gz":  # a plain UTF-8 file shorter than the sniff: one read, its lines split at once
        with open(path, "rb") as raw:
            head = raw.read(min(PASTE_SNIFF_CHARS, os.fstat(raw.fileno()).st_size + 1))  # no 1 MB buffer per file
        if len(head) < PASTE_SNIFF_CHARS and text_encoding(head[:2]) == "utf-8":
            # as ``open`` reads it: universal newlines (a lone \r ends a line; \r\n is one break)
            text = head.decode("utf-8", "replace").replace("\r\n", "\n").replace("\r", "\n")
            return _paste_lines(_text_lines(text))
    with open_text(path) as f:
        return _paste_lines(f)


def _text_lines(text: str) -> Iterator[str]:
    """``text`` line by line as a text-mode file yields it: each line with its "\n", the last one as it ends."""
    start, n = 0, len(text)
    while start < n:
        end = text.find("\n", start)
        if end < 0:
            yield text[start:]
            return
        yield text[start : end + 1]
        start = end + 1


def _paste_lines(lines: Iterable[str]) -> bool:
    bare = marked = chars = 0
    for line in lines:
        chars += len(line)
        if "NCCL " in line and ("NCCL INFO " in line or "NCCL WARN " in line or "NCCL TRACE " in line):  # MARKED
            marked += 1
        elif pt.BARE_MESSAGE.match(line.lstrip()) is not None:
            bare += 1
        if bare + marked >= PASTE_SNIFF_LINES or chars >= PASTE_SNIFF_CHARS or marked > PASTE_SNIFF_LINES // 2:
            break
    return bare >= 3 and bare >= marked


def text_encoding(head: bytes) -> str:
    """UTF-16 when the text says so (a BOM, or a NUL beside the first character), else UTF-8."""
    if head[:2] in (b"\xff\xfe", b"\xfe\xff"):
        return "utf-16"
    if len(head) == 2 and b"\0" in head:
        return "utf-16-be" if head[:1] == b"\0" else "utf-16-le"
    return "utf-8"
