"""AIConfigurator's rows as the harness types them: the op kinds, a table's identity, a row and a record batch's rows
as columns, and how each covered table's record batch becomes them (mapper/evidence/aiconfigurator.py finds,
streams, samples and splits the tables).

Each reader keeps the rows the engine has a slice for (not a weight-only or int8 GEMM, sliding-window or beam
attention, a collective other than all-reduce, a MoE format without a peak or a rank it cannot lay out) and types
them; a malformed record raises MapperError naming it.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Any

from mapper.core.errors import MapperError
from mapper.core.vocab import RowKind
from mapper.evidence.moe_rows import known_distribution

# AIConfigurator's system directory -> the built-in profile it is compared with; other systems: "no profile"
SYSTEM_PROFILES = {
    "a100_sxm": "a100-sxm-80gb",
    "h100_sxm": "h100-sxm",
    "h200_sxm": "h200-sxm",
    "b200_sxm": "b200",
}


# table file stem -> the op kind its rows are mapped as
TABLES = {
    "gemm_perf": RowKind.GEMM,
    "generation_attention_perf": RowKind.ATTENTION_DECODE,
    "context_attention_perf": RowKind.ATTENTION_PREFILL,
    "custom_allreduce_perf": RowKind.ALL_REDUCE,
    "nccl_perf": RowKind.ALL_REDUCE,
    "moe_perf": RowKind.MOE,
    "moe_a2a_perf": RowKind.MOE_ALL_TO_ALL,
}
# a moe_a2a_perf row's DeepEP kernels: high-throughput (prefill) or low-latency (decode), and DeepEP v2's two
A2A_BACKENDS = {"deepep_ht": "ht", "deepep_ll": "ll", "deepep_v2_context": "v2-ht", "deepep_v2_generation": "v2-ll"}
A2A_DTYPES = {"bfloat16": "bf16", "default": "bf16", "fp8": "fp8", "nvfp4": "nvfp4"}  # vLLM's default: the bf16 it
# was given (its collector passes bf16 activations and no quantization to the DeepEP kernels)
DTYPES = {"bfloat16": "bf16", "half": "fp16", "float16": "fp16", "fp8": "fp8", "fp8_block": "fp8-block"}
GEMM_DTYPES = {"bf16", "fp8", "fp8-block", "nvfp4"}  # and a MoE row's (weight-only and mxfp4 forms: no slice)
MS = 1e-3  # the tables' latency unit: milliseconds, but moe_a2a_perf's microseconds (beside its `transmit_us`)
US = 1e-6


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
    # all-reduce (devices, message elements); moe (tokens, hidden, inter, top-k, experts, moe tp, moe ep), its dtype
    # "<dtype>/<distribution>" (balanced, power_law_<alpha>); moe-all-to-all (ep, tokens a rank, hidden, top-k,
    # experts), its dtype "<dtype>/<dispatch or combine>/<DeepEP kernels>"
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
        if self.kind == RowKind.MOE:
            return "moe|" + "|".join(str(v) for v in self.shape[1:5])
        if self.kind == RowKind.MOE_ALL_TO_ALL:
            return "moe-all-to-all|" + "|".join(str(v) for v in self.shape[2:5])
        return f"{self.kind}|{self.shape[1]}"


def stable_hash(text: str) -> int:
    return int.from_bytes(hashlib.sha256(text.encode()).digest()[:8], "big")


@dataclass(frozen=True, slots=True)
class RowColumns:
    """A record batch's mapped rows as columns (every row of one table is one kind)."""

    table: Table
    kind: str
    dtype: list[str]
    shape: list[list[int]]  # a row's shape fields (Row.shape)
    measured_s: list[float]
    source: list[str]
    timing: list[str]

    @property
    def size(self) -> int:
        return len(self.dtype)

    def row(self, i: int) -> Row:
        t = self.table
        return Row(t.label, t.system, self.kind, self.dtype[i], tuple(self.shape[i]), self.measured_s[i],
                   self.source[i], self.timing[i])  # fmt: skip

    def rows(self, indices: Iterable[int]) -> Iterator[Row]:
        return (self.row(i) for i in indices)

    def sample_hashes(self, seed: str) -> list[int]:
        """Each row's `sample_key`, from the columns."""
        head = f"{seed}|{self.table.label}|"
        return [
            stable_hash(f"{head}{dtype}|{tuple(shape)}|{source}")
            for dtype, shape, source in zip(self.dtype, self.shape, self.source, strict=True)
        ]


