"""The events of a trace file, one at a time: memory follows the events a caller keeps, not the file.

`json.loads` of a 256 MB profile builds every event as dicts at once (6.7 GB peak); here the
top-level array (an ORT profile) or the object's "traceEvents" array (a Chrome trace) is read in
chunks and each element decoded alone by the standard library's C decoder, so the largest thing
held is one chunk and one event (MAX_TRACE_EVENT_BYTES), and at most MAX_TRACE_EVENTS are decoded.
The file's other top-level values are decoded under the same caps and dropped. A value nested past
what the decoder allows is a one-line error, not a RecursionError.
"""

from __future__ import annotations

import codecs
import json
import re
from collections.abc import Iterator

from mapper.core import limits
from mapper.core.errors import MapperError

CHUNK_BYTES = 1 << 20  # read and decoded at a time
_SPACE = re.compile(r"[ \t\n\r]*")
_DECODER = json.JSONDecoder()


class _Stream:
    """A window onto the text: `buf[i:]` is what is not consumed yet; `more()` appends a chunk."""

    def __init__(self, raw: bytes, label: str):
        self.raw, self.read, self.label = memoryview(raw), 0, label
        self.utf8 = codecs.getincrementaldecoder("utf-8")()
        self.buf, self.i, self.eof = "", 0, False
        self.found = False  # an event array was met
        self.values = 0  # decoded so far: each costs ~1-3 us whatever its size (MAX_TRACE_EVENTS)

    def more(self) -> bool:
        if self.eof:
            return False
        chunk = self.raw[self.read : self.read + CHUNK_BYTES]
        self.read += len(chunk)
        self.eof = self.read >= len(self.raw)
        try:
            text = self.utf8.decode(chunk, final=self.eof)
        except UnicodeDecodeError as exc:
            raise MapperError(
                f"{self.label}: not UTF-8 text (near byte {self.read - len(chunk) + exc.start});"
                " give an ORT profile or a Chrome trace"
            ) from None
        self.buf, self.i = self.buf[self.i :] + text, 0
        return True

    def peek(self) -> str:
        """The next character that is not white space ("" at the end of the file)."""
        while True:
            space = _SPACE.match(self.buf, self.i)
            assert space is not None  # the pattern matches the empty string: it matches everywhere
            self.i = space.end()
            if self.i < len(self.buf):
                return self.buf[self.i]
            if not self.more():
                return ""

    def take(self, allowed: str) -> str:
        char = self.peek()
        if not char or char not in allowed:
            raise MapperError(
                f"{self.label}: not JSON (expected one of {allowed!r} near character"
                f" {self.read - len(self.buf) + self.i}); give an ORT profile or a Chrome trace"
            )
        self.i += 1
        return char

    def value(self) -> object:
        """The next JSON value, decoded alone; a value longer than MAX_TRACE_EVENT_BYTES is refused, and so is
        the value past MAX_TRACE_EVENTS (256 MB of `1,` is 1.3*10^8 of them: minutes)."""
        self.values += 1
        if self.values > limits.MAX_TRACE_EVENTS:
            raise MapperError(
                f"{self.label}: more than {limits.limit_text('MAX_TRACE_EVENTS')} events; profile fewer runs"
            )
        self.peek()
        while True:
            try:
                found, end = _DECODER.raw_decode(self.buf, self.i)
                if end < len(self.buf) or self.eof:  # a number at the end of the window may go on
                    self.i = end
                    return found
            except json.JSONDecodeError as exc:
                if self.eof:
                    raise MapperError(
                        f"{self.label}: not JSON ({exc.msg}); give an ORT profile or a Chrome trace"
                        " (PyTorch profiler export_chrome_trace)"
                    ) from None
            except RecursionError:
                raise MapperError(
                    f"{self.label}: an event is nested deeper than a trace's events are; give an"
                    " ORT profile or a Chrome trace"
                ) from None
            except ValueError as exc:  # an integer past Python's 4,300 digits
                raise MapperError(f"{self.label}: a value is not a usable number ({str(exc)[:60]})") from None
            if len(self.buf) - self.i > limits.MAX_TRACE_EVENT_BYTES:
                raise MapperError(
                    f"{self.label}: not JSON, or one event longer than"
                    f" {limits.limit_text('MAX_TRACE_EVENT_BYTES')}; give an ORT profile or a Chrome trace"
                )
            self.more()


def _array(stream: _Stream) -> Iterator[object]:
    stream.take("[")
    if stream.peek() == "]":
        stream.i += 1
        return
    while True:
        yield stream.value()
        if stream.take(",]") == "]":
            return


def _members(stream: _Stream) -> Iterator[object]:
    """The events of an object's "traceEvents" array; its other values are decoded (capped) and dropped.
    Sets `stream.found` when there was such an array."""
    stream.take("{")
    if stream.peek() == "}":
        stream.i += 1
        return
    while True:
        key = stream.value()
        stream.take(":")
        if key == "traceEvents" and stream.peek() == "[":
            stream.found = True
            yield from _array(stream)
        else:
            stream.value()  # metadata (deviceProperties, ...)
        if stream.take(",}") == "}":
            return


def trace_events(raw: bytes, label: str) -> Iterator[object]:
    """Each element of the file's event array: the top level of an ORT profile, or "traceEvents" of a
    Chrome trace's top-level object. Raises MapperError when the file has no such array."""
    stream = _Stream(raw, label)
    if stream.peek() == "[":
        stream.found = True
        yield from _array(stream)
    else:
        yield from _members(stream)
    if stream.peek():
        raise MapperError(f"{label}: not JSON (text after the end of the trace); give an ORT profile or a Chrome trace")
    if not stream.found:
        raise MapperError("profile: expected a JSON list of trace events or an object with 'traceEvents'")
