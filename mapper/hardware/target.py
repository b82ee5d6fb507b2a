"""The device as one plan runs on it: the profile's rates at the plan's precision, built once per mapping.

The tiling search, the cost, the bottleneck classes and the placement read a `Target` instead of a profile
beside the dtype, element sizes, power cap, sparsity and launch cost threaded through every call. The
runtime's per-kernel launch (eager or graph replay) and how its decode attention kernel packs and splits its work
are inputs of it, not a profile edited to carry them.
`key` is what an assessment of a kernel on it depends on besides the kernel: the stage's memo keys on it.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from mapper.core.vocab import DecodeSplit
from mapper.hardware.profile import HardwareProfile

IDLE_HEADROOM_MIN_W = 1e-3  # a cap at or below idle still leaves this much power for work (no division by 0)


TRTLLM_GEN_CAPABILITIES = (10.0,)  # where TensorRT-LLM's generation attention runs trtllm-gen, not XQA (`on`)


@dataclass(frozen=True, slots=True)
class DecodeAttention:
    """How the runtime's attention kernel runs a decode step (one new token a sequence): a runtime preset's
    (`plan.runtime.PRESETS`), read by the attention tile search (`plan.attention_tiling`)."""

    packs_query_group: bool  # grouped-query attention: a K/V head's query heads fill one work item's query rows
    splits_kv: bool  # the cached keys split across units and the partial outputs combined (flash-decoding)
    page_tokens: int  # tokens per KV-cache page (paged cache; 0: one contiguous cache per sequence)
    kernel: str  # the kernel as its runtime names it, with its source
    # A runtime whose packed kernel takes query-head groups only up to a size (0: any), and runs multi-head attention
    # and larger groups on a masked multi-head attention kernel of its own (CUDA cores, one thread block per
    # sequence and query head: `plan.attention_tiling.plan_masked_mha`); False: its fused kernel runs every step
    packed_group_max: int = 0
    masked_mha: bool = False
    split_rule: DecodeSplit = DecodeSplit.FLASH  # how its decode kernel splits the cached keys across units

    def on(self, hw: HardwareProfile) -> DecodeAttention:
        """The kernel as the runtime runs it on `hw`: TensorRT-LLM hands generation attention on compute capability
        10.0 to its trtllm-gen kernels (xqaDispatcher.h/.cpp: `mUseTllmGen(getSMVersion() == 100)`, XQA's own
        runner "for SM <= 90"), which do not take XQA's multi-block count: there the keys split as FlashAttention's
        rule finds fastest."""
        if self.split_rule == DecodeSplit.XQA and hw.compute_capability in TRTLLM_GEN_CAPABILITIES:
            return replace(self, split_rule=DecodeSplit.FLASH, kernel=f"{self.kernel}; trtllm-gen on {hw.name}")
        return self

    @property
    def key(self) -> tuple[bool, bool, bool, int, bool, DecodeSplit]:
        """What a kernel's assessment reads of it: packing, splitting and how, whether the cache is paged (a paged
        kernel reads block tables: `plan.attention_tiling.decode_fixed_s`; the page size sizes the serving cache)
        and which steps run the masked multi-head attention kernel."""
        return (
            self.packs_query_group,
            self.splits_kv,
            self.page_tokens > 0,
            self.packed_group_max,
            self.masked_mha,
            self.split_rule,
        )


# A graph as exported and run as it is: each query head its own work item (repeat_kv copies K and V per query
# head), the keys split where work items are few (what `plan_attention` did before runtimes said otherwise)
UNPACKED_DECODE = DecodeAttention(
    packs_query_group=False,
    splits_kv=True,
    page_tokens=0,
    kernel="one work item per (sequence, query head): the exported graph's repeat_kv; keys split across units",
)


@dataclass(frozen=True, slots=True)
class Target:
    """A profile at one plan's precision, power cap, sparsity and launch (`device_target` builds it)."""

    hw: HardwareProfile
    dtype: str  # the plan's precision (`core.vocab.PlanDtype`)
    act_bytes: float  # an activation element at the plan's precision
    weight_bytes: float  # a weight element as stored (weight-only quantization may narrow it)
    kv_bytes: float  # a KV-cache element as stored (--kv-dtype may narrow it): fused attention's K and V reads
    power_cap_w: float | None  # None: the profile's TDP
    sparse: bool  # 2:4 structured sparsity of weight GEMMs (their sparse matrix peak)
    launch_s: float  # each kernel's fixed launch cost as the runtime launches it (eager, or graph replay)
    decode_attention: DecodeAttention  # how the runtime's decode attention kernel packs and splits its work
    causal_attention: bool  # a decoder's self-attention kernel skips the key blocks its causal mask hides
    matrix_peak_flops_per_s: float  # dense, at the dtype (fp32 without a matrix entry: the vector units')
    vector_peak_flops_per_s: float
    energy_per_flop_j: float  # at the dtype (the profile's bf16, else fp32, figure where it has none)
    headroom_w: float  # power above idle the cap leaves
    ridge_flop_per_byte: float  # FLOP per DRAM byte where the dtype's compute and DRAM take equal time

    @property
    def key(self) -> tuple:
        """What an assessment depends on besides its kernel: the profile's content and the plan's figures."""
        return (self.hw.sha256, self.dtype, self.act_bytes, self.weight_bytes, self.kv_bytes, self.power_cap_w,
                self.sparse, self.launch_s, self.decode_attention.key, self.causal_attention)  # fmt: skip

    @property
    def overlap_exponent(self) -> float:
        return self.hw.overlap_exponent

    def sparse_matrix_peak(self) -> float:
        """The 2:4 sparse matrix peak at the dtype (an error naming those the profile has, where it has none)."""
        return self.hw.sparse_matrix_peak(self.dtype)


def device_target(  # noqa: PLR0913 (the target's inputs, each named at the one call)
    hw: HardwareProfile,
    dtype: str,
    element_bytes: tuple[float, float, float],
    power_cap_w: float | None,
    sparse: bool,
    launch_s: float,
    decode_attention: DecodeAttention = UNPACKED_DECODE,
    causal_attention: bool = False,
) -> Target:
    """The profile's rates at `dtype`, read once (see `Target`); `element_bytes`: an activation's, a weight's and a
    KV-cache element's bytes (`plan.precision.Sizer.key`); `decode_attention`: the runtime's (`plan.runtime`)."""
    act_bytes, weight_bytes, kv_bytes = element_bytes
    energy = hw.energy_per_flop_j
    has_fp32_matrix = dtype != "fp32" or "fp32" in hw.matrix_peak_flops_per_s
    ridge = hw.ridge_point(dtype) if has_fp32_matrix else hw.vector_peak("fp32") / hw.dram_bandwidth_bytes_per_s
    cap = power_cap_w if power_cap_w is not None else hw.tdp_w
    return Target(
        hw=hw,
        dtype=dtype,
        act_bytes=act_bytes,
        weight_bytes=weight_bytes,
        kv_bytes=kv_bytes,
        power_cap_w=power_cap_w,
        sparse=sparse,
        launch_s=launch_s,
        decode_attention=decode_attention,
        causal_attention=causal_attention,
        matrix_peak_flops_per_s=hw.matrix_peak(dtype),
        vector_peak_flops_per_s=hw.vector_peak(dtype),
        energy_per_flop_j=energy.get(dtype) or energy.get("bf16") or energy.get("fp32") or next(iter(energy.values())),
        headroom_w=max(cap - hw.idle_w, IDLE_HEADROOM_MIN_W),
        ridge_flop_per_byte=ridge,
    )
