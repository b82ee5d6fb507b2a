"""The engine's vocabularies: engines, kernel rules, plan dtypes and plan choices.

Each is a StrEnum whose values are the strings the sheet, `--json` and the CSV have always carried, so a
member reads and writes as its value. The CLI's choices and the dashboard's widgets are built from these
(`mapper.PLAN_DTYPES`, `WEIGHT_DTYPES`, `FUSION_POLICIES`, `LAYOUTS`), never retyped. Bottleneck classes
and owners are `mapper.core.classes`.
"""

from __future__ import annotations

from enum import StrEnum


class Engine(StrEnum):
    """The unit a kernel runs on."""

    MATRIX = "matrix"  # tensor cores / systolic arrays
    VECTOR = "vector"  # SIMD lanes: elementwise, reductions, low-reuse GEMMs
    SFU = "sfu"  # special-function units (exp, tanh, erf, rsqrt) where they bound the kernel
    HOST = "host"  # control flow and unmodeled ops, with their transfers
    INTERCONNECT = "interconnect"  # collectives and pipeline sends


class KernelRule(StrEnum):
    """Why a kernel exists: the fusion rule that grouped its nodes, or the stage that inserted it."""

    FLASH_ATTENTION = "flash-attention"
    NORM = "norm"
    GEMM_EPILOGUE = "gemm-epilogue"
    ELEMENTWISE_CHAIN = "elementwise-chain"
    SINGLE = "single"  # one node alone
    LAYOUT_TRANSFORM = "layout-transform"  # a transpose the layout stage inserts at a conv region boundary
    COLLECTIVE = "collective"  # a collective or a pipeline send the parallel stages insert


class PlanDtype(StrEnum):
    """`PlanOptions.dtype`: auto maps at the model's released precision (`plan.precision.released_precision`)."""

    AUTO = "auto"
    FP32 = "fp32"
    TF32 = "tf32"
    BF16 = "bf16"
    FP16 = "fp16"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    # block-scaled (microscaling) floats, each element's share of its block's scale counted in its bytes
    # (`plan.precision.SCALED_FORMATS`); only on a profile with a matrix peak at the format
    NVFP4 = "nvfp4"  # E2M1, an FP8 E4M3 scale per 16 (NVIDIA Blackwell)
    MXFP8 = "mxfp8"  # E4M3/E5M2, an E8M0 scale per 32 (OCP MX v1.0)
    MXFP6 = "mxfp6"  # E2M3/E3M2, an E8M0 scale per 32 (OCP MX v1.0)
    MXFP4 = "mxfp4"  # E2M1, an E8M0 scale per 32 (OCP MX v1.0)


class WeightDtype(StrEnum):
    """`PlanOptions.weight_dtype`: weight-only quantization (decoder LLMs); the 4-bit float formats need the
    profile's peak at the format, the integers none (they are unpacked to the activations' type)."""

    SAME = "same"
    INT8 = "int8"
    INT4 = "int4"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"


class KvDtype(StrEnum):
    """`PlanOptions.kv_dtype`: the KV cache's storage precision (same: the plan's activations'); the 4-bit float
    formats need the profile's peak at the format, as weights do."""

    SAME = "same"
    FP8 = "fp8"
    INT8 = "int8"
    INT4 = "int4"
    NVFP4 = "nvfp4"
    MXFP4 = "mxfp4"


class FusionPolicy(StrEnum):
    """`PlanOptions.fusion`."""

    NONE = "none"
    DEFAULT = "default"
    AGGRESSIVE = "aggressive"


class Layout(StrEnum):
    """`PlanOptions.layout`: the conv layout (auto: the profile's preferred)."""

    AUTO = "auto"
    NCHW = "nchw"
    NHWC = "nhwc"


def values(vocabulary: type[StrEnum]) -> tuple[str, ...]:
    """The vocabulary's values in order, as plain strings (widget and argparse choices)."""
    return tuple(member.value for member in vocabulary)


class KvCache(StrEnum):
    """`PlanOptions.kv_cache`: how a decoder's past/present KV cache is updated each step."""

    AUTO = "auto"  # as the runtime preset says
    IN_PLACE = "in-place"  # paged KV cache: append the new token's K and V (vLLM, TensorRT-LLM)
    COPY = "copy"  # the exported Concat rewrites the whole cache (ONNX Runtime on such a graph)
    # a preallocated contiguous cache a sequence, appended in place (HF StaticCache, gpt-fast): no block tables
    STATIC = "static"


class GqaDecode(StrEnum):
    """`PlanOptions.gqa_decode`: how decode attention runs grouped-query heads (`hardware.target.DecodeAttention`)."""

    AUTO = "auto"  # as the runtime preset says
    PACKED = "packed"  # a K/V head's query heads are one work item's rows (FlashAttention-2's swap, XQA)
    PER_HEAD = "per-head"  # one work item per query head (masked MHA, an exported graph's repeat_kv)


class Launch(StrEnum):
    """`PlanOptions.launch`: how kernels are launched."""

    AUTO = "auto"  # as the runtime preset says
    EAGER = "eager"  # one launch per kernel
    GRAPH = "graph"  # replayed as a CUDA graph (or the device's equivalent)


class Runtime(StrEnum):
    """`PlanOptions.runtime`: a preset that sets the runtime choices together."""

    AUTO = "auto"  # decoders on GPU profiles: the serving preset; everything else: onnxruntime
    ONNXRUNTIME = "onnxruntime"
    VLLM = "vllm"
    TENSORRT_LLM = "tensorrt-llm"
    TRAINING = "training"  # a training framework's forward (Megatron-LM, PyTorch): causal fused attention, every logit


