"""Stream a Kineto trace: decompress in a background thread, decode ``traceEvents`` a chunk at a time.

Holding a whole 500 MB trace as text *and* as decoded events does not fit next to thousands of ranks,
so the text is decompressed in blocks (zlib and file reads release the GIL, so this overlaps with
decoding) and the events array is cut at event boundaries into pieces that msgspec decodes one at a
time; the caller keeps only what it needs from each piece. A file cut short (a job killed while
writing) yields every complete event before the cut; the caller is told how many bytes were lost.
"""

from __future__ import annotations

import queue
import threading
import zlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import msgspec

from commprof.errors import InputError, TruncatedTraceError
from commprof.ingest.decode import Event, Trace, merge_headers

READ_BLOCK = 1 << 20
TEXT_BLOCK = 4 << 20  # decompressed bytes handed over at a time
PIECE_BYTES = 4 << 20  # decode once this much text is pending
_WS = b" \t\r\n"
# float literals arrive as their text: epoch µs do not fit a float64 to the ns (see exact_time)
_events_decoder = msgspec.json.Decoder(list[Event], float_hook=str)
_header_decoder = msgspec.json.Decoder(Trace, float_hook=str)


class NotATraceError(InputError):
    """A file that is not a Kineto trace at all (another JSON, such as a PyTorch execution trace, or
    no JSON). Beside other traces it is skipped with a warning; given alone it is an error."""


@dataclass
class StreamResult:
    header: Trace
    events: int = 0
    text_bytes: int = 0
    warnings: list[str] = field(default_factory=list)


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
        inflater = zlib.decompressobj(wbits=31)
        block = first
        while block:
            try:
                while block:
                    yield inflater.decompress(block, TEXT_BLOCK)
                    block = inflater.unconsumed_tail
                    if inflater.eof and inflater.unused_data:  # concatenated gzip members
                        block = inflater.unused_data
                        inflater = zlib.decompressobj(wbits=31)
            except zlib.error as err:
                raise InputError(f"corrupt gzip data: {err}", shown) from None
            block = fh.read(READ_BLOCK)
        if not inflater.eof:
            raise EOFError("gzip stream ends early")


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


def _last_boundary(data: bytearray, start: int, end: int | None = None) -> int:
    """Index of the last ``,`` in ``data[start:end]`` that separates two events (``}`` before it and
    ``{`` after it, whitespace aside), or -1."""
    pos = len(data) if end is None else end
    while True:
        pos = data.rfind(b",", start, pos)
        if pos < 0:
            return -1
        i = pos - 1
        while i > start and data[i] in _WS:
            i -= 1
        j = pos + 1
        while j < len(data) and data[j] in _WS:
            j += 1
        if data[i] == 0x7D and j < len(data) and data[j] == 0x7B:  # } , {
            return pos


def _decode_array(data: bytearray, open_at: int, close_at: int) -> list[Event]:
    """Decode data[open_at..close_at] as a JSON array: the byte at open_at becomes '[' and the one at
    close_at becomes ']' for the call (they are a separator and whitespace/comma), then restored."""
    saved_open, saved_close = data[open_at], data[close_at]
    data[open_at], data[close_at] = 0x5B, 0x5D
    try:
        return _events_decoder.decode(memoryview(data)[open_at : close_at + 1])
    finally:
        data[open_at], data[close_at] = saved_open, saved_close


