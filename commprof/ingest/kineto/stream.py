"""Stream a Kineto trace: decompress in a background thread, decode ``traceEvents`` a chunk at a time.

Holding a whole 500 MB trace as text *and* as decoded events does not fit next to thousands of ranks,
so the text is decompressed in blocks (zlib and file reads release the GIL, so this overlaps with
decoding) and the events array is cut at event boundaries into pieces that msgspec decodes one at a
time; the caller keeps only what it needs from each piece. A file cut short (a job killed while
writing) yields every complete event before the cut; the caller is told how many bytes were lost.
"""

from __future__ import annotations

import queue
import re
import threading
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import msgspec

from commprof.errors import InputError, NotATraceError, TruncatedTraceError
from commprof.ingest.kineto.decode import TYPED_EVENT, Event, StreamResult, Trace, merge_headers
from commprof.ingest.kineto.salvage import Damage, decode_each, last_boundary, scan, skip_ws

READ_BLOCK = 1 << 20
TEXT_BLOCK = 256 << 10  # decompressed bytes handed over at a time
PIECE_BYTES = 256 << 10  # decode once this much text is pending (a piece's events cost ~3x its text)


def _fast_zlib() -> Any:
    """zlib-ng (PyPI ``zlib-ng``), an optional accelerator: it inflates these traces 2-3x faster than
    zlib (54 MB of text: 0.097 -> 0.031 CPU s), the same bytes. None without it: the standard zlib then."""
    try:
        from zlib_ng import zlib_ng
    except ImportError:  # pragma: no cover - depends on the install
        return None
    return zlib_ng


_FAST_ZLIB = _fast_zlib()
# float literals arrive as their text: epoch µs do not fit a float64 to the ns (see exact_time)
_events_decoder = msgspec.json.Decoder(list[Event], float_hook=str)
_header_decoder = msgspec.json.Decoder(Trace, float_hook=str)
# The same events as _events_decoder reads, as EventX / EventM with their args decoded (see decode.py); a piece
# this one rejects (an unknown phase, args of an unexpected shape) is read again by _events_decoder, which
# then decides, so what is kept and what is warned about does not depend on which of the two read it.
_typed_decoder = msgspec.json.Decoder(list[TYPED_EVENT], float_hook=str)  # type: ignore[valid-type]


def _blocks(path: Path, shown: str | Path) -> Iterator[bytes]:
    """Decompressed text of the file, block by block. Raises InputError on corrupt gzip; a gzip
    stream cut short ends early and the last item is an EOFError instance, not bytes."""
    with path.open("rb") as fh:
        first = fh.read(READ_BLOCK)
        if not first:
            raise NotATraceError("file is empty", shown)
        if first[:2] != b"\x1f\x8b":
            if path.name.endswith(".gz"):
                raise InputError("not a gzip file (bad magic bytes) although it ends in .gz", shown)
            block = first
            while block:
                yield block
                block = fh.read(READ_BLOCK)
            return
        done = 0  # bytes of text handed over
        if _FAST_ZLIB is not None:
            try:
                for text in _inflate(fh, first, _FAST_ZLIB):
                    done += len(text)
                    yield text
                return
            except (_FAST_ZLIB.error, EOFError):
                # corrupt or cut short: the standard zlib says where and how, in its own words, so that
                # the warnings and errors are the same with or without the accelerator
                fh.seek(0)
                first = fh.read(READ_BLOCK)
        try:
            for text in _inflate(fh, first, zlib):
                if done >= len(text):
                    done -= len(text)
                    continue
                yield text[done:] if done else text
                done = 0
        except zlib.error as err:
            raise InputError(f"corrupt gzip data: {err}", shown) from None


def _inflate(fh: BinaryIO, block: bytes, module: Any) -> Iterator[bytes]:
    """gunzip with ``module`` (zlib's interface) from ``block`` on: concatenated members too; EOFError
    when the stream ends early, the module's ``error`` on corrupt data."""
    inflater = module.decompressobj(wbits=31)
    while block:
        while block:
            yield inflater.decompress(block, TEXT_BLOCK)
            block = inflater.unconsumed_tail
            if inflater.eof and inflater.unused_data:  # concatenated gzip members
                block = inflater.unused_data
                inflater = module.decompressobj(wbits=31)
        block = fh.read(READ_BLOCK)
    if not inflater.eof:
        raise EOFError("gzip stream ends early")


INLINE_BYTES = 64 << 10  # files up to this size (on disk) are inflated without the thread


def _small_file(path: Path) -> bool:
    try:
        return path.stat().st_size <= INLINE_BYTES
    except OSError:  # _blocks says why, as for any file
        return False


