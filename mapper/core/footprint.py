"""What a parsed model holds in memory, estimated from its size: its handle, each workload bound and each mapping.

The dashboard keeps models for every session under one byte budget (app_pages/held.py, MODEL_CACHE_BYTES in
mapper/core/limits.py); these figures are what it charges. Each is an upper envelope of two shapes measured
(RSS growth, /proc/self/statm, after a collection) on the reference machine:
- node-dense: a chain of 100,000 Relu nodes (2.4 MB of structure): parsed 36 MB, a workload 118 MB (1.18 kB a
  node), a mapping and its document 142 MB (1.42 kB a node); 190,000 nodes: 57, 223 and 272 MB.
- name-heavy: 200 nodes whose tensor and node names are 100 kB each (40 MB): parsed 60 MB (1.5x the bytes), a
  workload 41 MB (1.0x), a mapping 8 MB (0.2x); 2,000 nodes of 10 kB names: 77, 12 and 11 MB.
Real models sit far below both (ResNet-50, BERT-base: under 1 MB each; Llama-2-7B: 2 MB a mapping).
"""

from __future__ import annotations

from dataclasses import dataclass

HANDLE_BYTES_PER_DATA_BYTE = 2.0  # the structure's bytes kept, and protobuf's parse of them (measured 1.5-1.9x)
HANDLE_BYTES_PER_NODE = 400  # the parsed nodes' own objects (measured 300-360 B a node, node-dense)
WORKLOAD_BYTES_PER_DATA_BYTE = 1.5  # a workload's copies of names and attributes (measured up to 1.0x)
WORKLOAD_BYTES_PER_NODE = 1_300  # its graph at shapes and each node's work (measured 1.18 kB a node)
MAPPING_BYTES_PER_DATA_BYTE = 0.5  # a mapping's names (measured up to 0.26x)
MAPPING_BYTES_PER_NODE = 1_500  # its kernels, groups and document (measured 1.42-1.43 kB a node)


@dataclass(frozen=True, slots=True)
class Footprint:
    """Estimated bytes of one model's handle, of each workload bound from it and of each mapping of it."""

    handle_bytes: int
    workload_bytes: int
    mapping_bytes: int

    def total(self, workloads: int, mappings: int) -> int:
        return self.handle_bytes + workloads * self.workload_bytes + mappings * self.mapping_bytes


def model_footprint(data_bytes: int, nodes: int) -> Footprint:
    """The estimate for a model of `data_bytes` of structure (ModelHandle.data) and `nodes` nodes."""
    return Footprint(
        handle_bytes=int(HANDLE_BYTES_PER_DATA_BYTE * data_bytes + HANDLE_BYTES_PER_NODE * nodes),
        workload_bytes=int(WORKLOAD_BYTES_PER_DATA_BYTE * data_bytes + WORKLOAD_BYTES_PER_NODE * nodes),
        mapping_bytes=int(MAPPING_BYTES_PER_DATA_BYTE * data_bytes + MAPPING_BYTES_PER_NODE * nodes),
    )
