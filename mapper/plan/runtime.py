"""The runtime a model is served by: how its KV cache is updated and how its kernels are launched.

Part of the plan stage (pipeline.choose_runtime and apply_kv_cache, between the kernels and the devices).
`choose_runtime` resolves the plan options' `runtime`,
`kv_cache` and `launch` from the preset table; `apply_kv_cache` prices the exported past -> present
KV-cache update as the runtime does it (a whole-cache copy, or an in-place append of the new token's K
and V); `launch_cost_s` gives the per-kernel launch cost the cost stage charges.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

import numpy as np

from mapper.core.errors import MapperError
from mapper.core.graph import Graph
from mapper.core.options import PlanOptions
from mapper.core.records import record
from mapper.core.result import Kernel
from mapper.core.timeline import Kernels, positions_holding
from mapper.core.vocab import DecodeSplit, GqaDecode, KvCache, Launch, Runtime
from mapper.hardware.profile import HardwareProfile
from mapper.hardware.target import UNPACKED_DECODE, DecodeAttention
from mapper.plan.precision import Sizer

if TYPE_CHECKING:
    from mapper.core.caches import ModelCaches

# Ops an export builds `present` with: Concat(past, new) (HF/Optimum dynamic cache) or ScatterND(past, idx, new)
# (static-cache exports). Under ONNX semantics either writes a whole new tensor; a serving engine appends.
KV_UPDATE_OPS = frozenset({"Concat", "ScatterND"})
CACHE_AXIS = -2  # [batch, heads, past, head dim]: the cache grows along its past axis (a Concat says its own)


@dataclass(frozen=True, slots=True)
class RuntimePreset:
    kv_cache: str
    decode_launch: str  # a decode step (one new token per sequence)
    prefill_launch: str  # a prompt (many new tokens)
    attention_fusion: bool | None  # None: as the fusion policy says
    decode_attention: DecodeAttention  # how its decode attention kernel packs, splits and pages
    assumptions: str
    last_token_logits: bool = False  # a prompt's logits for its last token only (what sampling reads)
    causal_attention: bool = False  # a prompt's attention skips the key blocks the causal mask hides


# vLLM's default attention backend on NVIDIA GPUs (FLASH_ATTN: vllm-flash-attn, FlashAttention-2/3 with a paged
# cache). FlashAttention-2's flash_api.cpp swaps a one-token query's grouped heads into its query rows
# (`seqlenq_ngroups_swapped`: seqlen_q == 1, num_heads > num_heads_k, no ALiBi) and splits the keys where work
# items are few (`num_splits_heuristic`); the cache is paged in blocks of 16 tokens (vLLM CacheConfig.block_size).
VLLM_DECODE = DecodeAttention(
    packs_query_group=True,
    splits_kv=True,
    page_tokens=16,
    kernel="FlashAttention-2/3 (vllm-flash-attn): GQA heads swapped into query rows, split-KV, 16-token pages",
)
# TensorRT-LLM's generation-phase attention for MQA/GQA is XQA (docs/source/advanced/gpt-attention.md: the query
# heads that share a K/V head processed together), with multi-block mode splitting a long sequence across SMs (the
# same page), paged in KvCacheConfig.tokens_per_block = 32 tokens (the LLM API's default, llmapi/llm_args.py).
# Multi-head attention runs the masked MHA kernel (gpt-attention.md, "Generation Phase": one thread block per head,
# multi-block mode), as do groups past 32: XQA's support check (decoderXQAImplJIT/kernelUtils.cpp, supportConfigQGMMA
# and supportConfigHMMA) refuses head_grp_size x beam_width > 32 and, "for performance reasons", vanilla MHA at beam
# width 1. AIConfigurator's TensorRT-LLM tables agree (docs/validation.md): groups of 2-32 at XQA's speed, with an
# fp8 cache about half a bf16 one's time even over a few cached tokens (XQA's fp8 path), groups of 1 and of 48-128
# at masked MHA's (an fp8 cache no faster; 48-128 heads a group 3-10x a packed kernel's time). XQA's multi-block
# count is its own (cpp/tensorrt_llm/kernels/decoderMaskedMultiheadAttention/decoderXQAImplCommon.cpp,
# `computeMultiBlockCount`): not the split the engine would find fastest (`DecodeSplit.XQA`).
TRTLLM_DECODE = DecodeAttention(
    packs_query_group=True,
    splits_kv=True,
    page_tokens=32,
    kernel="XQA (TensorRT-LLM gpt-attention.md): a K/V head's query heads together (groups up to 32; multi-head"
    " attention and larger groups: masked MHA), multi-block mode, 32-token pages",
    packed_group_max=32,
    masked_mha=True,
    split_rule=DecodeSplit.XQA,
)


PRESETS: dict[str, RuntimePreset] = {
    Runtime.ONNXRUNTIME: RuntimePreset(
        KvCache.COPY,
        Launch.EAGER,
        Launch.EAGER,
        None,
        UNPACKED_DECODE,
        "ONNX Runtime runs the exported graph as it is: the past -> present Concat writes the whole cache each"
        " step, one launch per kernel, attention as the graph and fusion policy have it",
    ),
    Runtime.VLLM: RuntimePreset(
        KvCache.IN_PLACE,
        Launch.GRAPH,
        Launch.EAGER,
        True,
        VLLM_DECODE,
        "vLLM: paged KV cache (PagedAttention, Kwon et al. SOSP 2023: a step appends the new token's K and V);"
        " decode replayed as a captured CUDA graph, prefill eager (vLLM docs, enforce_eager=False);"
        " fused attention kernels (FlashAttention / PagedAttention); logits only at the positions sampled"
        " (LogitsProcessor prunes the hidden states to each sequence's last token before the LM head)",
        last_token_logits=True,
        causal_attention=True,
    ),
    Runtime.TENSORRT_LLM: RuntimePreset(
        KvCache.IN_PLACE,
        Launch.GRAPH,
        Launch.EAGER,
        True,
        TRTLLM_DECODE,
        "TensorRT-LLM: paged KV cache updated in place by its attention plugin; decode replayed as a CUDA graph"
        " (trtllm-bench / executor cuda_graph_mode), prefill eager; fused multi-head attention (FMHA/XQA);"
        " context logits for the last token only (gather_context_logits off by default)",
        last_token_logits=True,
        causal_attention=True,
    ),
    Runtime.TRAINING: RuntimePreset(
        KvCache.IN_PLACE,
        Launch.EAGER,
        Launch.EAGER,
        True,
        UNPACKED_DECODE,
        "a training framework's forward (Megatron-LM, PyTorch with FlashAttention-2: flash_attn_func causal=True):"
        " fused causal attention, one launch per kernel, the LM head on every token (the loss reads every logit);"
        " no KV cache is kept (the train stage drops the exported cache writes)",
        causal_attention=True,
    ),
}
SERVING_PRESET = Runtime.VLLM  # what `auto` gives a decoder on a GPU profile


@dataclass(frozen=True, slots=True)
class RuntimeChoice:
    """The resolved runtime of one mapping, with why each choice was made."""

    runtime: str
    kv_cache: str
    launch: str
    attention_fusion: bool | None
    why: str  # why this runtime (the `auto` rule, or "plan option")
    assumptions: str
    decode_attention: DecodeAttention
    last_token_logits: bool = False
    causal_attention: bool = False  # a decoder's self-attention run causal (FlashAttention's causal=True)


@record
class KvAppend:
    """One past -> present cache update of the graph: the node, the past it reads, the tensor of the new tokens and
    the present it writes."""

    node: str
    past: str
    new: str
    present: str


def kv_cache_tensors(graph: Graph) -> frozenset[str]:
    """The KV cache's own tensors: each update's past input and the present it writes (what `--kv-dtype` stores
    at its precision; the new tokens' K and V are activations until the update writes them). Found once per graph."""
    return graph.derived("kv_cache_tensors", _kv_cache_tensors)


def _kv_cache_tensors(graph: Graph) -> frozenset[str]:
    return frozenset(t for a in find_kv_appends(graph) for t in (a.past, a.present))


def find_kv_appends(graph: Graph) -> tuple[KvAppend, ...]:
    """The exported KV-cache updates: a Concat or ScatterND that takes a graph input (the past cache) and
    writes a graph output (the present cache). Found once per graph (five stages of a mapping ask)."""
    return graph.derived("kv_appends", _kv_appends)


def _kv_appends(graph: Graph) -> tuple[KvAppend, ...]:
    if graph.op_types.isdisjoint(KV_UPDATE_OPS):  # no Concat or ScatterND at all: no update to look for
        return ()
    found = []
    for node in graph.nodes:
        if node.op_type not in KV_UPDATE_OPS or not node.outputs or node.outputs[0] not in graph.output_set:
            continue
        past = node.inputs[0] if node.inputs else ""
        if past not in graph.input_set:
            continue
        new = node.inputs[-1] if node.op_type == "ScatterND" else next((i for i in node.inputs[1:] if i), "")
        if new:
            found.append(KvAppend(node.name, past, new, node.outputs[0]))
    return tuple(found)


def _new_tokens(graph: Graph, appends: tuple[KvAppend, ...]) -> int:
    """New tokens per sequence of this step (1 in a decode step), read off the cache updates."""
    first = appends[0]
    spec = graph.tensors.get(first.new)
    node = next(n for n in graph.nodes if n.name == first.node)
    axis = int(node.attr("axis", CACHE_AXIS)) if node.op_type == "Concat" else CACHE_AXIS
    if spec is None or not -len(spec.shape) <= axis < len(spec.shape):
        return 0
    return spec.shape[axis]


def choose_runtime(graph: Graph, hw: HardwareProfile, options: PlanOptions) -> RuntimeChoice:
    """The runtime preset (auto: the serving preset for a decoder on a GPU, ONNX Runtime otherwise), then
    kv_cache and launch as the preset says unless the options set them."""
    appends = find_kv_appends(graph)
    if options.runtime != Runtime.AUTO:
        name, why = options.runtime, "plan option"
    elif appends and hw.kind == "gpu":
        name = SERVING_PRESET
        why = (
            f"auto: a decoder (past -> present KV cache) on a GPU is served by a serving engine; {SERVING_PRESET}"
            " stands for them (TensorRT-LLM and SGLang make the same choices); pass --runtime onnxruntime to"
            " map the exported graph as ONNX Runtime runs it"
        )
    else:
        name = Runtime.ONNXRUNTIME
        why = "auto: " + ("not a GPU profile" if appends else "not a decoder") + ": the graph as ONNX Runtime runs it"
    preset = PRESETS[name]
    decode = bool(appends) and _new_tokens(graph, appends) == 1
    launch = (
        options.launch if options.launch != Launch.AUTO else preset.decode_launch if decode else preset.prefill_launch
    )
    kv_cache = options.kv_cache if options.kv_cache != KvCache.AUTO else preset.kv_cache
    fusion = options.attention_fusion if options.attention_fusion is not None else preset.attention_fusion
    if launch == Launch.GRAPH and hw.graph_launch_s is None:
        raise MapperError(
            f"hardware {hw.name}: launch=graph needs overhead.graph_launch_s (the per-kernel cost under graph"
            " replay) in the profile; add it with its source, or choose --launch eager"
        )
    attention = _decode_attention(preset, options).on(hw)  # the kernel the runtime runs on this device
    if kv_cache == KvCache.STATIC and attention.page_tokens:  # the same kernel over one contiguous cache a sequence
        attention = replace(attention, page_tokens=0, kernel=f"{attention.kernel}; --kv-cache static: no pages")
    causal = preset.causal_attention and bool(appends)  # a decoder's self-attention
    return RuntimeChoice(
        str(name), str(kv_cache), str(launch), fusion, why, preset.assumptions, attention, preset.last_token_logits,
        causal,
    )  # fmt: skip


def gqa_decode_mode(decode: DecodeAttention) -> GqaDecode:
    """How a decode attention runs grouped query heads, as `--gqa-decode` names it."""
    return GqaDecode.PACKED if decode.packs_query_group else GqaDecode.PER_HEAD


def _decode_attention(preset: RuntimePreset, options: PlanOptions) -> DecodeAttention:
    """The preset's decode attention, with grouped query heads packed or not as `--gqa-decode` sets it."""
    decode = preset.decode_attention
    if options.gqa_decode == GqaDecode.AUTO:
        return decode
    packed = options.gqa_decode == GqaDecode.PACKED
    if packed == decode.packs_query_group:
        return decode
    how = "a K/V head's query heads as one work item's rows" if packed else "one work item per query head"
    return replace(decode, packs_query_group=packed, kernel=f"plan option --gqa-decode {options.gqa_decode}: {how}")


def apply_kv_cache(
    graph: Graph, kernels: Sequence[Kernel], kv_cache: str, sizer: Sizer, caches: ModelCaches | None = None
) -> Sequence[Kernel]:
    """In place, a cache update kernel reads the new tokens' K (or V) and writes them into the cache: twice
    their bytes, not the whole cache copied. `copy` keeps the exported graph's traffic."""
    in_place = kv_cache in (KvCache.IN_PLACE, KvCache.STATIC)
    appends = {a.node: a for a in find_kv_appends(graph)} if in_place else {}
    if not appends:
        return kernels
    columns = Kernels.of(kernels)

    def copies() -> tuple[np.ndarray, list[float]]:
        """Each position's code (-1: no update) into the distinct bytes its updates copy."""
        # copy: past read + present (past and new) written; in place the past is neither read nor rewritten
        codes, values = np.full(len(columns), -1, dtype=np.int64), dict[float, int]()
        for j, updates in positions_holding(columns, appends.keys(), caches):
            codes[j] = values.setdefault(sum(sizer.bytes_of(appends[n].past) for n in updates), len(values))
        return codes, list(values)

    if caches is None:
        codes, values = copies()
    else:
        codes, values = caches.kv_copies(columns.nodes_key, graph.sha256, graph.dims, sizer.key, copies)
    return columns.remade(codes, lambda k, code: _in_place(k, values[code]))


def _in_place(k: Kernel, copied: float) -> Kernel:
    return k.replaced(
        dram_bytes=max(k.dram_bytes - 2 * copied, 0.0),
        note="kv-cache in place: appends the new tokens' K/V (the exported Concat would copy the cache)",
    )


def launch_cost_s(hw: HardwareProfile, launch: str) -> float:
    """Each kernel's fixed launch cost as the runtime launches it: `graph_launch_s` under graph replay (where the
    profile gives it), else `kernel_launch_s`. An input of the cost stage's target (`hardware.target`)."""
    if launch == Launch.GRAPH and hw.graph_launch_s is not None:
        return hw.graph_launch_s
    return hw.kernel_launch_s


def runtime_assumptions(choice: RuntimeChoice, hw: HardwareProfile) -> tuple[tuple[str, str, str], ...]:
    """The runtime's rows of the sheet's assumptions: each resolved choice and the preset's assumptions."""
    launch_source = (
        f"overhead.graph_launch_s = {hw.graph_launch_s} s per kernel" if choice.launch == Launch.GRAPH else
        f"overhead.kernel_launch_s = {hw.kernel_launch_s} s per kernel"
    )  # fmt: skip
    return (
        ("plan.runtime", choice.runtime, choice.why),
        ("plan.kv_cache", choice.kv_cache, "in-place: the new tokens' K/V only; copy: the exported Concat's"),
        ("plan.launch", choice.launch, launch_source),
        ("plan.attention_fusion", str(choice.attention_fusion), "runtime preset (None: as the fusion policy says)"),
        ("runtime.decode_attention", str(gqa_decode_mode(choice.decode_attention)), choice.decode_attention.kernel),
        (
            "runtime.logits",
            "last token" if choice.last_token_logits else "every token",
            "a prompt's LM head on each sequence's last token, the one sampled (plan.logits)"
            if choice.last_token_logits
            else "the graph's LM head on every token it is given",
        ),
        ("runtime.assumptions", choice.runtime, choice.assumptions),
    )