def parse_batch(table: Table, batch) -> RowColumns:
    """A record batch's rows the engine has a slice for (not a weight-only or int8 GEMM, sliding-window or beam
    attention, a collective other than all-reduce), typed; a malformed record raises MapperError naming it."""
    kind = TABLES[table.name]
    try:
        fields = _Fields(batch)
        if kind == RowKind.GEMM:
            return _gemm(table, fields)
        if kind in (RowKind.ATTENTION_DECODE, RowKind.ATTENTION_PREFILL):
            return _attention(table, kind, fields)
        if kind == RowKind.MOE:
            return _moe(table, fields)
        if kind == RowKind.MOE_ALL_TO_ALL:
            return _moe_all_to_all(table, fields)
        return _all_reduce(table, fields)
    except _Unreadable as exc:
        record = str(batch.slice(exc.index, 1).to_pylist()[0]) if exc.index is not None else "?"
        raise MapperError(f"{table.label}: record {record[:80]!r} unreadable ({exc.why:.60})") from None


class _Unreadable(Exception):
    def __init__(self, why: str, index: int | None = None):
        super().__init__(why)
        self.why, self.index = why, index


class _Fields:
    """A record batch's columns as Python lists; a missing or mistyped one raises _Unreadable naming a record."""

    def __init__(self, batch):
        self.batch = batch
        self.names = set(batch.schema.names)

    def raw(self, name: str, required: bool = True) -> list:
        if name in self.names:
            return self.batch.column(name).to_pylist()
        if required:
            raise _Unreadable(f"no column {name!r}", 0)
        return [None] * self.batch.num_rows

    def ints(self, name: str) -> list[int]:
        values = self.raw(name)
        try:
            return [int(v) for v in values]
        except (TypeError, ValueError) as exc:
            raise _Unreadable(str(exc), next(i for i, v in enumerate(values) if not _is_int(v))) from None

    def latency_s(self, unit_s: float = MS) -> list[float]:
        values = self.raw("latency")
        try:
            return [float(v) * unit_s for v in values]
        except (TypeError, ValueError) as exc:
            raise _Unreadable(str(exc), next(i for i, v in enumerate(values) if not _is_int(v))) from None

    def source(self) -> list[str]:
        return [str(v) for v in self.raw("kernel_source")] if "kernel_source" in self.names else [""] * len(self)

    def __len__(self) -> int:
        return self.batch.num_rows


def _is_int(value) -> bool:
    try:
        int(float(value))
    except (TypeError, ValueError, OverflowError):
        return False
    return True


def _columns(table: Table, keep: list[int], dtype, shape, measured, source, timing=None) -> RowColumns:
    """The kept rows' columns; a kept row's non-positive latency or size raises _Unreadable."""
    for i in keep:
        if not measured[i] > 0 or min(shape[i]) < 1:
            raise _Unreadable("a non-positive latency or size", i)
    return RowColumns(
        table, TABLES[table.name], [dtype[i] for i in keep], [shape[i] for i in keep], [measured[i] for i in keep],
        [source[i] for i in keep], ["graph"] * len(keep) if timing is None else [timing[i] for i in keep],
    )  # fmt: skip


def _gemm(table: Table, f: _Fields) -> RowColumns:
    dtypes = [DTYPES.get(d, d) for d in f.raw("gemm_dtype")]
    keep = [i for i, d in enumerate(dtypes) if d in GEMM_DTYPES]
    shape = [list(s) for s in zip(f.ints("m"), f.ints("n"), f.ints("k"), strict=True)]
    return _columns(table, keep, dtypes, shape, f.latency_s(), f.source())


