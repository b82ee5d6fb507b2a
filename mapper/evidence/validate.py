"""`mapper validate`: the engine against measured truth, each measured op mapped as a one-op slice.

Sources: AIConfigurator's tables (mapper/evidence/aiconfigurator.py; GEMM, decode and prefill attention,
all-reduce, MoE on A100, H100, H200 and B200), this project's H200 kernels (data/evidence/h200, `compare_kernel_csv`)
and Vidur's A100 Llama-2 ops (data/evidence/vidur_a100, mapper/evidence/vidur.py). Each row is mapped with the
plan and launch it ran: CUDA-graph rows at the profile's graph launch cost, fused attention as FlashAttention.
An fp8 (or fp8-block, nvfp4) GEMM row timed the module, so it is mapped as two slices: the activation's dynamic
quantize in bf16 (a scale pass and a scaling pass) and the GEMM at the row's precision. A decode-attention row timed
the framework's op, so its other kernels are slices of their own (`decode_companions`); an all-reduce row runs its
own algorithm (a framework's custom one-shot / two-shot kernel, or NCCL's) and launch (graph, an eager call from
Python, nccl-tests' loop); a MoE row is one rank's layer (mapper/evidence/moe_rows.py). Nothing is fitted here:
rows are split into fit and held-back sets by whole shapes (aiconfigurator.SPLIT_RULE) and reported apart; the
profile values fitted to the fit split say so in their sources.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from mapper.core.vocab import Collective
from mapper.cost.collectives import collective_time
from mapper.evidence import aiconfigurator as aic
from mapper.evidence.aic_records import RowKind
from mapper.evidence.candidates import profile_named
from mapper.evidence.gemm_rows import QUANTIZED, gemm_row_s
from mapper.evidence.microbench import compare_kernel_csv
from mapper.evidence.moe_rows import all_to_all_time_s, moe_time_s, parse_distribution
from mapper.evidence.slices import slice_s

EVIDENCE = Path(__file__).resolve().parents[2] / "data" / "evidence"
PROJECT_CSVS = ("kernels.csv", "kernels_extra.csv")  # data/evidence/h200: bench/gpu_kernels.py on one H200
RUNTIMES = {"trtllm": "tensorrt-llm", "vllm": "vllm", "sglang": "vllm"}  # AIConfigurator framework -> preset
# The first SGLang release whose tables show one kernel writing a decode step's K and V (0.5.14: its op takes 0.82x
# vLLM 0.24's for the same shape at <= 8 sequences and < 64 cached tokens, H100 and H200; 0.5.10 on A100 takes 1.085x
# vLLM 0.14's, as two copies would); the JIT `store_cache` kernel arrived between the two
SGLANG_STORE_KERNEL_FROM = (0, 5, 14)
BF16_BYTES = 2
GQA_RANK = 5  # a project GQA decode row's shape: batch x query heads x KV heads x past x head dim
P90 = 0.9
FLOP_BANDS = ((1e8, "<1e8 FLOP"), (1e10, "1e8-1e10"), (1e12, "1e10-1e12"), (float("inf"), ">=1e12 FLOP"))
BYTE_BANDS = ((2**16, "<64 KiB"), (2**24, "64 KiB-16 MiB"), (float("inf"), ">=16 MiB"))


@dataclass(frozen=True, slots=True)
class Scored:
    """One measured row and the engine's prediction for it."""

    source: str  # aiconfigurator, project, vidur
    table: str
    device: str  # the profile it was mapped on
    kind: str
    dtype: str
    shape: tuple[int, ...]
    band: str
    held_back: bool
    measured_s: float
    predicted_s: float

    @property
    def error(self) -> float:
        return self.predicted_s / self.measured_s - 1.0

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "table": self.table,
            "device": self.device,
            "kind": self.kind,
            "dtype": self.dtype,
            "shape": list(self.shape),
            "band": self.band,
            "split": "held-back" if self.held_back else "fit",
            "measured_s": self.measured_s,
            "predicted_s": self.predicted_s,
            "error": self.error,
        }


def predict(row: aic.Row, profile: str) -> float | None:
    """The engine's time for one AIConfigurator row on `profile`; None where the profile cannot run it (an
    all-reduce over more devices than its node, a precision it has no peak for)."""
    from mapper.core.errors import MapperError

    try:
        return _predict(row, profile)
    except MapperError:
        return None


