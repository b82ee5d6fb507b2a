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
- `moe_perf`: one rank's fused MoE module, `num_tokens` routed by a `distribution` (mapper/evidence/moe_rows.py).
- `moe_a2a_perf`: DeepEP's dispatch or combine of `num_tokens` a rank, each to `topk` of `num_experts` experts
  over `ep_size` GPUs of one node (`collector/wideep/sglang/collect_moe_a2a.py`).

Rows are streamed in record batches and typed as columns (`RowColumns`, by mapper/evidence/aic_records.py's
readers); `sample_table` keeps a deterministic subset in bounded memory (the smallest stable hashes, a Row built for
each row kept); `held_back` splits by SPLIT_RULE.
"""

from __future__ import annotations

import heapq
import importlib.resources
from collections.abc import Iterable, Iterator

from mapper.core.errors import MapperError
from mapper.core.extras import require
from mapper.evidence.aic_records import (
    SYSTEM_PROFILES,
    TABLES,
    Row,
    RowColumns,
    RowKind,
    Table,
    parse_batch,
    stable_hash,
)

__all__ = [  # the rows' types (mapper/evidence/aic_records.py), read through this module by its callers
    "SYSTEM_PROFILES", "TABLES", "MapperError", "Row", "RowColumns", "RowKind", "Table", "held_back", "parse_record",
    "read_rows", "sample", "sample_table", "stable_hash", "tables", "unprofiled_systems",
]  # fmt: skip

PACKAGE = "aiconfigurator_core"
BATCH_ROWS = 8192  # rows a record batch holds while streaming a table
# The held-back rule, fixed before any fit: a row is held back when the SHA-256 of its split key (SPLIT_SALT and the
# key's fields joined by "|") read as a big-endian integer is divisible by HELD_BACK_ONE_IN. Keys are whole shapes, so
# no shape straddles the split: a GEMM's weight (n, k) with every m; an attention configuration (heads, kv heads,
# head dim, KV dtype) with every batch and length; an all-reduce's message size with every GPU count; a MoE layer
# (hidden, inter, top-k, experts) with every token count, parallel split, distribution and dtype; a MoE all-to-all's
# layer (hidden, top-k, experts) with every token count, phase, kernel and dtype.
SPLIT_SALT = "mapper-validate-1"
HELD_BACK_ONE_IN = 5
SPLIT_RULE = (
    f"held back: sha256('{SPLIT_SALT}|' + key) % {HELD_BACK_ONE_IN} == 0; key: gemm 'gemm|n|k', attention "
    "'attention|heads|kv_heads|head_dim|kv_dtype', all-reduce 'all-reduce|message_elements', "
    "moe 'moe|hidden|inter|topk|experts', moe-all-to-all 'moe-all-to-all|hidden|topk|experts'"
)


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


def read_columns(table: Table) -> Iterator[RowColumns]:
    """The table's mapped rows, one record batch at a time, as columns."""
    parquet = require("pyarrow.parquet", "mapper validate")
    with table.path.open("rb") as handle:
        for batch in parquet.ParquetFile(handle).iter_batches(batch_size=BATCH_ROWS):
            yield parse_batch(table, batch)


def read_rows(table: Table) -> Iterator[Row]:
    """The table's rows this module maps, in table order (rows it does not map: skipped)."""
    for columns in read_columns(table):
        yield from columns.rows(range(columns.size))


def sample_table(table: Table, n: int | None, seed: str = "", dtype: str | None = None) -> list[Row]:
    """`sample(read_rows(table), n, seed)` (only the rows of `dtype` where given), hashed from the columns: a Row is
    built for the n rows kept, not for every row read."""
    if n is None:
        return [r for r in read_rows(table) if dtype is None or r.dtype == dtype]
    kept: list[tuple[int, int, int, RowColumns]] = []  # (hash, position read, index, batch): each batch's n smallest
    position = 0
    for columns in read_columns(table):
        hashes = columns.sample_hashes(seed)
        chosen = [i for i in range(columns.size) if dtype is None or columns.dtype[i] == dtype]
        chosen.sort(key=lambda i: hashes[i])  # stable: equal hashes keep the order they were read in
        kept += [(hashes[i], position + i, i, columns) for i in chosen[:n]]
        position += columns.size
    kept.sort(key=lambda item: (item[0], item[1]))
    return [columns.row(i) for _, _, i, columns in kept[:n]]


def parse_record(table: Table, record: dict) -> Row | None:
    """One parquet record as a Row, or None where the engine has no slice for it (a weight-only or int8 GEMM,
    sliding-window or beam attention, a collective other than all-reduce); malformed records raise MapperError."""
    parquet = require("pyarrow", "mapper validate")
    columns = parse_batch(table, parquet.RecordBatch.from_pylist([record]))
    return columns.row(0) if columns.size else None


def sample_key(seed: str, row: Row) -> int:
    return stable_hash(f"{seed}|{row.table}|{row.dtype}|{row.shape}|{row.source}")


def sample(rows: Iterable[Row], n: int | None, seed: str = "") -> list[Row]:
    """The `n` rows with the smallest stable hash of (seed, the row's table, kind, dtype, shape, source): the same
    rows on every run and machine, chosen streaming in O(n) memory; n None: every row, in table order."""
    if n is None:
        return list(rows)
    return heapq.nsmallest(n, rows, key=lambda r: sample_key(seed, r))


def unprofiled_systems(root=None) -> dict[str, int]:
    """Systems whose tables have no built-in profile to compare with: system -> its covered tables."""
    out: dict[str, int] = {}
    for table in tables(root):
        if table.profile is None:
            out[table.system] = out.get(table.system, 0) + 1
    return out
