"""AIConfigurator's measured per-op tables, read from the installed `aiconfigurator-core` (NVIDIA, Apache-2.0).

The package (`pip install 'mapper[validate]'`) ships `systems/data/<system>/<family>/<framework>/<version>/
<table>.parquet`: one row per op configuration, `latency` in milliseconds, collected by AIConfigurator's
collector on a whole node with locked clocks, each op captured in a CUDA graph and replayed (collector/helper.py
`benchmark_with_power`). What each covered table timed, from the collector's own notes (docs/validation.md):

- `gemm_perf`: one Linear layer, `m` tokens x `k` -> `n`; weights rotated over enough copies to leave L2 cold.
  An `fp8` or `fp8_block` row times the module: the activation's dynamic quantize and the GEMM.
- `generation_attention_perf`: one decode step of `batch_size` sequences, `step` cached tokens each (one query).
- `context_attention_perf`: causal prefill of `batch_size` x `isl` tokens, no cached prefix (`step` 0).
- `custom_allreduce_perf` (graph replay) and `nccl_perf` (nccl-tests, `all_reduce` rows): `message_size`
  elements across `num_gpus` GPUs of one node.

Rows are streamed in record batches; `sample` keeps a deterministic subset in bounded memory (the rows with the
smallest stable hash), and `held_back` splits rows by a declared rule on whole shapes (SPLIT_RULE).
"""

from __future__ import annotations

import hashlib
import heapq
import importlib.resources
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from mapper.core.errors import MapperError
from mapper.core.extras import require

PACKAGE = "aiconfigurator_core"
# AIConfigurator's system directory -> the built-in profile it is compared with; other systems: "no profile"
SYSTEM_PROFILES = {
    "a100_sxm": "a100-sxm-80gb",
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200-sxm",
    "b200_sxm": "b200",
}
# table file stem -> the op kind its rows are mapped as


class RowKind(StrEnum):
    """What a measured row timed, as the harness maps it (the slice it becomes, the band it is scored in)."""

    GEMM = "gemm"
    ATTENTION_DECODE = "attention-decode"
    ATTENTION_PREFILL = "attention-prefill"
    ALL_REDUCE = "all-reduce"


TABLES = {
    "gemm_perf": RowKind.GEMM,
    "generation_attention_perf": RowKind.ATTENTION_DECODE,
    "context_attention_perf": RowKind.ATTENTION_PREFILL,
    "custom_allreduce_perf": RowKind.ALL_REDUCE,
    "nccl_perf": RowKind.ALL_REDUCE,
}
DTYPES = {"bfloat16": "bf16", "half": "fp16", "float16": "fp16", "fp8": "fp8", "fp8_block": "fp8-block"}
GEMM_DTYPES = {"bf16", "fp8", "fp8-block", "nvfp4"}
MS = 1e-3
BATCH_ROWS = 8192  # rows a record batch holds while streaming a table
# The held-back rule, fixed before any fit: a row is held back when the SHA-256 of its split key (SPLIT_SALT and
# the key's fields joined by "|") read as a big-endian integer is divisible by HELD_BACK_ONE_IN. Keys are whole
# shapes, so no shape straddles the split: a GEMM's weight (n, k) with every m; an attention configuration
# (heads, kv heads, head dim, KV dtype) with every batch and length; an all-reduce's message size with every GPU count.
SPLIT_SALT = "mapper-validate-1"
HELD_BACK_ONE_IN = 5
SPLIT_RULE = (
    f"held back: sha256('{SPLIT_SALT}|' + key) % {HELD_BACK_ONE_IN} == 0; key: gemm 'gemm|n|k', attention "
    "'attention|heads|kv_heads|head_dim|kv_dtype', all-reduce 'all-reduce|message_elements'"
)