def _predict(row: aic.Row, profile: str) -> float | None:
    if row.kind == RowKind.GEMM:  # the module as the collector ran it (`gemm_rows`)
        m, n, k = row.shape
        return gemm_row_s(row.table, row.dtype, (m, n, k), profile)
    b, h, kv, length, d = row.shape if row.kind.startswith("attention") else (0, 0, 0, 0, 0)
    plan_dtype = "fp8" if "fp8" in row.dtype else "bf16"
    runtime = RUNTIMES.get(row.table.split("/")[2], "vllm")  # the preset's decode attention: GQA packed, paged
    if row.kind == RowKind.MOE:  # one rank's MoE module; a quantized one quantizes its tokens' activations first
        dtype, distribution = row.dtype.split("/", 1)
        tokens, hidden = row.shape[:2]
        quantize = slice_s(profile, "quantize", (tokens, hidden), "bf16") if dtype in QUANTIZED else 0.0
        alpha = parse_distribution(distribution)
        return quantize + moe_time_s(row.shape, QUANTIZED.get(dtype, "bf16"), alpha, profile, runtime)
    if row.kind == RowKind.MOE_ALL_TO_ALL:
        return all_to_all_time_s(row.shape, row.dtype.split("/")[0], profile)
    if row.kind == RowKind.ATTENTION_DECODE:
        framework = row.table.split("/")[2]
        version = row.table.split("/")[3]
        companions = sum(
            slice_s(profile, kind, shape, "bf16")
            for kind, shape in decode_companions(framework, row.shape, row.dtype, version)
        )
        if h == kv:
            return companions + slice_s(profile, "attention-decode", (b, h, length, d), plan_dtype, runtime)
        return companions + slice_s(profile, "attention-decode-gqa", (b, h, kv, length, d), plan_dtype, runtime)
    if row.kind == RowKind.ATTENTION_PREFILL:  # K and V at the query heads: the slice has no GQA prefill form
        return slice_s(profile, "attention-fused", (b, h, length, d), plan_dtype, runtime)
    devices, elements = row.shape
    hw = profile_named(profile)
    if devices > hw.interconnect.max_devices:
        return None
    custom = row.table.endswith("custom_allreduce_perf")  # the framework's own kernel; nccl_perf: NCCL's
    message = elements * BF16_BYTES
    wire = collective_time(
        Collective.ALL_REDUCE, devices, message, hw.interconnect, custom, hw.all_reduce_efficiency
    ).time_s
    if row.timing == "graph" and hw.graph_launch_s is not None:
        return wire + hw.graph_launch_s
    if custom:  # one eager call of the framework's op from Python: the GPU waits on the host's dispatch
        return max(hw.host_op_s, wire + hw.kernel_launch_s)
    return wire + hw.kernel_launch_s  # nccl-tests: a C++ loop of back-to-back launches


def decode_companions(
    framework: str, shape: tuple[int, ...], dtype: str, version: str = ""
) -> tuple[tuple[str, tuple[int, int]], ...]:
    """The kernels a framework's decode attention op runs besides the attention kernel (what the row timed; the
    collectors call the framework's attention forward on the step's new Q, K and V), each a one-op bf16 slice:

    - TensorRT-LLM (`collector/trtllm/collect_attn.py`: `attn.forward(qkv, ...)` of the TRTLLM backend): one QKV
      preprocessing kernel before XQA, RoPE on Q and K and the new K and V written to the paged cache
      (`invokeQKVPreprocessing`), a pass over the token's QKV;
    - vLLM (`collector/vllm/collect_attn.py`: `FlashAttentionImpl.forward`): `reshape_and_cache_flash` writes the
      new K and V to the cache; with an fp8 cache the query is quantized to fp8 first (`scaled_fp8_quant`);
    - SGLang (`MHATokenToKVPool.set_kv_buffer`, `mem_cache/memory_pool.py`): from `SGLANG_STORE_KERNEL_FROM` one
      kernel writes the new K and V rows (the JIT `store_cache`, `jit_kernel/kvcache.py`, where K and V rows are
      as wide); before it two index copies; with an fp8 cache K, V and the query are each cast to fp8 first.
    """
    b, h, kv, _, d = shape
    fp8 = "fp8" in dtype
    if framework == "trtllm":
        return (("add", (b, (h + 2 * kv) * d)),)
    if framework == "vllm":
        return (("add", (b, 2 * kv * d)),) + ((("quantize", (b, h * d)),) if fp8 else ())
    casts = (("quantize", (b, kv * d)), ("quantize", (b, kv * d)), ("quantize", (b, h * d))) if fp8 else ()
    if _version(version) >= SGLANG_STORE_KERNEL_FROM:
        return (("add", (b, 2 * kv * d)),) + casts
    return (("add", (b, kv * d)), ("add", (b, kv * d))) + casts


def _version(text: str) -> tuple[int, ...]:
    """A release's number as a tuple ("0.5.14" -> (0, 5, 14); "1.3.0rc20" -> (1, 3, 0)); () where none is read."""
    return tuple(int(part) for part in re.findall(r"\d+", text)[:3])