def _threaded(blocks: Iterator[bytes]) -> Iterator[bytes]:
    """Run the block producer in a thread so that decompression overlaps with decoding."""
    q: queue.Queue[bytes | BaseException | None] = queue.Queue(maxsize=2)

    def produce() -> None:
        try:
            for b in blocks:
                q.put(b)
            q.put(None)
        except BaseException as err:  # handed to the consumer, re-raised there
            q.put(err)

    thread = threading.Thread(target=produce, name="commprof-inflate", daemon=True)
    thread.start()
    while True:
        item = q.get()
        if item is None:
            return
        if isinstance(item, BaseException):
            raise item
        yield item


def _decode_array(data: bytearray, open_at: int, close_at: int, typed: bool = False) -> tuple[list[Any], bool]:
    """Decode data[open_at..close_at] as a JSON array: the byte at open_at becomes '[' and the one at
    close_at becomes ']' for the call (they are a separator and whitespace/comma), then restored. With
    ``typed``, as TYPED_EVENT where it can (then True), else as Event; errors are those of the Event decode."""
    saved_open, saved_close = data[open_at], data[close_at]
    data[open_at], data[close_at] = 0x5B, 0x5D
    try:
        text = memoryview(data)[open_at : close_at + 1]
        if typed:
            try:
                return _typed_decoder.decode(text), True
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                pass
        return _events_decoder.decode(text), False
    finally:
        data[open_at], data[close_at] = saved_open, saved_close


_CLOSE = re.compile(rb"\}[ \t\r\n]*\]")