def _attention(table: Table, kind: str, f: _Fields) -> RowColumns:
    window = [w or 0 for w in f.raw("window_size", required=False)]
    beam = [b or 1 for b in f.raw("beam_width", required=False)]
    heads, kv, step = f.ints("num_heads"), f.ints("num_key_value_heads"), f.ints("step")
    prefill = kind == RowKind.ATTENTION_PREFILL
    keep = [
        i
        for i in range(len(f))
        if not int(window[i]) and int(beam[i]) == 1 and (kv[i] < 1 or heads[i] % kv[i] == 0)
        and not (prefill and step[i])
    ]  # fmt: skip
    attn, cache = f.raw("attn_dtype"), f.raw("kv_cache_dtype")
    dtypes = [""] * len(f)
    for i in keep:
        if attn[i] not in DTYPES or cache[i] not in DTYPES:
            raise _Unreadable(f"unknown dtype {attn[i]!r} / {cache[i]!r}", i)
        dtype = DTYPES[attn[i]]
        dtypes[i] = dtype + "/kv-fp8" if DTYPES[cache[i]] == "fp8" and dtype != "fp8" else dtype
    # decode: one query a sequence over the `step` cached tokens and its own; prefill: isl tokens, causal
    length = f.ints("isl") if prefill else [s + 1 for s in step]
    shape = [list(s) for s in zip(f.ints("batch_size"), heads, kv, length, f.ints("head_dim"), strict=True)]
    return _columns(table, keep, dtypes, shape, f.latency_s(), f.source())


def _all_reduce(table: Table, f: _Fields) -> RowColumns:
    op = f.raw("op_name")
    # the custom all-reduce tables name their dtype `allreduce_dtype`, nccl-tests' `nccl_dtype`
    named = [a or n for a, n in zip(f.raw("allreduce_dtype", False), f.raw("nccl_dtype", False), strict=True)]
    dtypes = [DTYPES.get(str(d), "") for d in named]
    keep = [i for i in range(len(f)) if op[i] == "all_reduce" and dtypes[i] in ("bf16", "fp16")]
    # nccl-tests launch eagerly; a custom all-reduce row says how it ran (vLLM's and SGLang's collectors time
    # both, kernel_source `..._eager` or `..._graph`; TensorRT-LLM's replays a graph)
    source = f.source()
    eager = table.name == "nccl_perf"
    timing = ["eager" if eager or s.lower().endswith("eager") else "graph" for s in source]
    shape = [list(s) for s in zip(f.ints("num_gpus"), f.ints("message_size"), strict=True)]
    return _columns(table, keep, dtypes, shape, f.latency_s(), source, timing)


def _moe(table: Table, f: _Fields) -> RowColumns:
    """A moe_perf batch: rows of a known distribution whose rank can be laid out (E / moe ep, inter / moe tp)."""
    pairs = list(zip(f.raw("moe_dtype"), f.raw("distribution"), strict=True))
    label = {(d, n): f"{DTYPES.get(d, d)}/{n}" for d, n in set(pairs)}  # a few distinct pairs a table
    mapped = {p for p, text in label.items() if text.split("/")[0] in GEMM_DTYPES and known_distribution(str(p[1]))}
    names = ("num_tokens", "hidden_size", "inter_size", "topk", "num_experts", "moe_tp_size", "moe_ep_size")
    shape = [list(s) for s in zip(*(f.ints(n) for n in names), strict=True)]
    keep = [
        i for i, (p, (_, _, inter, k, e, tp, ep)) in enumerate(zip(pairs, shape, strict=True))
        if p in mapped and tp >= 1 and ep >= 1 and e % ep == 0 and inter % tp == 0 and k <= e
    ]  # fmt: skip
    return _columns(table, keep, [label[p] for p in pairs], shape, f.latency_s(), f.source())


def _moe_all_to_all(table: Table, f: _Fields) -> RowColumns:
    """A moe_a2a_perf batch: one node's DeepEP dispatch or combine rows, dtype "<dtype>/<phase>/<kernels>"."""
    named = zip(f.raw("comm_dtype"), f.raw("phase"), f.raw("comm_backend"), strict=True)
    dtypes = [
        f"{A2A_DTYPES.get(d, '?')}/{p}/{A2A_BACKENDS.get(str(b).removeprefix('trtllm_'), '?')}" for d, p, b in named
    ]
    names = ("ep_size", "num_tokens", "hidden_size", "topk", "num_experts")
    shape = [list(s) for s in zip(*(f.ints(n) for n in names), strict=True)]
    nodes = f.ints("node_num")
    keep = [
        i for i, d in enumerate(dtypes) if "?" not in d and d.split("/")[1] in ("dispatch", "combine") and nodes[i] == 1
    ]
    return _columns(table, keep, dtypes, shape, f.latency_s(US), f.source())