def work(kind: str, shape: tuple[int, ...]) -> float:
    """FLOPs of a row's op (bytes for an all-reduce): what its size band is read from, never its time."""
    if kind == RowKind.GEMM:
        m, n, k = shape
        return 2.0 * m * n * k
    if kind == RowKind.ATTENTION_DECODE:
        b, h, _, s, d = shape
        return 4.0 * b * h * s * d
    if kind == RowKind.ATTENTION_PREFILL:
        b, h, _, s, d = shape
        return 4.0 * b * h * s * s * d
    if kind == RowKind.ALL_REDUCE:
        return float(shape[1] * BF16_BYTES)
    if kind == RowKind.MOE_ALL_TO_ALL:  # a rank's routed rows, T x k x hidden, at bf16
        _, tokens, hidden, k, _ = shape
        return float(tokens * k * hidden * BF16_BYTES)
    if kind == RowKind.MOE:  # the rank's expert GEMMs: T k rows of three hidden x inter / tp matrices, E / ep experts
        tokens, hidden, inter, k, _, tp, ep = shape
        return 6.0 * tokens * k * hidden * inter / (tp * ep)
    return 0.0


def band(kind: str, amount: float) -> str:
    edges = BYTE_BANDS if kind in (RowKind.ALL_REDUCE, RowKind.MOE_ALL_TO_ALL) else FLOP_BANDS
    return next(label for edge, label in edges if amount < edge)


def score_aiconfigurator(rows, tables_seen: list[dict] | None = None) -> list[Scored]:
    """Predicted against measured for AIConfigurator rows (aiconfigurator.Row) on their systems' profiles."""
    out = []
    for row in rows:
        profile = aic.SYSTEM_PROFILES[row.system]
        predicted = predict(row, profile)
        if predicted is None:
            continue
        amount = work(row.kind, row.shape)
        out.append(
            Scored(
                "aiconfigurator", row.table, profile, row.kind, row.dtype, row.shape,
                band(row.kind, amount), aic.held_back(row), row.measured_s, predicted,
            )
        )  # fmt: skip
    return out


def aiconfigurator_rows(device: str | None, kind: str | None, per_table: int | None, seed: str = "") -> tuple:
    """(rows, table notes): up to `per_table` rows of each covered table with a profile (None: every row),
    filtered to the profile `device` and the op `kind` where given."""
    chosen, notes = [], []
    for table in aic.tables():
        if table.profile is None or (device and table.profile != device):
            continue
        if kind and aic.TABLES[table.name] != kind:
            continue
        rows = aic.sample_table(table, per_table, seed)
        notes.append(
            {"table": table.label, "profile": table.profile, "rows": aic.table_rows(table), "sampled": len(rows)}
        )
        chosen += rows
    return chosen, notes