class _Reader:
    """The pending text of one trace and what has been read from it. ``data[open_at]`` is the ``[`` or
    the ``,`` before the first pending event; ``base`` is the text offset of ``data[0]``."""

    def __init__(self, path: Path, on_events: Callable[[list[Event]], None],
                 on_typed: Callable[[list[Any]], None] | None = None) -> None:
        self.path, self.on_events, self.on_typed = path, on_events, on_typed
        self.data = bytearray()
        self.base = 0
        self.open_at = -1
        self.searched = 0  # no event boundary in data[open_at + 1 : searched]
        self.next_piece = PIECE_BYTES
        self.result = StreamResult(header=Trace())
        self.header_text: bytes | None = None
        self.damage = Damage()
        self.last_good = 0  # text offset just past the last event read

    def feed(self, block: bytes) -> None:
        self.result.text_bytes += len(block)
        data = self.data
        if block.isspace() and data[-1:].isspace():
            return  # a run of whitespace between tokens: skipped in bulk, never walked byte by byte
        data += block
        if self.open_at < 0:
            self.open_at, self.header_text = _find_events(data, self.path)
            if self.open_at < 0:
                return
        if len(data) - self.open_at < self.next_piece:
            return
        cut = last_boundary(data, max(self.open_at + 1, self.searched))
        if cut < 0:
            self.searched = max(self.open_at + 1, len(data) - 64)
            return
        try:
            self._deliver(*_decode_array(data, self.open_at, cut, self.on_typed is not None), good_end=self.base + cut)
            self._trim(cut)
            self.next_piece = PIECE_BYTES
            return
        except msgspec.ValidationError:
            events: list[Event] | None = decode_each(data, self.open_at, cut, self.damage)
        except (msgspec.DecodeError, RecursionError):
            events = None
        if events is not None:
            self._deliver(events, good_end=self.base + cut)
            self._trim(cut)
            return
        scanned = scan(data, self.open_at, len(data), self.base, self.damage, final=False, stop_at=cut)
        self._deliver(scanned.events, good_end=self.base + scanned.good_end)
        if scanned.stop > self.open_at:
            self._trim(scanned.stop)
        # an event runs on past the cut: wait for twice the text before trying again (linear overall)
        self.next_piece = max(PIECE_BYTES, 2 * (len(self.data) - self.open_at))

    def _deliver(self, events: list[Any], typed: bool = False, *, good_end: int) -> None:
        if events:
            self.result.events += len(events)
            if typed and self.on_typed is not None:
                self.on_typed(events)
            else:
                self.on_events(events)
            self.last_good = max(self.last_good, good_end)

    def _trim(self, at: int) -> None:
        """Drop the text before ``data[at]`` (a separator, which becomes the next piece's '[')."""
        self.data = bytearray(memoryview(self.data)[at:])
        self.base += at
        self.open_at, self.searched = 0, 0

    def finish(self, truncated_gzip: bool) -> bytes | None:
        """Read the last events; the text after the events array (more top-level keys), if any."""
        data, path = self.data, self.path
        if self.open_at < 0:
            if truncated_gzip:
                raise TruncatedTraceError(
                    f"gzip stream ends early, after {self.result.text_bytes:,} bytes of text and before the "
                    "trace's events began (job killed while writing?); nothing to analyze", path)
            self.open_at, self.header_text = _find_events(data, path, final=True)
        close = -1 if truncated_gzip else self._find_close()
        if close >= 0:
            self._read_up_to(close)
            self._report(closed=True)
            return bytes(data[close + 1 :])
        cut = last_boundary(data, self.open_at + 1)
        if cut > 0:  # the sound part in one decode; if it is not sound (or the cut is inside a string),
            try:     # everything left is read event by event below
                self._deliver(*_decode_array(data, self.open_at, cut, self.on_typed is not None),
                              good_end=self.base + cut)
                self._trim(cut)
            except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
                pass
        if self.result.events == 0 and not truncated_gzip and _is_complete_json(self.data):
            raise NotATraceError("not a Kineto trace: the events array holds no event objects", path)
        scanned = scan(self.data, self.open_at, len(self.data), self.base, self.damage, final=True)
        self._deliver(scanned.events, good_end=self.base + scanned.good_end)
        self._report(closed=False)
        return None

    def _read_up_to(self, close: int) -> None:
        """The events between open_at and the separator or bracket at ``close``: one decode when the
        text is sound, else one by one."""
        data = self.data
        if skip_ws(data, self.open_at + 1) >= close:
            return  # "[]"
        try:
            self._deliver(*_decode_array(data, self.open_at, close, self.on_typed is not None),
                          good_end=self.base + close)
            return
        except msgspec.ValidationError:
            events = decode_each(data, self.open_at, close, self.damage)
        except (msgspec.DecodeError, RecursionError):
            events = None
        if events is not None:
            self._deliver(events, good_end=self.base + close)
            return
        scanned = scan(data, self.open_at, close, self.base, self.damage, final=True)
        self._deliver(scanned.events, good_end=self.base + scanned.good_end)

    def _find_close(self) -> int:
        """Index of the ``]`` that closes the events array: one whose following text is the rest of the
        document (nothing, or the object's other keys). -1 when the text was cut before it."""
        data, open_at = self.data, self.open_at
        first = skip_ws(data, open_at + 1)
        if first < len(data) and data[first] == 0x5D and self._tail_ok(first + 1):
            return first
        for match in _CLOSE.finditer(data, open_at + 1):
            if self._tail_ok(match.end()):
                return match.end() - 1
        return -1

    def _tail_ok(self, at: int) -> bool:
        data = self.data
        pos = skip_ws(data, at)
        if self.header_text is None:  # a bare array trace: nothing may follow
            return pos == len(data)
        if pos < len(data) and data[pos] == 0x7D:  # }
            return skip_ws(data, pos + 1) == len(data)
        if pos >= len(data) or data[pos] != 0x2C:
            return False
        try:
            _header_decoder.decode(b"{" + bytes(data[pos + 1 :]))
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
            return False
        return True

    def _report(self, closed: bool) -> None:
        """Damage inside the text sets ``corrupt`` (an error unless the user asks for a partial result);
        a cut at its end is a warning."""
        result, path = self.result, self.path
        middle = [r for r in self.damage.regions if closed or r[0] < self.last_good]
        if middle:
            lost = sum(b - a for a, b in middle)
            result.corrupt = (f"corrupt trace text at byte {middle[0][0]:,} of {result.text_bytes:,}: "
                              f"{len(middle):,} damaged stretch{'es' if len(middle) > 1 else ''} "
                              f"({lost:,} bytes) skipped, {result.events:,} events kept")
        if closed:
            return
        if result.events == 0:
            raise TruncatedTraceError("trace is cut short before its first complete event", path)
        lost = self.base + len(self.data) - self.last_good
        result.warnings.append(f"{path}: trace text ends early at byte {result.text_bytes:,}; kept "
                               f"{result.events:,} complete events, dropped the last {lost:,} bytes")

    def damage_warnings(self) -> list[str]:
        out = []
        if self.damage.invalid:
            shown = "; ".join(f"{n} × {why}" for why, n in self.damage.invalid.most_common(3))
            out.append(f"{self.path}: skipped {sum(self.damage.invalid.values()):,} events of the wrong shape "
                       f"({shown})")
        if self.damage.repaired:
            out.append(f"{self.path}: {self.damage.repaired:,} events hold NaN/Infinity numbers or lone "
                       "surrogate escapes (not JSON): those values were read as missing")
        return out


