"""An ONNX file's structure without its weights: a filter over the protobuf wire format.

`read_structure` walks ModelProto -> graph / functions / training graphs -> nodes -> attributes ->
tensors and subgraphs at any depth over a buffer (a memory map of the file, or uploaded bytes), copies
every field, and replaces the data fields of each tensor larger than KEEP_DATA_BYTES by a reference to
external data that does not exist (location STRIPPED_LOCATION): name, type and dims stay. What comes out
is a small, valid ModelProto that the importer parses as it parses a graph exported with
external_data=True. A weight payload is skipped by its length prefix, never read: on a 574 MB VGG-19 the
walk touches a few kilobytes. Small tensors (shape vectors, scalars) keep their data because folding
needs them. An unchanged file comes out byte for byte as it went in (fields are copied in order and
lengths re-encoded minimally, as protobuf writes them).
"""

from __future__ import annotations

from dataclasses import dataclass

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.graph import ReleasedPrecision
from mapper.model.values import FOLD_MAX_ELEMENTS

VARINT, FIXED64, LEN, START_GROUP, END_GROUP, FIXED32 = range(6)  # protobuf wire types
MAX_VARINT_BYTES = 10  # a 64-bit varint takes at most 10 bytes (protobuf encoding spec)
VARINT_MORE, VARINT_BITS = 0x80, 0x7F  # a varint byte: the continuation bit, then 7 bits of value (same spec)
# A tensor whose data fields hold more than this is replaced by a shape-only reference: every tensor the
# importer evaluates (at most FOLD_MAX_ELEMENTS values) keeps its data in any encoding, varints included.
KEEP_DATA_BYTES = FOLD_MAX_ELEMENTS * MAX_VARINT_BYTES
MAX_MESSAGE_DEPTH = 100  # protobuf's default recursion limit: a deeper file would not parse anyway
STRIPPED_LOCATION = "weights-not-included"  # the external-data location of a weight left behind
TENSOR_DATA_FIELDS = frozenset({4, 5, 6, 7, 9, 10, 11})  # float, int32, string, int64, raw, double, uint64 data
TENSOR_EXTERNAL_FIELDS = frozenset({13, 14})  # external_data, data_location: rewritten for a stripped tensor
NODE_INPUT, NODE_OUTPUT = 1, 2  # NodeProto's input and output names: counted against MAX_NODE_INPUTS, MAX_EDGES
NODE_EDGE_FIELDS = frozenset({NODE_INPUT, NODE_OUTPUT})
GRAPH_VALUE_INFO_FIELDS = frozenset({11, 12, 13})  # GraphProto input, output, value_info
# What the walk counts as it reads, each against the limit of that name (mapper/core/limits.py): the importer's
# tables grow with these, not with bytes (a 43 MB file of 2M one-element initializers mapped at 2.3 GB).
COUNTED = {
    "MAX_NODES": "nodes (control-flow bodies and functions included)",
    "MAX_EDGES": "node inputs and outputs",
    "MAX_TENSORS": "tensors (initializers, sparse parts and attribute tensors)",
    "MAX_VALUE_INFOS": "graph inputs, outputs and value_info entries",
}

# Message kind -> {field number: kind of the message in it} for the fields that can hold tensors (onnx.proto3).
# Any other field is copied as it is.
TENSOR, SPARSE, NODE = "tensor", "sparse", "node"
_CHILDREN = {
    "model": {7: "graph", 20: "training", 25: "function"},
    "training": {1: "graph", 2: "graph"},  # TrainingInfoProto initialization, algorithm
    "function": {7: "node"},
    "graph": {1: "node", 5: TENSOR, 15: SPARSE},  # node, initializer, sparse_initializer
    "node": {5: "attribute"},
    "attribute": {5: TENSOR, 6: "graph", 10: TENSOR, 11: "graph", 22: SPARSE, 23: SPARSE},  # t g tensors graphs
    SPARSE: {1: TENSOR, 2: TENSOR},  # values, indices
}


def field_key(number: int, wire_type: int) -> bytes:
    return varint_bytes(number << 3 | wire_type)


def varint_bytes(value: int) -> bytes:
    out = bytearray()
    while value > VARINT_BITS:
        out.append(value & VARINT_BITS | VARINT_MORE)
        value >>= 7
    out.append(value)
    return bytes(out)


def _entry(key: str, value: str) -> bytes:
    body = field_key(1, LEN) + varint_bytes(len(key)) + key.encode() + field_key(2, LEN)
    body += varint_bytes(len(value.encode())) + value.encode()
    return field_key(13, LEN) + varint_bytes(len(body)) + body


# What a stripped tensor gets in place of its data: external_data {location} and data_location = EXTERNAL.
_STUB = _entry("location", STRIPPED_LOCATION) + field_key(14, VARINT) + varint_bytes(1)


class WireError(ValueError):
    """The bytes are not a protobuf message (truncated, a length past the end, a group)."""


@dataclass(frozen=True, slots=True)
class Structure:
    data: bytes  # the ModelProto with weights as shape-only external references
    read_bytes: int  # bytes of the input the walk looked at (headers parsed, fields copied): an upper bound
    stripped: int  # tensors whose data was left behind
    released: ReleasedPrecision | None = None  # a config's published precision; None: the file's tensors say


