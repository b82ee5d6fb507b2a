"""What a Hugging Face config would build, computed from its numbers before anything is built.

A 1 kB config.json names its graph's size: `num_hidden_layers: 1e9` asks for ~10^11 nodes, `head_dim: 2^31` for an
8 GiB rotary table, `num_local_experts: 1e6` for 10^7 nodes a layer. The builder would allocate all of it before
any check on the finished graph could run, so each bound is computed here from the config's numbers and refused
with one line naming the field and the limit:

- nodes: the family's builder run on a probe of the config at tiny widths (`Probe`): 1 and 2 layers, 1 and 2
  experts. A graph's node count is affine in layers and, per layer, in experts (every layer emits the same nodes;
  an MoE block emits the same nodes per expert), so three tiny builds give it exactly at any size (a test holds
  this against the full builds); two more where the first layers are dense and the rest MoE (DeepSeek);
- parameters: the family's closed form (hf_decoder.parameters, `encoder_parameters`);
- tables: the bytes of every array the builder computes from the config (the RoPE inverse frequencies).

Each figure costs milliseconds and no allocation that grows with the config (checked under an address-space limit
in tests/security/test_config_bounds.py; timed by bench/bench_hostile.py).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import onnx

from mapper.core import limits
from mapper.core.errors import MapperError

FLOAT64_BYTES = 8  # the RoPE inverse frequencies are computed in float64 (hf_decoder.inv_freq)


@dataclass(frozen=True, slots=True)
class Probe:
    """How one family's graph is built at tiny widths: `build(layers, experts)` -> the graph."""

    build: Callable[[int, int], onnx.ModelProto]  # experts 0: every layer dense
    layers: int  # the config's layers
    experts: int = 0  # the config's experts per MoE block (0: dense)
    dense_layers: int = 0  # of `layers`, the first ones with a dense MLP in place of the experts


@dataclass(frozen=True, slots=True)
class Implied:
    """What a config would build: each figure with the config field that sets it (for the one error line)."""

    nodes: int
    parameters: int
    table_bytes: int
    nodes_fields: str  # the fields the node count grows with ("num_hidden_layers x num_local_experts", "n_layer")
    table_field: str = "head_dim"


def implied_nodes(probe: Probe) -> int:
    """The node count of the full graph, from three builds at tiny widths (two when dense, five when the first
    layers are dense and the rest MoE)."""

    def nodes(layers: int, experts: int) -> int:
        return len(probe.build(layers, experts).graph.node)

    experts = max(probe.experts, 1)  # a dense probe builds with experts=0 throughout
    routed = 0 if probe.experts == 0 else 1  # the experts of the base probe: 0 for a dense model
    moe_layers = probe.layers - probe.dense_layers if routed else probe.layers
    one = nodes(1, routed)
    per_layer = nodes(2, routed) - one
    per_expert = nodes(1, 2) - one if routed else 0
    count = one + (moe_layers - 1) * per_layer + moe_layers * (experts - 1) * per_expert
    if routed and probe.dense_layers:  # the graph less its layers is the same whichever MLP the layers have
        dense_one = nodes(1, 0)
        count += probe.dense_layers * (nodes(2, 0) - dense_one)
    return count


def check_implied(implied: Implied, where: str) -> None:
    """One line naming the field and the limit for the first figure over its limit."""
    if implied.nodes > limits.MAX_NODES:
        raise MapperError(
            f"{where}: {implied.nodes_fields} would build {implied.nodes:,} nodes, over"
            f" {limits.limit_text('MAX_NODES')}; check the config's layer and expert counts"
        )
    if implied.parameters > limits.MAX_PARAMETERS:
        raise MapperError(
            f"{where}: the config's sizes come to {implied.parameters:.3g} parameters, over"
            f" {limits.limit_text('MAX_PARAMETERS')}; check its hidden, intermediate and vocabulary sizes"
        )
    if implied.table_bytes > limits.MAX_CONFIG_TABLE_BYTES:
        raise MapperError(
            f"{where}: {implied.table_field} would make a {implied.table_bytes:,}-byte rotary table, over"
            f" {limits.limit_text('MAX_CONFIG_TABLE_BYTES')}; real models use a head_dim of 64-256"
        )


def encoder_parameters(layers: int, hidden: int, ffn: int, embeddings: int, pooler: bool) -> int:
    """BERT's and GPT-2's closed form: a layer's four hidden x hidden projections, its two MLP matrices with their
    biases and two LayerNorms (4h^2 + 2hf + 9h + f); `embeddings` rows of the tables (vocabulary, positions, token
    types) at h each, the final or embedding LayerNorm (2h), and BERT's pooler (h^2 + h)."""
    per_layer = 4 * hidden * hidden + 2 * hidden * ffn + 9 * hidden + ffn
    head = hidden * hidden + hidden if pooler else 0
    return layers * per_layer + embeddings * hidden + 2 * hidden + head


def rope_table_bytes(head_dim: int) -> int:
    return head_dim // 2 * FLOAT64_BYTES