@dataclass(frozen=True, slots=True)
class Table:
    """One parquet table of the package: where it is and what it holds."""

    system: str  # AIConfigurator's name, e.g. h200_sxm
    family: str  # gemm, attention, comm...
    framework: str  # trtllm, vllm, sglang, nccl
    version: str
    name: str  # the file's stem, e.g. gemm_perf
    path: Any  # an importlib.resources Traversable (a real file in an installed wheel)

    @property
    def profile(self) -> str | None:
        return SYSTEM_PROFILES.get(self.system)

    @property
    def label(self) -> str:
        return f"{self.system}/{self.family}/{self.framework}/{self.version}/{self.name}"


@dataclass(frozen=True, slots=True)
class Row:
    """One measured op configuration, typed: what the engine maps and what it is compared with."""

    table: str  # Table.label
    system: str
    kind: str  # gemm, attention-decode, attention-prefill, all-reduce
    dtype: str  # gemm: the GEMM's; attention: compute dtype, "/kv-fp8" where the KV cache is fp8
    shape: tuple[int, ...]  # gemm (m, n, k); attention (batch, heads, kv_heads, kv_len or isl, head_dim);
    # all-reduce (devices, message elements)
    measured_s: float
    source: str  # kernel_source, e.g. torch_flow
    timing: str  # graph (CUDA-graph replay) or eager

    @property
    def split_key(self) -> str:
        if self.kind == RowKind.GEMM:
            return f"gemm|{self.shape[1]}|{self.shape[2]}"
        if self.kind.startswith("attention"):
            kv = "fp8" if self.dtype.endswith("kv-fp8") else "bf16"
            return f"attention|{self.shape[1]}|{self.shape[2]}|{self.shape[4]}|{kv}"
        return f"{self.kind}|{self.shape[1]}"


def stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


def held_back(row: Row) -> bool:
    """Whether `row` is in the held-back set (SPLIT_RULE): decided by its whole shape, never by the row alone."""
    return stable_hash(f"{SPLIT_SALT}|{row.split_key}") % HELD_BACK_ONE_IN == 0


def data_root():
    """The package's systems/data directory (importlib.resources), or MapperError naming the extra."""
    require(PACKAGE, "mapper validate")
    root = importlib.resources.files(PACKAGE) / "systems" / "data"
    if not root.is_dir():
        raise MapperError(f"{PACKAGE} has no systems/data directory: reinstall 'mapper[validate]'")
    return root


def tables(root=None, covered_only: bool = True) -> list[Table]:
    """Every table under the package's data, sorted; `covered_only`: those whose rows this module parses."""
    root = data_root() if root is None else root
    found = []
    for system in root.iterdir():
        for family in _dirs(system):
            for framework in _dirs(family):
                for version in _dirs(framework):
                    for item in version.iterdir():
                        stem = item.name.removesuffix(".parquet")
                        if item.name.endswith(".parquet") and (stem in TABLES or not covered_only):
                            found.append(Table(system.name, family.name, framework.name, version.name, stem, item))
    return sorted(found, key=lambda t: t.label)


def _dirs(node) -> list:
    return [d for d in node.iterdir() if d.is_dir()] if node.is_dir() else []


def table_rows(table: Table) -> int:
    """The table's row count, from the parquet footer (no rows read)."""
    parquet = require("pyarrow.parquet", "mapper validate")
    with table.path.open("rb") as handle:
        return int(parquet.ParquetFile(handle).metadata.num_rows)


def read_rows(table: Table) -> Iterator[Row]:
    """The table's rows this module maps, streamed one record batch at a time (rows it does not map: skipped)."""
    parquet = require("pyarrow.parquet", "mapper validate")
    with table.path.open("rb") as handle:
        for batch in parquet.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS):
            for record in batch.to_pylist():
                row = parse_record(table, record)
                if row is not None:
                    yield row


