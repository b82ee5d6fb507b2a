"""What a training run is asked to be (`TrainOptions`): its parallel degrees, batch, sequence, recompute, ZeRO
stage and precision, each checked where it is built; a bad combination is one MapperError naming it.

The train stage (`train.step`) reads these; the CLI's `mapper train` flags are written from them.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.core.vocab import PipelineSchedule, PlanDtype, Recompute, values

MAX_ZERO_STAGE = 3  # ZeRO-3 (= FSDP's full sharding): parameters, gradients and optimizer state over DP
# the step's GEMM precision: 16-bit, fp8 with per-tensor scales, or MXFP8's blockwise scales (a profile with its peak)
TRAIN_PRECISIONS = (PlanDtype.AUTO, PlanDtype.BF16, PlanDtype.FP16, PlanDtype.FP8, PlanDtype.MXFP8)
TRAIN_DTYPES = tuple(str(d) for d in TRAIN_PRECISIONS)  # the CLI's and the page's choices
RECOMPUTE_POLICIES = values(Recompute)
PIPELINE_SCHEDULES = values(PipelineSchedule)


@dataclass(frozen=True, slots=True)
class TrainOptions:
    """A training step's plan. Devices = tp x pp x dp x cp (EP lays experts over the DP x CP ranks, as Megatron
    does); the global batch is micro_batch x dp x accumulation steps (micro-batches per step, m)."""

    tp: int = 1  # tensor parallel, with sequence parallelism (Korthikanti et al. 2022 sec. 4.2.2)
    pp: int = 1  # pipeline stages
    dp: int = 1  # data-parallel replicas
    cp: int = 1  # context parallel: the sequence split, attention as a ring (K/V passed cp - 1 times)
    ep: int = 1  # expert parallel (MoE), over the data-parallel ranks
    vp: int = 1  # virtual stages a device (interleaved 1F1B when > 1)
    zero: int = 1  # ZeRO stage over DP: 0 none, 1 optimizer state, 2 + gradients, 3 + parameters (FSDP)
    micro_batch: int = 1  # sequences a micro-batch
    global_batch: int = 0  # sequences a step (0: micro_batch x dp, one micro-batch)
    seq: int = 2048  # tokens a sequence
    recompute: Recompute | str = Recompute.SELECTIVE
    dtype: PlanDtype | str = PlanDtype.AUTO  # auto: the model's released precision
    schedule: PipelineSchedule | str = PipelineSchedule.ONE_F_ONE_B
    sequence_parallel: bool = True  # with TP: norms and dropouts on 1/tp of the tokens, all-reduce -> RS + AG
    offload_optimizer: bool = False  # fp32 master weights and moments in host memory, the update on the CPU
    overlap_grad_reduce: bool = True  # DP gradient buckets reduced during the backward (Megatron, PyTorch DDP)
    dropout: bool = False  # the model trains with dropout (GPT-3 style): its masks are activations too
    fused_attention: bool = (
        True  # FlashAttention; False: scores, softmax and values as separate kernels (Megatron 2022)
    )

    def __post_init__(self) -> None:
        for name, vocabulary in (("recompute", Recompute), ("dtype", PlanDtype), ("schedule", PipelineSchedule)):
            _member(self, name, vocabulary)
        if self.dtype not in TRAIN_PRECISIONS:
            raise MapperError(
                f"option dtype={self.dtype} is not a training precision; choose one of bf16, fp16, fp8, mxfp8"
            )
        for name in ("tp", "pp", "dp", "cp", "ep", "vp", "micro_batch", "seq"):
            _degree(name, getattr(self, name))
        if not isinstance(self.zero, int) or not 0 <= self.zero <= MAX_ZERO_STAGE:
            raise MapperError(f"option zero={self.zero!r} must be a ZeRO stage from 0 to {MAX_ZERO_STAGE}")
        gb = self.global_batch
        if not isinstance(gb, int) or isinstance(gb, bool) or gb < 0:
            raise MapperError(f"option global_batch={gb!r} must be a whole number of sequences")
        if gb and gb % (self.micro_batch * self.dp):
            raise MapperError(
                f"global batch {gb} is not a whole number of micro-batches of {self.micro_batch} on each of"
                f" {self.dp} data-parallel replicas; choose a global batch divisible by {self.micro_batch * self.dp}"
            )
        if self.seq % self.cp:
            raise MapperError(f"sequence {self.seq} does not split over cp={self.cp}; choose a multiple of {self.cp}")
        if self.schedule == PipelineSchedule.INTERLEAVED and self.vp == 1:
            raise MapperError("the interleaved schedule runs virtual stages: set --vp above 1 (or --schedule 1f1b)")
        if self.vp > 1 and self.pp == 1:
            raise MapperError(f"vp={self.vp} virtual stages need pipeline stages; set --pp above 1 or --vp 1")
        if self.vp > 1 and self.micro_batches % self.pp:
            raise MapperError(
                f"the interleaved schedule needs micro-batches ({self.micro_batches}) divisible by pp={self.pp}"
            )
        if self.ep > 1 and (self.dp * self.cp) % self.ep:
            raise MapperError(f"ep={self.ep} must divide dp x cp = {self.dp * self.cp} (experts over those ranks)")

    @property
    def devices(self) -> int:
        return self.tp * self.pp * self.dp * self.cp

    @property
    def micro_batches(self) -> int:
        """m: micro-batches each replica runs a step (the gradient accumulation steps)."""
        return max(1, self.global_batch // (self.micro_batch * self.dp)) if self.global_batch else 1

    @property
    def sequences(self) -> int:
        """The global batch in sequences."""
        return self.micro_batch * self.dp * self.micro_batches

    @property
    def pipeline(self) -> PipelineSchedule:
        """The schedule run: interleaved where there are virtual stages."""
        return PipelineSchedule.INTERLEAVED if self.vp > 1 else PipelineSchedule(self.schedule)


def _member(options: TrainOptions, name: str, vocabulary: type[StrEnum]) -> None:
    value = getattr(options, name)
    if isinstance(value, vocabulary):
        return
    try:
        object.__setattr__(options, name, vocabulary(value))
    except ValueError:
        allowed = ", ".join(m.value for m in vocabulary)
        raise MapperError(f"option {name}={value!r} is not one of {allowed}") from None


def _degree(name: str, value: object) -> None:
    top = {"micro_batch": limits.MAX_BATCH, "seq": limits.MAX_TOKENS}.get(name, limits.MAX_PARALLEL_DEGREE)
    if not isinstance(value, int) or isinstance(value, bool) or not 1 <= value <= top:
        raise MapperError(f"option {name}={value!r} must be an integer from 1 to {top:,}")


def check_devices(options: TrainOptions, devices: int | None) -> None:
    """A device count given beside the degrees must be their product."""
    if devices is not None and devices != options.devices:
        raise MapperError(
            f"--devices {devices} is not tp x pp x dp x cp = {options.tp} x {options.pp} x {options.dp} x"
            f" {options.cp} = {options.devices}; change a degree or the device count"
        )
