"""Recover the events of damaged trace text in one pass: a piece that msgspec rejects is walked event by
event from its start, a damaged event is skipped up to the next event boundary, and nothing is ever
decoded again from the start of the file (the old salvage re-decoded the whole text at every boundary:
57 s for one bad byte in a 10 MB trace).

Positions are indexes into the caller's buffer. The scanner reads each event with msgspec twice at
most (once as raw JSON, which says where the event ends, once as an ``Event``), so recovery costs a
few times a clean decode of the same text, and only for the pieces that need it.
"""

from __future__ import annotations

import re
from collections import Counter
from dataclasses import dataclass, field

import msgspec

from commprof.ingest.kineto.decode import Event

# `}` `,` `{` with whitespace between: where one event ends and the next begins (or a nested object
# inside an event's args: the scanner tells them apart by decoding)
SEP = re.compile(rb"\}[ \t\r\n]*(,)[ \t\r\n]*\{")
_WS_RUN = re.compile(rb"[ \t\r\n]*")
_BYTE_AT = re.compile(r"\(byte (\d+)\)")
_raw_decoder = msgspec.json.Decoder(msgspec.Raw)
_event_decoder = msgspec.json.Decoder(Event, float_hook=str)
_raw_list_decoder = msgspec.json.Decoder(list[msgspec.Raw])
# NaN / Infinity are not JSON but Python's json module writes them; a lone surrogate escape is JSON
# that is not text. Both are repaired in the one event they sit in (the number reads as missing).
_NON_JSON_NUMBER = re.compile(rb"(?<=[:\[,])([ \t\r\n]*)-?(?:NaN|Infinity)\b")
_LONE_SURROGATE = re.compile(rb"\\u[dD][89abAB][0-9a-fA-F]{2}(?!\\u[dD][c-fC-F][0-9a-fA-F]{2})"
                             rb"|(?<![0-9a-fA-F]{2})\\u[dD][c-fC-F][0-9a-fA-F]{2}")
_CANDIDATES = 64  # `}` tried backwards before one forward regex pass finds the last boundary


def last_boundary(data: bytearray, start: int, end: int | None = None) -> int:
    """Index of the ``,`` of the last event boundary wholly inside ``data[start:end]``, or -1."""
    end = len(data) if end is None else end
    pos = end
    for _ in range(_CANDIDATES):
        pos = data.rfind(b"}", start, pos)
        if pos < 0:
            return -1
        match = SEP.match(data, pos, end)
        if match:
            return match.start(1)
    last = -1
    for match in SEP.finditer(data, start, pos):  # many closing braces in a row: one pass in C
        last = match.start(1)
    return last


def skip_ws(data: bytearray, pos: int) -> int:
    match = _WS_RUN.match(data, pos)
    return match.end() if match else pos


def error_byte(err: Exception) -> int | None:
    """The byte offset a msgspec DecodeError names ("... (byte 123)"), or None (input truncated)."""
    match = _BYTE_AT.search(str(err))
    return int(match.group(1)) if match else None


@dataclass
class Damage:
    """What the scanner had to skip, in absolute text offsets."""

    regions: list[tuple[int, int]] = field(default_factory=list)  # [start, end) of skipped text
    invalid: Counter[str] = field(default_factory=Counter)  # events of the wrong shape, by reason
    repaired: int = 0  # events read after NaN/Infinity/lone-surrogate repair

    def skipped_bytes(self) -> int:
        return sum(end - start for start, end in self.regions)


def decode_each(data: bytearray, open_at: int, close_at: int, damage: Damage) -> list[Event] | None:
    """A piece that is JSON but not all events of the expected shape: decode its events one by one,
    counting the others. None if the piece is not even JSON (the caller scans it)."""
    saved_open, saved_close = data[open_at], data[close_at]
    data[open_at], data[close_at] = 0x5B, 0x5D
    try:
        raws = _raw_list_decoder.decode(memoryview(data)[open_at : close_at + 1])
    except (msgspec.DecodeError, RecursionError):
        return None
    finally:
        data[open_at], data[close_at] = saved_open, saved_close
    decoded = (_decode_event(raw, damage) for raw in raws)
    return [event for event in decoded if event is not None]


def _reason(err: Exception) -> str:
    text = str(err)
    return text.split(" - at ")[0][:80] if isinstance(err, msgspec.ValidationError) else "not valid JSON"


