"""Kernel names a meeting reads: the module that made the kernel and what the kernel is, never its first node's op.

"model.layers.0.self_attn · fused attention", "model.layers.0.mlp.down_proj · matmul + add", "layer1.0.conv1 ·
conv + bn + relu". Stage three, beside the boundaries: `boundary.GroupPlaces` names every group of a plan at once
(`plan_names`), so a name repeated inside one module is numbered there ("· slice #2") and stays unique in the
mapping (the drill-down, the sheet and calibration key on names) while the same kernel of every layer reads alike.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from mapper.core.graph import Node
from mapper.core.vocab import KernelRule
from mapper.ops import OPS
from mapper.plan.fusion_rules import QDQ_OPS, anchor_index

SEPARATOR = " · "  # between the module path and what the kernel is
NUMBER = " #"  # before the number of a name that repeats inside its module
FUSED_ATTENTION = "fused attention"
MAX_WORDS = 5  # a fused kernel's ops named one by one up to this many words, then "N more"

# One word per op, the short forms a kernel's epilogue reads with ("conv + bn + relu"); an op not listed reads as
# its own type in lower-case words (GlobalAveragePool -> "global average pool"), a quantized op as its float twin.
OP_WORDS = {
    "MatMul": "matmul",
    "FusedMatMul": "matmul",
    "MatMulNBits": "matmul",
    "MatMulInteger": "matmul",
    "Gemm": "gemm",
    "GemmFastGelu": "gemm + gelu",
    "Conv": "conv",
    "FusedConv": "conv",
    "ConvInteger": "conv",
    "ConvTranspose": "transposed conv",
    "BatchNormalization": "bn",
    "Gelu": "gelu",
    "FastGelu": "gelu",
    "QuickGelu": "gelu",
    "BiasGelu": "bias + gelu",
    "LeakyRelu": "leaky relu",
    "HardSwish": "hard swish",
    "HardSigmoid": "hard sigmoid",
    "TopK": "top-k",
    "QuantizeLinear": "quantize",
    "DequantizeLinear": "dequantize",
    "DynamicQuantizeLinear": "dynamic quantize",
    "Attention": "attention",
    "MultiHeadAttention": "attention",
    "GroupQueryAttention": "attention",
}
# A norm op, alone or starting a norm block, by name ("bn" only in an epilogue: "conv + bn + relu").
NORM_WORDS = {
    "BatchNormalization": "batch norm",
    "LayerNormalization": "layer norm",
    "SkipLayerNormalization": "add + layer norm",
    "SimplifiedLayerNormalization": "rms norm",
    "SkipSimplifiedLayerNormalization": "add + rms norm",
    "RMSNormalization": "rms norm",
    "GroupNormalization": "group norm",
    "InstanceNormalization": "instance norm",
    "LpNormalization": "lp norm",
}
# A decomposed norm block (the norm rule over ReduceMean, Pow, Sqrt...): a mean subtracted makes it a layer norm.
MEAN_SUBTRACTED = "Sub"


@dataclass(frozen=True, slots=True)
class Activation:
    """An activation written as several elementwise ops: the ops that mark it, the name, the ops it takes in."""

    marks: frozenset[str]
    name: str
    takes: frozenset[str]


# Ordered, first match wins: GELU as erf (BERT) or tanh (GPT-2) arithmetic, SiLU as x * sigmoid(x) (Llama).
ACTIVATIONS = (
    Activation(frozenset({"Erf"}), "gelu", frozenset({"Erf", "Div", "Mul", "Add"})),
    Activation(frozenset({"Tanh", "Pow"}), "gelu", frozenset({"Tanh", "Pow", "Mul", "Add"})),
    Activation(frozenset({"Sigmoid", "Mul"}), "silu", frozenset({"Sigmoid", "Mul"})),
)


def op_word(op_type: str) -> str:
    """What one op is, in the words of a kernel name."""
    twin = OPS.twin_of(op_type)
    return OP_WORDS.get(twin) or NORM_WORDS.get(twin) or re.sub(r"(?<=[a-z0-9])(?=[A-Z])", " ", twin).lower()


def module_of(scoped_name: str) -> str | None:
    """The dotted module path of a node the exporter named by scope: "/model/layers.0/self_attn/Transpose_3" ->
    "model.layers.0.self_attn"; a scope that spells out its parent's path replaces it (torchvision's TorchScript
    export: "/layer1/layer1.0/conv1/Conv" -> "layer1.0.conv1"); "" for an op at the model's root ("/Gather_4");
    None for a name without scopes ("node_linear_3", "resnetv17_conv0_fwd")."""
    if not scoped_name.startswith("/"):
        return None
    path: list[str] = []
    for part in [p for p in scoped_name.split("/") if p][:-1]:
        if path and part.startswith(".".join(path) + "."):
            path = [part]
        elif path and part.startswith(path[-1] + "."):
            path[-1] = part
        else:
            path.append(part)
    return ".".join(path)


def _words(ops: Sequence[str], biases: Sequence[bool]) -> list[str]:
    """The ops after a kernel's first, as words: an Add of a weight is its "bias", an activation's ops one word."""
    kept = [(op, bias) for op, bias in zip(ops, biases) if op not in QDQ_OPS]  # a kernel's requantization
    plain = {op for op, bias in kept if not bias}
    act = next((a for a in ACTIVATIONS if a.marks <= plain), None)
    words: list[str] = []
    for op, bias in kept:
        if bias and "bias" not in words:
            words.append("bias")
        elif act is not None and op in act.takes:
            if act.name not in words:
                words.append(act.name)
        else:
            words.append(op_word(op))
    return words


def _joined(words: list[str]) -> str:
    shown = words if len(words) <= MAX_WORDS else [*words[: MAX_WORDS - 1], f"{len(words) - MAX_WORDS + 1} more"]
    return " + ".join(shown)


def _epilogue(ops: Sequence[str], biases: Sequence[bool]) -> str:
    """A matrix op and its epilogue: "matmul + bias + gelu", "conv + bn + relu"."""
    first = anchor_index(ops)
    rest = [i for i in range(len(ops)) if i != first]
    return _joined([op_word(ops[first]), *_words([ops[i] for i in rest], [biases[i] for i in rest])])


def _chain(ops: Sequence[str], biases: Sequence[bool]) -> str:
    """Elementwise ops in one kernel: the activation they spell, their ops, or "elementwise chain of N"."""
    words = _words(ops, [False] * len(ops)) or [op_word(op) for op in ops]  # a QDQ pair alone: its own words
    return _joined(words) if len(words) <= MAX_WORDS - 2 else f"elementwise chain of {len(ops)}"


def _norm(ops: Sequence[str], biases: Sequence[bool]) -> str:
    """A norm block: its op's name, or decomposed, a layer norm where it subtracts the mean, else an rms norm."""
    named = next((NORM_WORDS[op] for op in ops if op in NORM_WORDS), None)
    return named or ("layer norm" if MEAN_SUBTRACTED in ops else "rms norm")


