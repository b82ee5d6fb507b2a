"""A document as JSON text: sections indented for a reader, each row of a row section on a line of its own.

`json.dumps(doc, indent=1)` runs the pure-Python encoder (CPython's C encoder serves only `indent=None`) and needs
the whole document as one tree. Here the document's top level and its small sections are indented as that call
indents them, and each record of a list of records (a kernel, a node, a layer type) is one line from the C encoder,
read from the list or from a one-pass iterator (`report.document.streamed_document`) and dropped once written.
The text parses to the same JSON as `json.dumps(doc, indent=1)`'s; NaN and infinities are refused as there.
"""

from __future__ import annotations

import io
import json
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

_ROW = json.JSONEncoder(allow_nan=False)  # separators ", " and ": ", no indent: the C encoder
_INDENTED = json.JSONEncoder(allow_nan=False, indent=1)


def _is_rows(value: Any) -> bool:
    """A section written a record a line: a list of dicts, or an iterator (a streamed row section)."""
    if isinstance(value, list):
        return bool(value) and all(isinstance(v, dict) for v in value)
    return isinstance(value, Iterator)


def _rows(rows: Iterable[dict]) -> Iterator[str]:
    first = True
    for row in rows:
        yield ("[\n  " if first else ",\n  ") + _ROW.encode(row)
        first = False
    yield "[]" if first else "\n ]"


def json_chunks(doc: Mapping[str, Any]) -> Iterator[str]:
    """The document's JSON text in pieces, in key order (see the module's docstring)."""
    yield "{"
    for i, (key, value) in enumerate(doc.items()):
        yield ("\n " if i == 0 else ",\n ") + _ROW.encode(key) + ": "
        if _is_rows(value):
            yield from _rows(value)
        else:  # one level in: json's indent=1 text with each line one space further in (no string holds a newline)
            yield _INDENTED.encode(value).replace("\n", "\n ")
    yield "\n}" if doc else "}"


def json_text(doc: Mapping[str, Any]) -> str:
    return "".join(json_chunks(doc))


def json_bytes(doc: Mapping[str, Any]) -> bytes:
    """The text as UTF-8 bytes, built in one buffer (a streamed document's rows are never all held as records)."""
    buffer = io.BytesIO()
    for chunk in json_chunks(doc):
        buffer.write(chunk.encode())
    return buffer.getvalue()


def write_json(doc: Mapping[str, Any], out: io.TextIOBase | Any) -> None:
    """The text written to a stream (stdout) piece by piece."""
    for chunk in json_chunks(doc):
        out.write(chunk)
    out.write("\n")
