"""Issue 31 item 1: a config.json or an ONNX file is bounded before it is built.

Each hostile input runs through the real CLI in a child under an address-space limit just above what the
threat-model page states for it (docs/threat-model.md): a refusal that came after building the graph, a table
or the whole parse would run out of address space first and fail here on its traceback. The inputs are
bench/hostile_inputs.py's, which bench/bench_hostile.py times.
"""

from __future__ import annotations

import json
import math
from dataclasses import replace

import onnx
import pytest
from onnx import TensorProto

from bench.hostile_inputs import BERT, CONFIGS, HOSTILE_CONFIGS, HOSTILE_ONNX, config, relu_chain, wide_sum
from mapper.core import limits
from mapper.core.errors import MapperError
from mapper.model.onnx_import import read_model_structure
from mapper.zoo.config_bounds import Probe, implied_nodes
from mapper.zoo.hf_config import FAMILIES, config_model, implied_by
from mapper.zoo.hf_fields import Fields
from tests.security.bounded import assert_one_line, run_cli

CONFIG_BOUND_BYTES = 64 << 20  # the page's bound for refusing a config: a few MB past the process itself
ONNX_FACTOR = 3  # and for a file: the file mapped once, the structure read so far, its pieces


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HOSTILE_CONFIGS))
@pytest.mark.parametrize("command", ["map", "strip"])
def test_a_hostile_config_is_refused_unbuilt(tmp_path, case, command):
    data, limit = HOSTILE_CONFIGS[case]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(data))
    args = ["map", "--hw", "h100-sxm", "--", str(path)] if command == "map" else ["strip", str(path), "-o", "x.onnx"]
    outcome = run_cli(args, extra_bytes=CONFIG_BOUND_BYTES, cwd=tmp_path)
    assert_one_line(outcome, limit, "config.json")


@pytest.mark.slow
@pytest.mark.parametrize("case", sorted(HOSTILE_ONNX))
def test_a_hostile_onnx_file_is_refused_while_read(tmp_path, case):
    build, limit = HOSTILE_ONNX[case]
    data = build()
    path = tmp_path / "hostile.onnx"
    path.write_bytes(data)
    outcome = run_cli(["map", "--hw", "h100-sxm", "--", str(path)], extra_bytes=ONNX_FACTOR * len(data))
    assert_one_line(outcome, limit)