def stream_events(path: Path, on_events: Callable[[list[Event]], None], label: str | None = None,
                  on_typed: Callable[[list[Any]], None] | None = None) -> StreamResult:
    """Decode the trace at ``path``, handing its events to ``on_events`` a piece at a time. Errors and
    warnings name the file as ``label`` (what the user gave) where that differs from ``path``. With
    ``on_typed``, the pieces that decode as TYPED_EVENT go there instead (EventX / EventM with their
    args decoded, other phases as their own structs), the others to ``on_events`` as Event."""
    blocks = _blocks(path, label or path)
    if not _small_file(path):  # a thread costs more than it overlaps on a file of a few kB
        blocks = _threaded(blocks)
    reader = _Reader(Path(label) if label else path, on_events, on_typed)
    truncated_gzip = False
    try:
        for block in blocks:
            reader.feed(block)
    except EOFError:
        truncated_gzip = True
    tail = reader.finish(truncated_gzip)
    result = reader.result
    result.header = _headers(reader.header_text, tail, reader.path, result)
    result.warnings.extend(reader.damage_warnings())
    if truncated_gzip:
        result.warnings.insert(0, f"{reader.path}: gzip stream ends early (job killed while writing?); "
                                  f"decompressed {result.text_bytes:,} bytes before the cut")
    return result


def _find_events(data: bytearray, path: Path, final: bool = False) -> tuple[int, bytes | None]:
    """Where the events array opens, and the text before it (the header) for an object trace."""
    head = data[:64].lstrip()[:1]
    if head == b"[":
        return data.index(b"["), None
    if head and head != b"{":
        raise NotATraceError("not JSON (does not start with '{' or '[')", path)
    key = data.find(b'"traceEvents"')
    if key >= 0:
        bracket = data.find(b"[", key)
        if bracket >= 0:
            return bracket, bytes(data[:key])
    elif b'"schema"' in data[:256] and b'"nodes"' in data[:8192]:
        # said at once rather than after reading the whole file: these run to gigabytes
        raise NotATraceError("a PyTorch execution trace ('schema' and 'nodes'), not a Kineto trace", path)
    if final:
        raise NotATraceError("not a Kineto trace: no 'traceEvents' array", path)
    return -1, None


def _is_complete_json(data: bytearray) -> bool:
    """A whole, valid JSON document (so a failure to find events is not a cut)."""
    try:
        msgspec.json.decode(memoryview(data))
    except (msgspec.DecodeError, RecursionError):
        return False
    return True


def _headers(header_text: bytes | None, tail: bytes | None, path: Path, result: StreamResult) -> Trace:
    """Top-level keys before and after the events array (Kineto writes some after it). A field of the
    wrong shape is dropped with a warning; a header that is not even JSON is damage (``corrupt``)."""
    parts: list[Trace] = []
    if header_text is not None:
        text = header_text.rstrip().rstrip(b",").rstrip()
        header = _lenient_header(text + b"}", path, result.warnings)
        if header is None:
            result.corrupt = result.corrupt or ("corrupt top-level fields before 'traceEvents' (not JSON): the "
                                                "trace's rank, world size and clock base are unknown")
        else:
            parts.append(header)
    if tail:
        rest = tail.strip()
        if rest.startswith(b","):
            header = _lenient_header(b"{" + rest[1:], path, result.warnings)
            if header is not None:  # top-level keys after a cut or damaged end: the events are what matter
                parts.append(header)
    return merge_headers(parts)


_raw_fields_decoder = msgspec.json.Decoder(dict[str, msgspec.Raw])


def _lenient_header(text: bytes, path: Path, warnings: list[str]) -> Trace | None:
    try:
        return _header_decoder.decode(text)
    except msgspec.ValidationError:
        pass
    except (msgspec.DecodeError, RecursionError):
        return None
    try:
        raw_fields = _raw_fields_decoder.decode(text)
    except (msgspec.DecodeError, msgspec.ValidationError, RecursionError):
        return None
    kept = Trace()
    for name in Trace.__struct_fields__:
        if name not in raw_fields or name == "traceEvents":
            continue
        try:
            one = _header_decoder.decode(b'{"' + name.encode() + b'": ' + bytes(raw_fields[name]) + b"}")
        except (msgspec.DecodeError, msgspec.ValidationError, RecursionError) as err:
            warnings.append(f"{path}: ignored the top-level field {name!r}: {str(err)[:120]}")
            continue
        setattr(kept, name, getattr(one, name))
    return kept