def _single(ops: Sequence[str], biases: Sequence[bool]) -> str:
    return NORM_WORDS.get(ops[0]) or op_word(ops[0])


# What a kernel is, by the fusion rule that made it (its members' ops and which of them add a weight: a bias).
WHAT_BY_RULE: dict[str, Callable[[Sequence[str], Sequence[bool]], str]] = {
    KernelRule.FLASH_ATTENTION: lambda ops, biases: FUSED_ATTENTION,
    KernelRule.NORM: _norm,
    KernelRule.GEMM_EPILOGUE: _epilogue,
    KernelRule.ELEMENTWISE_CHAIN: _chain,
    KernelRule.SINGLE: _single,
    KernelRule.LAYOUT_TRANSFORM: lambda ops, biases: "layout transform",
}


def what_it_is(rule: str, members: Sequence[Node], weights) -> str:
    """What a group's kernel is, from its rule and its members (`weights`: the graph's weight names)."""
    ops = [n.op_type for n in members]
    biases = [OPS.twin_of(n.op_type) == "Add" and any(t in weights for t in n.inputs) for n in members]
    return WHAT_BY_RULE.get(rule, _single)(ops, biases)


def where_it_is(members: Sequence[Node], scopes: dict[str, str]) -> str:
    """Where a kernel is: the module path of its anchor op (its matrix op, else its first member:
    `fusion_rules.anchor_index`); where the export names no modules, that node's name."""
    anchor = members[anchor_index([n.op_type for n in members])]
    scoped = scopes.get(anchor.name, anchor.name)
    module = module_of(scoped)
    return scoped if module is None else module


def kernel_module(name: str) -> str:
    """The module path a kernel name starts with ("model.layers.0.mlp.up_proj · matmul + mul" ->
    "model.layers.0.mlp.up_proj"); "" for a kernel at the model's root, named by what it is alone."""
    module, separator, _ = name.partition(SEPARATOR)
    return module if separator else ""


def plan_names(places: Sequence[tuple[str, str]]) -> list[str]:
    """Each kernel's name from its (where, what): "where · what" (what alone at the model's root), numbered
    "#1", "#2"... in graph order where one module holds more than one of it, so every name is unique."""
    bases = [_base(where, what) for where, what in places]
    counts: dict[str, int] = {}
    for base in bases:
        counts[base] = counts.get(base, 0) + 1
    seen: dict[str, int] = {}
    names = []
    for base in bases:
        if counts[base] == 1:
            names.append(base)
            continue
        seen[base] = seen.get(base, 0) + 1
        names.append(f"{base}{NUMBER}{seen[base]}")
    return names


def _base(where: str, what: str) -> str:
    return f"{where}{SEPARATOR}{what}" if where else what


def split_names(where: str, name: str, whats: Sequence[str]) -> list[str]:
    """The members of a fused attention (`name`, at `where`) whose tiles did not fit on chip, each run as a kernel
    of its own: "model.layers.0.self_attn · attention step 2 of 6: matmul", unique beside the plan's names."""
    number = name[len(_base(where, FUSED_ATTENTION)) :]  # the attention's own "#2", if its module holds two
    return [_base(where, f"attention{number} step {i} of {len(whats)}: {w}") for i, w in enumerate(whats, 1)]