class _Walk:
    def __init__(self, buf, name: str):
        self.buf, self.name = buf, name
        self.read_bytes = 0
        self.stripped = 0
        self.counts = dict.fromkeys(COUNTED, 0)  # at any depth: graphs, If/Loop/Scan bodies, functions, training

    def _count(self, n: int) -> None:
        self.read_bytes += n
        if self.read_bytes > limits.MAX_STRUCTURE_BYTES:
            raise MapperError(
                f"the model's graph structure (weights left out) is over {limits.limit_text('MAX_STRUCTURE_BYTES')}"
            )

    def varint(self, pos: int, end: int) -> tuple[int, int]:
        result = shift = 0
        start = pos
        while True:
            if pos >= end or shift >= 7 * MAX_VARINT_BYTES:
                raise WireError(f"bad varint at byte {start}")
            byte = self.buf[pos]
            pos += 1
            result |= (byte & VARINT_BITS) << shift
            if byte < VARINT_MORE:
                self._count(pos - start)
                return result, pos
            shift += 7

    def fields(self, start: int, end: int):
        """(number, wire type, field start, value start, value end) of each field in buf[start:end]."""
        pos = start
        while pos < end:
            tag, value_start = self.varint(pos, end)
            number, wire_type = tag >> 3, tag & 7
            if wire_type == VARINT:
                value_end = self.varint(value_start, end)[1]
            elif wire_type in (FIXED64, FIXED32):
                value_end = value_start + (8 if wire_type == FIXED64 else 4)
            elif wire_type == LEN:
                length, value_start = self.varint(value_start, end)
                value_end = value_start + length
            else:
                raise WireError(f"wire type {wire_type} (groups are not ONNX) at byte {pos}")
            if number == 0 or value_end > end:
                raise WireError(f"field {number} at byte {pos} runs past its message")
            yield number, wire_type, pos, value_start, value_end
            pos = value_end

    def copy(self, start: int, end: int) -> bytes:
        self._count(end - start)
        return bytes(self.buf[start:end])

    def message(self, kind: str, start: int, end: int, depth: int) -> bytes:
        if depth > MAX_MESSAGE_DEPTH:
            raise WireError(f"messages nested over {MAX_MESSAGE_DEPTH} deep (protobuf's recursion limit)")
        if kind == TENSOR:
            self.count("MAX_TENSORS")
            return self.tensor(start, end)
        node, graph, inputs = kind == NODE, kind == "graph", 0
        if node:
            self.count("MAX_NODES")
        children = _CHILDREN[kind]
        out = []
        for number, wire_type, field_start, value_start, value_end in self.fields(start, end):
            if node and wire_type == LEN and number in NODE_EDGE_FIELDS:
                inputs += number == NODE_INPUT
                self.count_edge(inputs)
            elif graph and wire_type == LEN and number in GRAPH_VALUE_INFO_FIELDS:
                self.count("MAX_VALUE_INFOS")
            child = children.get(number) if wire_type == LEN else None
            if child is None:
                out.append(self.copy(field_start, value_end))
            else:
                body = self.message(child, value_start, value_end, depth + 1)
                out.append(field_key(number, LEN) + varint_bytes(len(body)) + body)
        return b"".join(out)

    # The graph is held to the COUNTED limits and MAX_NODE_INPUTS as it is read: a file over one is refused the
    # moment the walk passes it, before the rest of the file is read or any of it parsed.
    def count(self, limit: str) -> None:
        self.counts[limit] += 1
        if self.counts[limit] > getattr(limits, limit):
            raise MapperError(
                f"{self.name} has over {getattr(limits, limit)} {COUNTED[limit]}, over {limits.limit_text(limit)}"
            )

    def count_edge(self, inputs: int) -> None:
        """One more input or output name of the node being read, which has `inputs` inputs so far."""
        if inputs > limits.MAX_NODE_INPUTS:
            raise MapperError(
                f"{self.name}: node {self.counts['MAX_NODES']} has over {limits.MAX_NODE_INPUTS} inputs,"
                f" over {limits.limit_text('MAX_NODE_INPUTS')}"
            )
        self.count("MAX_EDGES")

    def tensor(self, start: int, end: int) -> bytes:
        """A TensorProto as it is when its data is small, else its other fields plus the stub reference."""
        payload, kept = 0, []
        for number, _, field_start, value_start, value_end in self.fields(start, end):
            if number in TENSOR_DATA_FIELDS:
                payload += value_end - value_start
            elif number not in TENSOR_EXTERNAL_FIELDS:
                kept.append((field_start, value_end))
        if payload <= KEEP_DATA_BYTES:
            return self.copy(start, end)
        self.stripped += 1
        return b"".join(self.copy(a, b) for a, b in kept) + _STUB


def read_structure(buf, name: str = "model") -> Structure:
    """The model in `buf` (bytes, or an mmap of the file) with its large tensors' data left behind.

    `buf` needs only `len`, `buf[i]` (an int) and `buf[a:b]` (bytes): nothing else of it is touched.
    Bad wire data: MapperError naming `name`; structure over MAX_STRUCTURE_BYTES: MapperError naming it."""
    walk = _Walk(buf, name)
    try:
        data = walk.message("model", 0, len(buf), 0)
    except WireError as exc:
        raise MapperError(
            f"{name} is not a valid ONNX model (protobuf wire format: {exc}); give the .onnx file"
        ) from None
    return Structure(data, walk.read_bytes, walk.stripped)