class Sparsity(StrEnum):
    """`PlanOptions.sparsity`: structured sparsity of weight GEMMs."""

    DENSE = "dense"
    TWO_FOUR = "2:4"  # 2:4 structured sparsity (needs accuracy evidence and a dense fallback)


class MatrixKind(StrEnum):
    """`MatrixShape.kind`: what a matrix op's GEMMs are."""

    GEMM = "gemm"  # a MatMul, Gemm or Linear: C[m, n] += A[m, k] B[k, n]
    CONV = "conv"  # a convolution as an implicit GEMM (A is the input, not its im2col)
    ATTENTION = "attention"  # a fused attention's two GEMMs (scores, then the weighted values)
    LATENT_ATTENTION = "latent-attention"  # a fused attention whose keys are its values (MLA): one tile holds both


class MatrixSchedule(StrEnum):
    """How a device's GEMM library deals a matrix kernel's output tiles to its units (a profile's
    `compute.matrix_schedule`)."""

    DATA_PARALLEL = "data-parallel"  # one tile a unit a wave: the last wave's idle units wait (wave quantization)
    STREAM_K = "stream-k"  # the last wave's tiles' K loops spread over every unit, partial sums fixed up after


class DecodeSplit(StrEnum):
    """How a runtime's decode attention kernel splits a sequence's cached keys across units (`DecodeAttention`)."""

    # FlashAttention's split-KV (`num_splits_heuristic`): work items filling under 0.8 of the units split, into any
    # count of whole key blocks the search finds fastest
    FLASH = "flash"
    # TensorRT-LLM's XQA multi-block mode (`computeMultiBlockCount`): a count set by the history length and the
    # items, whatever they fill (`plan.attention_tiling.xqa_blocks`)
    XQA = "xqa"


class Shard(StrEnum):
    """`Kernel.shard`: a kernel's tensor-parallel role (Megatron-LM, Shoeybi et al. 2019, section 3)."""

    COLUMN = "column"  # a weight GEMM splitting its output dim N
    ROW = "row"  # a weight GEMM splitting its K: partial sums, all-reduced
    SHARDED = "sharded"  # reads a sharded tensor: works on 1/tp of the data (attention on its heads, SwiGLU)
    HEADS = "heads"  # a weight GEMM batched over heads (MLA's absorbed W^UK, W^UV): its heads and their weights split
    REPLICATED = "replicated"  # every rank runs it whole (norms, residual adds, embeddings)


class Collective(StrEnum):
    """`Kernel.collective`: what an interconnect kernel does, costed by `cost.collectives`."""

    ALL_REDUCE = "all-reduce"  # a row-parallel GEMM's partial sums
    ALL_GATHER = "all-gather"  # column-parallel logits gathered
    REDUCE_SCATTER = "reduce-scatter"
    P2P = "p2p"  # a pipeline stage's activations sent to the next
    ALL_TO_ALL = "all-to-all"  # expert parallelism's dispatch and combine

    @property
    def op_type(self) -> str:
        """Its op type in the kernel's op list (AllReduce, SendRecv ...)."""
        return _COLLECTIVE_OPS[self]


_COLLECTIVE_OPS = {
    Collective.ALL_REDUCE: "AllReduce",
    Collective.ALL_GATHER: "AllGather",
    Collective.REDUCE_SCATTER: "ReduceScatter",
    Collective.P2P: "SendRecv",
    Collective.ALL_TO_ALL: "AllToAll",
}


class Recompute(StrEnum):
    """`TrainOptions.recompute`: which activations a training step recomputes in the backward pass instead of
    keeping (Korthikanti et al. 2022, "Reducing Activation Recomputation in Large Transformer Models", sec. 4-5)."""

    NONE = "none"  # every activation the backward reads is kept
    SELECTIVE = "selective"  # the attention core (scores, softmax, its dropout) recomputed
    FULL = "full"  # each layer's input kept, the whole layer's forward run again


class Phase(StrEnum):
    """Which pass of a training step a kernel runs in (`train.step`): the micro-batch's time is summed by it."""

    FORWARD = "forward"
    BACKWARD = "backward"
    RECOMPUTE = "recompute"  # the forward run again in the backward (`Recompute`)


class PipelineSchedule(StrEnum):
    """`TrainOptions.schedule`: how pipeline stages order their micro-batches (Narayanan et al. 2021, sec. 2.2)."""

    GPIPE = "gpipe"  # all forwards, then all backwards: every micro-batch's activations in flight
    ONE_F_ONE_B = "1f1b"  # PipeDream-Flush: the first stage holds p micro-batches
    INTERLEAVED = "interleaved"  # v model chunks a device: the bubble / v, more sends


class ExecutorKind(StrEnum):
    """Where a sweep's tasks run (`explore.executors`)."""

    INPROCESS = "inprocess"
    PROCESSES = "processes"  # a local process pool
    DASK = "dask"  # a Dask LocalCluster, or a running scheduler


class Deployment(StrEnum):
    """How a deployment search's configuration serves its requests (`explore.search_space.Plan`)."""

    AGGREGATED = "aggregated"  # each replica serves both phases, chunked prefill
    DISAGGREGATED = "disaggregated"  # a prefill pool and a decode pool, each its own plan (serve/disaggregated.py)
    SPECULATIVE = "speculative"  # aggregated, a draft proposing tokens the target verifies (serve/speculative.py)


class RowKind(StrEnum):
    """What a measured row timed, as the validation harness maps it (`evidence.validate`: the slice it becomes, the
    band it is scored in); here beside the other vocabularies so that the CLI's choices load no harness."""

    GEMM = "gemm"
    ATTENTION_DECODE = "attention-decode"
    ATTENTION_PREFILL = "attention-prefill"
    ALL_REDUCE = "all-reduce"
    MOE = "moe"
    MOE_ALL_TO_ALL = "moe-all-to-all"