PROJECT_KINDS = {"attention-fused": RowKind.ATTENTION_PREFILL, "attention-decode-gqa": RowKind.ATTENTION_DECODE}
PROJECT_DTYPES = {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32", "float8_e4m3fn": "fp8"}


def score_project(device: str | None, kind: str | None) -> list[Scored]:
    """This project's H200 kernel rows (graph replay), on h200-sxm; the split by the same whole-shape rule."""
    if device not in (None, "h200-sxm"):
        return []
    out = []
    for name in PROJECT_CSVS:
        path = EVIDENCE / "h200" / name
        if not path.is_file():
            continue
        for r in compare_kernel_csv(path, profile_named("h200-sxm"), timing="graph"):
            row_kind = PROJECT_KINDS.get(r["kind"], r["kind"])
            if (kind and row_kind != kind) or r["error"] is None:
                continue
            shape = tuple(int(x) for x in r["shape"].split("x"))
            flops = r["predicted_tflops_per_s"] * r["predicted_s"] * 1e12
            held = _held_back_key(_project_key(row_kind, shape))
            dtype = PROJECT_DTYPES.get(r["dtype"], r["dtype"])
            where = f"data/evidence/h200/{name}"
            out.append(
                Scored(
                    "project", where, "h200-sxm", row_kind, dtype, shape, band(RowKind.GEMM, flops), held,
                    r["measured_s"], r["predicted_s"],
                )
            )  # fmt: skip
    return out


def _project_key(kind: str, shape: tuple[int, ...]) -> str:
    """A project row's split key under aiconfigurator.SPLIT_RULE (bf16 KV; norms and adds by their width)."""
    if kind == RowKind.GEMM:
        return f"gemm|{shape[1]}|{shape[2]}"
    if kind.startswith("attention"):
        heads, kv_heads = (shape[1], shape[2]) if len(shape) == GQA_RANK else (shape[1], shape[1])
        return f"attention|{heads}|{kv_heads}|{shape[-1]}|bf16"
    return f"{kind}|{shape[-1]}"


def _held_back_key(key: str) -> bool:
    return aic.stable_hash(f"{aic.SPLIT_SALT}|{key}") % aic.HELD_BACK_ONE_IN == 0


def score_vidur(device: str | None, kind: str | None, per_table: int | None, seed: str = "") -> list[Scored]:
    """Vidur's A100 Llama-2 GEMMs (the other ops are Vidur-specific: tests/test_vidur.py) and all-reduces."""
    from mapper.evidence import vidur

    if device not in (None, vidur.PROFILE) or not vidur.DATA.is_dir():
        return []
    out = []
    if kind in (None, RowKind.GEMM):
        gemms = [r for r in vidur.measured_rows() if r[1] in vidur.GROUPS["gemm"]]
        for name, op, tokens, tp, measured, shape in _sampled(gemms, per_table, seed):
            hidden, heads, kv_heads, ffn = shape
            k, n = vidur.gemm_dims(op, hidden, heads, kv_heads, ffn, tp)
            predicted = vidur.predicted_s(op, shape, tokens, tp)
            out.append(
                Scored(
                    "vidur", f"data/evidence/vidur_a100/llama2_{name}_mlp.csv", vidur.PROFILE, "gemm", "fp16",
                    (tokens, n, k), band(RowKind.GEMM, 2.0 * tokens * n * k), _held_back_key(f"gemm|{n}|{k}"),
                    measured, predicted,
                )
            )  # fmt: skip
    if kind in (None, RowKind.ALL_REDUCE):
        for devices, size, measured, predicted in _sampled(vidur.all_reduce_rows(), per_table, seed):
            out.append(
                Scored(
                    "vidur", "data/evidence/vidur_a100/all_reduce_dgx.csv", vidur.PROFILE, "all-reduce", "fp16",
                    (devices, size), band(RowKind.ALL_REDUCE, size * BF16_BYTES), _held_back_key(f"all-reduce|{size}"),
                    measured, predicted,
                )
            )  # fmt: skip
    return out


def _sampled(rows: list[tuple], n: int | None, seed: str) -> list[tuple]:
    """The n rows with the smallest stable hash (aiconfigurator.sample's rule, for plain tuples)."""
    if n is None:
        return rows
    return sorted(rows, key=lambda r: aic.stable_hash(f"{seed}|{r[:4]}"))[:n]


def summarize(scored: list[Scored], by: tuple[str, ...] = ("source", "device", "kind", "dtype", "band")) -> list[dict]:
    """Error (predicted / measured - 1) grouped by `by`, the fit and held-back splits apart: n, median |error|,
    p90 |error|, worst (the signed error of largest size) and bias (the median signed error)."""
    groups: dict[tuple, dict[str, list[float]]] = {}
    for s in scored:
        key = tuple(getattr(s, field) for field in by)
        groups.setdefault(key, {"fit": [], "held-back": []})["held-back" if s.held_back else "fit"].append(s.error)
    out = []
    for key in sorted(groups, key=_group_order):
        row: dict = dict(zip(by, key, strict=True))
        for split, errors in groups[key].items():
            row[split] = error_stats(errors)
        out.append(row)
    return out


def _group_order(key: tuple) -> tuple:
    bands = [label for _, label in FLOP_BANDS + BYTE_BANDS]
    return tuple(bands.index(k) if k in bands else k for k in key)


def error_stats(errors: list[float]) -> dict:
    if not errors:
        return {"n": 0}
    size = sorted(abs(e) for e in errors)
    signed = sorted(errors)
    return {
        "n": len(errors),
        "median_abs": _median(size),
        "p90_abs": size[min(len(size) - 1, int(P90 * len(size)))],
        "worst": max(errors, key=abs),
        "bias": _median(signed),
    }


def _median(values: list[float]) -> float:
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


SOURCES = ("aiconfigurator", "project", "vidur")


def run(
    device: str | None = None, kind: str | None = None, per_table: int | None = 100, sources=SOURCES, seed: str = ""
) -> tuple[list[Scored], list[dict]]:
    """(scored rows, the AIConfigurator tables read with their row counts): up to `per_table` rows a table
    (None: every row), on the profile `device` and of op `kind` where given."""
    scored: list[Scored] = []
    notes: list[dict] = []
    if "aiconfigurator" in sources:
        rows, notes = aiconfigurator_rows(device, kind, per_table, seed)
        scored += score_aiconfigurator(rows)
    if "project" in sources:
        scored += score_project(device, kind)
    if "vidur" in sources:
        scored += score_vidur(device, kind, per_table, seed)
    return scored, notes
