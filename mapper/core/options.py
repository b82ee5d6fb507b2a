"""What the user chose for a plan (`PlanOptions`), each choice checked where it is built.

Every stage reads these; the CLI's flags, the dashboard's widgets and the link's text form are written from
them (`report.reproduce.PLAN_FIELDS`).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.vocab import (
    FusionPolicy,
    GqaDecode,
    KvCache,
    KvDtype,
    Launch,
    Layout,
    PlanDtype,
    Runtime,
    Sparsity,
    WeightDtype,
)


@dataclass(frozen=True, slots=True)
class PlanOptions:
    """What the user chose for the plan, validated where it is built: a choice is read into its vocabulary's
    member (`core.vocab`; "bf16" becomes PlanDtype.BF16, which still reads and writes as "bf16"), and a value
    outside it, a degree outside 1..MAX_PARALLEL_DEGREE or a cap outside (0, MAX_POWER_CAP_W) is one MapperError
    naming the option. `dtype=auto` maps at the model's released precision."""

    # Each choice is given as its vocabulary's member or that member's text ("bf16"): held as the member
    dtype: PlanDtype | str = PlanDtype.AUTO
    weight_dtype: WeightDtype | str = WeightDtype.SAME  # weight-only quantization for decoders
    fusion: FusionPolicy | str = FusionPolicy.DEFAULT
    attention_fusion: bool | None = None  # None: as the fusion policy says (on in aggressive)
    layout: Layout | str = Layout.AUTO  # the conv layout (auto: the profile's preferred)
    power_cap_w: float | None = None  # None: the profile's TDP
    tp: int = 1  # tensor-parallel degree (Megatron-style column/row GEMMs, heads split)
    pp: int = 1  # pipeline stages, balanced by time
    dp: int = 1  # data-parallel replicas
    overlap_collectives: bool = False  # hide a collective behind the next kernel's compute
    runtime: Runtime | str = Runtime.AUTO  # a preset of kv_cache and launch
    kv_cache: KvCache | str = KvCache.AUTO  # as the runtime preset says, or set
    launch: Launch | str = Launch.AUTO  # as the runtime preset says, or set
    sparsity: Sparsity | str = Sparsity.DENSE  # 2:4: structured sparsity of weight GEMMs
    ep: int = 1  # expert-parallel degree (mixture-of-experts layers)
    expert_imbalance: float = 1.0  # busiest expert's tokens over the mean (MoE load imbalance, >= 1)
    kv_dtype: KvDtype | str = KvDtype.SAME  # the KV cache's storage precision (decoders); same: the activations'
    gqa_decode: GqaDecode | str = GqaDecode.AUTO  # decode attention's grouped query heads: as the runtime preset says
    # attention data parallelism (SGLang --enable-dp-attention, TensorRT-LLM enable_attention_dp) over the ep devices
    # of a TP 1 plan: each rank runs attention on its own requests and KV cache, the experts see every rank's tokens
    attention_dp: bool = False
    # under attention DP, every expert sliced over the ep ranks (TensorRT-LLM moe_tp_size, AIConfigurator's expert TP)
    # instead of E/ep whole experts a rank: the ranks' tokens gathered to each, the partial sums reduce-scattered back
    expert_tp: bool = False

    def __post_init__(self) -> None:
        for name, vocabulary in OPTION_VOCABULARIES.items():
            value = getattr(self, name)
            if not isinstance(value, vocabulary):
                try:
                    member = vocabulary(value)
                except ValueError:
                    allowed = ", ".join(m.value for m in vocabulary)
                    raise MapperError(f"option {name}={value!r} is not one of {allowed}") from None
                object.__setattr__(self, name, member)
        cap = self.power_cap_w
        if cap is not None and not (isinstance(cap, int | float) and 0 < cap < limits.MAX_POWER_CAP_W):
            raise MapperError(
                f"option power_cap_w={cap!r} must be a positive number of watts"
                f" below {limits.limit_text('MAX_POWER_CAP_W')}"
            )
        imbalance = self.expert_imbalance
        if not (isinstance(imbalance, int | float) and 1 <= imbalance <= limits.MAX_PARALLEL_DEGREE):
            raise MapperError(
                f"option expert_imbalance={imbalance!r} must be a number from 1 (balanced experts)"
                f" to {limits.limit_text('MAX_PARALLEL_DEGREE')}"
            )
        for name in ("tp", "pp", "dp", "ep"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= limits.MAX_PARALLEL_DEGREE:
                raise MapperError(
                    f"option {name}={value!r} must be an integer from 1 to {limits.limit_text('MAX_PARALLEL_DEGREE')}"
                )
        for name in ("attention_dp", "expert_tp"):  # their degree and the model are checked where it is mapped
            if not isinstance(getattr(self, name), bool):
                raise MapperError(f"option {name}={getattr(self, name)!r} must be true or false")

    @property
    def attention_ranks(self) -> int:
        """Ranks that each run attention on requests of their own (attention_dp: the ep devices), else 1."""
        return self.ep if self.attention_dp else 1


# PlanOptions' choices and their vocabularies (`core.vocab`)
OPTION_VOCABULARIES: dict[str, type[StrEnum]] = {
    "dtype": PlanDtype,
    "fusion": FusionPolicy,
    "weight_dtype": WeightDtype,
    "layout": Layout,
    "runtime": Runtime,
    "kv_cache": KvCache,
    "launch": Launch,
    "sparsity": Sparsity,
    "kv_dtype": KvDtype,
    "gqa_decode": GqaDecode,
}