def stream_events(path: Path, on_events: Callable[[list[Event]], None], label: str | None = None) -> StreamResult:
    """Decode the trace at ``path``, handing its events to ``on_events`` a piece at a time. Errors and
    warnings name the file as ``label`` (what the user gave) where that differs from ``path``."""
    blocks = _threaded(_blocks(path, label or path))
    path = Path(label) if label else path
    data = bytearray()
    result = StreamResult(header=Trace())
    header_text: bytes | None = None
    open_at = -1  # index in data of the '[' (or separator) that starts the pending events
    truncated_gzip = False
    try:
        for block in blocks:
            result.text_bytes += len(block)
            data += block
            if open_at < 0:
                open_at, header_text = _find_events(data, path)
                if open_at < 0:
                    continue
            if len(data) - open_at < PIECE_BYTES:
                continue
            cut = _last_boundary(data, open_at + 1)
            if cut < 0:
                continue
            try:
                events = _decode_array(data, open_at, cut)
            except msgspec.ValidationError as err:
                raise NotATraceError(f"not a Kineto trace: {err}", path) from None
            except msgspec.DecodeError:
                continue  # a separator inside an event's args: wait for more text
            result.events += len(events)
            on_events(events)
            del events
            data = bytearray(memoryview(data)[cut:])  # the separator stays, as the next '['
            open_at = 0
    except EOFError:
        truncated_gzip = True
    if open_at < 0:
        if truncated_gzip:
            raise TruncatedTraceError(f"gzip stream ends early, after {result.text_bytes:,} bytes of text and before "
                             "the trace's events began (job killed while writing?); nothing to analyze", path)
        open_at, header_text = _find_events(data, path, final=True)
    tail = _finish(data, open_at, path, result, on_events)
    result.header = _headers(header_text, tail, path)
    if truncated_gzip:
        result.warnings.insert(0, f"{path}: gzip stream ends early (job killed while writing?); "
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


def _finish(data: bytearray, open_at: int, path: Path, result: StreamResult,
            on_events: Callable[[list[Event]], None]) -> bytes | None:
    """Decode the last events and return the text after the array (more top-level keys)."""
    pos = open_at + 1
    while True:
        close = data.find(b"]", pos)
        if close < 0:
            break
        i = close - 1
        while i > open_at and data[i] in _WS:
            i -= 1
        if data[i] == 0x7D or i == open_at:  # "}]", or the empty array "[]"
            try:
                events = _decode_array(data, open_at, close) if i > open_at else []
            except msgspec.ValidationError as err:
                raise NotATraceError(f"not a Kineto trace: {err}", path) from None
            except msgspec.DecodeError:
                pos = close + 1
                continue
            result.events += len(events)
            on_events(events)
            return bytes(data[close + 1 :])
        pos = close + 1
    if _is_complete_json(data):
        raise NotATraceError("not a Kineto trace: the events array holds no event objects", path)
    _salvage_truncated(data, open_at, path, result, on_events)
    return None


def _is_complete_json(data: bytearray) -> bool:
    """A whole, valid JSON document (so a failure to find events is not a cut)."""
    try:
        msgspec.json.decode(memoryview(data))
    except msgspec.DecodeError:
        return False
    return True


def _salvage_truncated(data: bytearray, open_at: int, path: Path, result: StreamResult,
                       on_events: Callable[[list[Event]], None]) -> None:
    """No closing bracket: the text was cut. Keep the complete events, report what was lost."""
    end = len(data)
    while True:
        cut = _last_boundary(data, open_at + 1, end)
        if cut < 0:
            break
        try:
            events = _decode_array(data, open_at, cut)
        except msgspec.DecodeError:
            end = cut
            continue
        result.events += len(events)
        on_events(events)
        lost = len(data) - cut
        result.warnings.append(f"{path}: trace text ends early at byte {result.text_bytes:,}; kept "
                               f"{result.events:,} complete events, dropped the last {lost:,} bytes")
        return
    if result.events == 0:
        raise TruncatedTraceError("trace is cut short before its first complete event", path)
    result.warnings.append(f"{path}: trace text ends early at byte {result.text_bytes:,}; kept "
                           f"{result.events:,} complete events, dropped the last "
                           f"{len(data) - open_at:,} bytes")


def _headers(header_text: bytes | None, tail: bytes | None, path: Path) -> Trace:
    """Top-level keys before and after the events array (Kineto writes some after it)."""
    parts: list[Trace] = []
    if header_text is not None:
        text = header_text.rstrip().rstrip(b",").rstrip()
        try:
            parts.append(_header_decoder.decode(text + b"}"))
        except (msgspec.DecodeError, msgspec.ValidationError) as err:
            raise NotATraceError(f"not a Kineto trace: bad top-level fields ({err})", path) from None
    if tail:
        rest = tail.strip()
        if rest.startswith(b","):
            try:
                parts.append(_header_decoder.decode(b"{" + rest[1:]))
            except (msgspec.DecodeError, msgspec.ValidationError):
                pass  # top-level keys after a cut or damaged end: the events are what matter
    return merge_headers(parts)