@pytest.mark.slow
@pytest.mark.parametrize(
    ("data", "limit"),
    [
        (lambda: relu_chain(limits.MAX_NODES + 1), "MAX_NODES"),
        (lambda: wide_sum(limits.MAX_NODE_INPUTS + 1), "MAX_NODE_INPUTS"),
        (lambda: wide_sum(limits.MAX_NODE_INPUTS, limits.MAX_EDGES // limits.MAX_NODE_INPUTS + 1), "MAX_EDGES"),
    ],
    ids=["nodes", "inputs", "edges"],
)
def test_each_count_is_refused_one_past_its_limit(data, limit):
    with pytest.raises(MapperError, match=limit):
        read_model_structure(data())


@pytest.mark.slow
def test_a_graph_at_its_limits_is_read():
    """The counts are exact, not rounded: a graph at MAX_NODES, and one a node short of MAX_EDGES, are read."""
    read_model_structure(relu_chain(limits.MAX_NODES))
    read_model_structure(wide_sum(limits.MAX_NODE_INPUTS, limits.MAX_EDGES // limits.MAX_NODE_INPUTS - 1))


# every config shipped in data/configs (the closed forms' families: a new one is checked the day it lands)
CONFIG_NAMES = sorted(path.stem for path in CONFIGS.glob("*.json"))


@pytest.mark.parametrize("name", CONFIG_NAMES)
def test_implied_nodes_are_the_built_graphs(name):
    """The probe's count is exact: three tiny builds give what the full build makes, for every family."""
    data = config(name)
    assert implied_by(data).nodes == len(config_model(data).graph.node)


@pytest.mark.parametrize(
    "fields",
    [
        {"num_hidden_layers": 3, "num_local_experts": 5, "num_experts_per_tok": 3},
        {"num_hidden_layers": 1, "num_local_experts": 1, "num_experts_per_tok": 1},
        {"num_hidden_layers": 7, "num_key_value_heads": 32, "sliding_window": 64},
    ],
)
def test_implied_nodes_hold_at_other_layer_and_expert_counts(fields):
    data = config("mixtral-8x7b", **fields)
    assert implied_by(data).nodes == len(config_model(data).graph.node)


@pytest.mark.parametrize("model_type", ["bert", "gpt2"])
def test_encoders_imply_their_nodes_and_parameters(model_type):
    gpt2 = {"model_type": "gpt2", "n_layer": 3, "n_embd": 64, "n_head": 4, "vocab_size": 100, "n_positions": 32}
    data = {**BERT, "num_hidden_layers": 3} if model_type == "bert" else gpt2
    built = config_model(data)
    implied = implied_by(data)
    assert implied.nodes == len(built.graph.node)
    stored = sum(math.prod(t.dims) for t in built.graph.initializer if t.data_location == TensorProto.EXTERNAL)
    assert implied.parameters == stored


def test_implied_nodes_arithmetic():
    """implied_nodes' arithmetic on a builder of 5 nodes, 3 a layer and 2 an expert a layer."""

    def build(layers: int, experts: int) -> onnx.ModelProto:
        graph = onnx.helper.make_graph(
            [onnx.helper.make_node("Relu", ["x"], ["x"])] * (5 + layers * (3 + 2 * experts)), "g", [], []
        )
        return onnx.helper.make_model(graph)

    assert implied_nodes(Probe(build, layers=10, experts=4)) == 5 + 10 * (3 + 2 * 4)
    assert implied_nodes(Probe(build, layers=10)) == 5 + 10 * 3


BAD_VALUES = {
    "rope_theta nan": ({"rope_theta": float("nan")}, "rope_theta"),
    "rope_theta 0": ({"rope_theta": 0}, "rope_theta"),
    "rope_theta -1": ({"rope_theta": -1.0}, "rope_theta"),
    "rope_theta inf": ({"rope_theta": float("inf")}, "rope_theta"),
    "rms_norm_eps nan": ({"rms_norm_eps": float("nan")}, "rms_norm_eps"),
    "rms_norm_eps -1e-5": ({"rms_norm_eps": -1e-5}, "rms_norm_eps"),
    "rope_scaling llama3 missing keys": ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "low_freq_factor"),
    "rope_scaling factor text": ({"rope_scaling": {"rope_type": "linear", "factor": "x"}}, "factor"),
    "rope_scaling factor nan": ({"rope_scaling": {"type": "linear", "factor": float("nan")}}, "factor"),
    "rope_scaling factor 0": ({"rope_scaling": {"type": "dynamic", "factor": 0}}, "factor"),
    "rope_scaling a list": ({"rope_scaling": [1, 2]}, "rope_scaling"),
    "rope_scaling type a list": ({"rope_scaling": {"rope_type": [], "factor": 2.0}}, "rope_type"),
    "rope_scaling high below low": (
        {
            "rope_scaling": {
                "rope_type": "llama3",
                "factor": 8.0,
                "low_freq_factor": 4.0,
                "high_freq_factor": 1.0,
                "original_max_position_embeddings": 8192,
            }
        },
        "high_freq_factor",
    ),
    "head_dim odd": ({"head_dim": 127}, "head_dim"),
    "heads over hidden": ({"num_attention_heads": 8192 * 2, "num_key_value_heads": 8}, "head_dim"),
}


@pytest.mark.parametrize("case", sorted(BAD_VALUES))
def test_a_bad_value_is_one_line_in_process(case):
    fields, needle = BAD_VALUES[case]
    with pytest.raises(MapperError, match=needle) as raised:
        config_model(config("llama-3-8b", **fields))
    assert "\n" not in str(raised.value)


@pytest.mark.parametrize("case", ["rope_theta nan", "rope_scaling llama3 missing keys", "rope_scaling factor text"])
@pytest.mark.slow  # seconds in the fast tier on a 2-core machine: the full tier runs it
def test_a_bad_value_is_one_line_from_the_cli(tmp_path, case):
    fields, needle = BAD_VALUES[case]
    path = tmp_path / "config.json"
    path.write_text(json.dumps(config("llama-3-8b", **fields)))  # json writes NaN as the literal Python reads back
    assert_one_line(run_cli(["map", "--", str(path)], extra_bytes=CONFIG_BOUND_BYTES), needle)


def test_every_family_is_probed():
    """A family added to the table without its bounds would build unchecked."""
    for family in FAMILIES.values():
        assert callable(family.implied)
    spec = FAMILIES["llama"].read(Fields(config("llama-3-8b"), "config"))
    assert FAMILIES["llama"].implied(replace(spec, layers=2)).nodes < FAMILIES["llama"].implied(spec).nodes