def parse_record(table: Table, record: dict) -> Row | None:
    """One parquet record as a Row, or None where the engine has no slice for it (a weight-only or int8 GEMM,
    sliding-window or beam attention, a collective other than all-reduce); malformed records raise MapperError."""
    kind = TABLES.get(table.name)
    try:
        if kind == RowKind.GEMM:
            return _gemm(table, record)
        if kind in (RowKind.ATTENTION_DECODE, RowKind.ATTENTION_PREFILL):
            return _attention(table, kind, record)
        if kind == RowKind.ALL_REDUCE:
            return _all_reduce(table, record)
    except (KeyError, TypeError, ValueError) as exc:
        raise MapperError(f"{table.label}: record {str(record)[:80]!r} unreadable ({exc!s:.60})") from None
    return None


def _row(table: Table, kind: str, dtype: str, shape: tuple[int, ...], record: dict, timing: str = "graph") -> Row:
    measured = float(record["latency"]) * MS
    if not measured > 0 or min(shape) < 1:
        raise ValueError("a non-positive latency or size")
    return Row(table.label, table.system, kind, dtype, shape, measured, str(record.get("kernel_source", "")), timing)


def _gemm(table: Table, record: dict) -> Row | None:
    dtype = DTYPES.get(record["gemm_dtype"], record["gemm_dtype"])
    if dtype not in GEMM_DTYPES:
        return None
    return _row(table, RowKind.GEMM, dtype, (int(record["m"]), int(record["n"]), int(record["k"])), record)


def _attention(table: Table, kind: str, record: dict) -> Row | None:
    if int(record.get("window_size") or 0) or int(record.get("beam_width") or 1) != 1:
        return None  # sliding-window or beam-search attention: not what the one-op slice does
    heads, kv_heads = int(record["num_heads"]), int(record["num_key_value_heads"])
    if heads % kv_heads or (kind == RowKind.ATTENTION_PREFILL and int(record["step"])):
        return None
    dtype = DTYPES[record["attn_dtype"]]
    if DTYPES[record["kv_cache_dtype"]] == "fp8" and dtype != "fp8":
        dtype += "/kv-fp8"
    batch, head_dim = int(record["batch_size"]), int(record["head_dim"])
    # decode: one query a sequence over the `step` cached tokens and its own; prefill: isl tokens, causal
    length = int(record["step"]) + 1 if kind == RowKind.ATTENTION_DECODE else int(record["isl"])
    return _row(table, kind, dtype, (batch, heads, kv_heads, length, head_dim), record)


def _all_reduce(table: Table, record: dict) -> Row | None:
    if record["op_name"] != "all_reduce":
        return None
    dtype = DTYPES.get(str(record.get("allreduce_dtype") or record.get("nccl_dtype")), "")
    if dtype not in ("bf16", "fp16"):
        return None
    # nccl-tests launch eagerly; a custom all-reduce row says how it ran (vLLM's and SGLang's collectors time
    # both, kernel_source `..._eager` or `..._graph`; TensorRT-LLM's replays a graph)
    source = str(record.get("kernel_source", ""))
    timing = "eager" if table.name == "nccl_perf" or source.lower().endswith("eager") else "graph"
    return _row(
        table, RowKind.ALL_REDUCE, dtype, (int(record["num_gpus"]), int(record["message_size"])), record, timing
    )


def sample(rows: Iterable[Row], n: int | None, seed: str = "") -> list[Row]:
    """The `n` rows with the smallest stable hash of (seed, the row's table, kind, dtype, shape, source): the same
    rows on every run and machine, chosen streaming in O(n) memory; n None: every row, in table order."""
    if n is None:
        return list(rows)
    return heapq.nsmallest(n, rows, key=lambda r: stable_hash(f"{seed}|{r.table}|{r.dtype}|{r.shape}|{r.source}"))


def unprofiled_systems(root=None) -> dict[str, int]:
    """Systems whose tables have no built-in profile to compare with: system -> its covered tables."""
    out: dict[str, int] = {}
    for table in tables(root):
        if table.profile is None:
            out[table.system] = out.get(table.system, 0) + 1
    return out