@dataclass
class Scanned:
    events: list[Event]
    stop: int  # index of the separator before the first event not read; -1 when read up to the limit
    good_end: int  # index just past the last event read (0: none)


def scan(data: bytearray, sep_at: int, limit: int, base: int, damage: Damage, final: bool,
         stop_at: int | None = None) -> Scanned:
    """Events after the separator at ``sep_at`` up to ``limit``, one at a time. Damaged text is skipped
    to the next boundary (recorded in ``damage`` at offset ``base`` + index). Not ``final``: the scan
    stops at the first separator at or past ``stop_at``, or before an event that runs past the text at
    hand (more text may complete it). ``final``: text with no boundary left is skipped to ``limit``."""
    events: list[Event] = []
    good_end = 0
    pos = sep_at + 1
    view = memoryview(data)
    while True:
        if stop_at is not None and sep_at >= stop_at:
            return Scanned(events, sep_at, good_end)
        pos = skip_ws(data, pos)
        if pos >= limit:
            return Scanned(events, -1 if final else sep_at, good_end)
        if data[pos] == 0x7B:  # {
            counted = (damage.invalid.copy(), damage.repaired) if not final else None
            end, event = _one_event(data, view, pos, limit, damage)
            after = skip_ws(data, end) if end else pos
            if counted is not None and (end is None or after >= limit):
                # not final and nothing after the event yet: it is read again with the next text
                damage.invalid, damage.repaired = counted
                return Scanned(events, sep_at, good_end)
            if end:
                followed = after < limit and data[after] == 0x2C  # ,
                if counted is not None and not followed and SEP.search(data, after, limit) is None:
                    # damage right after it and no boundary yet: read again, with more text, from sep_at
                    damage.invalid, damage.repaired = counted
                    return Scanned(events, sep_at, good_end)
                if event is not None:
                    events.append(event)
                    good_end = end
                pos = after
                if pos >= limit:
                    return Scanned(events, -1, good_end)
                if followed:
                    sep_at, pos = pos, pos + 1
                    continue
        # damaged text from pos: skip to the next boundary
        match = SEP.search(data, pos + 1, limit) if pos + 1 < limit else None
        if match is None:
            if not final:
                return Scanned(events, sep_at, good_end)
            damage.regions.append((base + pos, base + limit))
            return Scanned(events, -1, good_end)
        damage.regions.append((base + pos, base + match.start(1)))
        sep_at, pos = match.start(1), match.start(1) + 1


def _one_event(data: bytearray, view: memoryview, pos: int, limit: int,
               damage: Damage) -> tuple[int | None, Event | None]:
    """(index past the event, the event) for the object at ``pos``. The index is None when the object
    runs past the text at hand, 0 when it is damaged; the event is None when it is not one."""
    try:
        _raw_decoder.decode(view[pos:limit])
        return limit, _decode_event(view[pos:limit], damage)  # the object is the rest of the text
    except RecursionError:
        return 0, None
    except msgspec.DecodeError as err:
        at = error_byte(err)
        if at is None:
            return None, None
        if str(err).startswith("JSON is malformed: trailing characters"):
            end = pos + at - 1  # msgspec names the byte after the first trailing one
            return end, _decode_event(view[pos:end], damage)
        fixed = _repaired(data, pos, limit)
        if fixed is None:
            return 0, None
        damage.repaired += 1
        return fixed


def _decode_event(text: memoryview | bytes | msgspec.Raw, damage: Damage) -> Event | None:
    try:
        return _event_decoder.decode(text)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError) as err:
        damage.invalid[_reason(err)] += 1
        return None


def _repaired(data: bytearray, pos: int, limit: int) -> tuple[int, Event | None] | None:
    """The event at ``pos`` read after replacing NaN/Infinity numbers by null and lone surrogate
    escapes by U+FFFD, if that is all that is wrong with it (judged up to the next boundary)."""
    match = SEP.search(data, pos, limit)
    end = match.start(1) if match else limit
    text = bytes(data[pos:end]).rstrip()
    fixed = _LONE_SURROGATE.sub(rb"\\ufffd", _NON_JSON_NUMBER.sub(rb"\1null", text))
    if fixed == text:
        return None
    try:
        return pos + len(text), _event_decoder.decode(fixed)
    except (msgspec.ValidationError, msgspec.DecodeError, RecursionError):
        return None
