"""The work model's tables: FLOPs per element of each op family and which ops belong to which family.

Read by the rules in `ops` (and by the layer placer and sharding through `ops`). Data only: a new
op is a row here (and a rule in `ops` if it is a matrix op).
"""

from __future__ import annotations

from mapper.core.graph import SUBGRAPH_OPS
from mapper.model.shapes.rules import REDUCE

# FLOPs per output element of elementwise ops, and how many of them run on the
# special-function unit (exp, log, tanh, erf, rsqrt...). After onnx-tool's
# node.py constants: a transcendental is one SFU op plus its arithmetic.
ADD = 1  # add, sub, mul, div, max, min, compare, select: one op
EXP = 1  # one SFU op (MUFU.EX2 on NVIDIA)
SIGMOID = EXP + 2  # 1 / (1 + exp(-x)): exp, add, div
TANH = EXP + 4  # (e^2x - 1) / (e^2x + 1)
GELU_ERF = EXP + 4  # 0.5 * x * (1 + erf(x / sqrt 2)): erf, div, add, mul, mul
GELU_TANH = TANH + 6  # 0.5x(1 + tanh(sqrt(2/pi)(x + 0.044715 x^3)))
SOFTMAX = 5  # max, subtract, exp, sum, divide per element (PRIMER section 2)
LAYERNORM = 8  # mean, subtract, square, mean, normalize, scale, shift
RMSNORM = 4  # square, mean, normalize, scale
BATCHNORM = 2  # inference: folded scale and shift
REQUANTIZE = 2  # QLinear elementwise/pooling ops rescale each result: multiply, add zero point

# op type -> (flops per element, SFU ops per element)
ELEMENTWISE: dict[str, tuple[float, float]] = {
    **{
        op: (ADD, 0)
        for op in (
            "Add",
            "Sub",
            "Mul",
            "Div",
            "Max",
            "Min",
            "Sum",
            "Mean",
            "Neg",
            "Abs",
            "Relu",
            "LeakyRelu",
            "PRelu",
            "Clip",
            "Where",
            "Equal",
            "Less",
            "Greater",
            "LessOrEqual",
            "GreaterOrEqual",
            "And",
            "Or",
            "Xor",
            "Not",
            "Sign",
            "Floor",
            "Ceil",
            "Round",
            "Mod",
            "Pow",
            "Cast",
            "CastLike",
            "HardSigmoid",
            "HardSwish",
            "ThresholdedRelu",
            "Shrink",
            "IsNaN",
            "IsInf",
            "BitShift",
            "QuantizeLinear",
            "DequantizeLinear",
            "Trilu",
            "CumSum",
            "DynamicQuantizeLinear",
        )
    },
    "BiasAdd": (2 * ADD, 0),  # X + bias + skip
}
TRANSCENDENTAL: dict[str, tuple[float, float]] = {
    **{
        op: (EXP, 1)
        for op in (
            "Exp",
            "Log",
            "Sqrt",
            "Reciprocal",
            "Sin",
            "Cos",
            "Tan",
            "Erf",
            "Asin",
            "Acos",
            "Atan",
            "Sinh",
            "Cosh",
            "Asinh",
            "Acosh",
            "Atanh",
        )
    },
    "Sigmoid": (SIGMOID, 1),
    "Tanh": (TANH, 1),
    "Elu": (SIGMOID, 1),
    "Selu": (SIGMOID, 1),
    "Celu": (SIGMOID, 1),
    "Softplus": (SIGMOID, 2),
    "Softsign": (3, 0),
    "Mish": (TANH + 3, 2),
    "Gelu": (GELU_ERF, 1),
    "BiasGelu": (GELU_ERF + 1, 1),
    "FastGelu": (GELU_TANH, 1),
    "QuickGelu": (SIGMOID + 1, 1),
    "Softmax": (SOFTMAX, 1),
    "LogSoftmax": (SOFTMAX + 1, 2),
    "Hardmax": (2, 0),
    "BiasSplitGelu": (GELU_ERF + 3, 1),  # per output element: two bias adds, the GELU, the product
}
NORMALIZATION: dict[str, tuple[float, float]] = {
    "LayerNormalization": (LAYERNORM, 0),
    "SkipLayerNormalization": (LAYERNORM + 1, 0),
    "SimplifiedLayerNormalization": (RMSNORM, 0),
    "SkipSimplifiedLayerNormalization": (RMSNORM + 1, 0),
    "RMSNormalization": (RMSNORM, 0),
    "BatchNormalization": (BATCHNORM, 0),
    "InstanceNormalization": (LAYERNORM, 0),
    "GroupNormalization": (LAYERNORM, 0),
    "MeanVarianceNormalization": (LAYERNORM, 0),
    "LpNormalization": (3, 0),
    "EmbedLayerNormalization": (LAYERNORM + 2, 0),
    "GroupNorm": (LAYERNORM + 1, 0),
    "SkipGroupNorm": (LAYERNORM + 3, 0),  # + optional SiLU; + skip and bias adds
}
REDUCTIONS = (*REDUCE, "ArgMax", "ArgMin", "TopK")  # the shape rules' reduce family, plus index reductions
POOLING = ("MaxPool", "AveragePool", "LpPool", "GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
DATA_MOVEMENT = (
    "Transpose",
    "Concat",
    "Split",
    "Slice",
    "Gather",
    "GatherElements",
    "GatherND",
    "ScatterND",
    "ScatterElements",
    "Scatter",
    "Pad",
    "Resize",
    "Upsample",
    "Tile",
    "Expand",
    "DepthToSpace",
    "SpaceToDepth",
    "OneHot",
    "ConstantOfShape",
    "Range",
    "NonZero",
    "RotaryEmbedding",
)
VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze", "Identity", "Dropout", "BiasDropout")
SHAPE_ONLY = ("Shape", "Size", "Constant")
CONTROL = (
    *sorted(SUBGRAPH_OPS),
    "SequenceConstruct",
    "SequenceAt",
    "SequenceInsert",
    "SplitToSequence",
    "ConcatFromSequence",
    "NonMaxSuppression",
    "Unique",
    "RandomNormal",
    "RandomUniform",
    "RandomNormalLike",
    "RandomUniformLike",
    "Multinomial",
    "StringNormalizer",
)
# Why a control/host node carries no time: keyed by whether it has subgraph bodies.
HOST_REASONS = {
    True: "control flow runs on the host; its body is not modeled",
    False: "a host-side op (sequences, sampling, data-dependent sizes, strings): its time is not modeled",
}
