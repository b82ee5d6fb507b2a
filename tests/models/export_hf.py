"""Export tiny, randomly initialised Hugging Face transformers to graph-only ONNX.

These files are test fixtures for the mapper's ONNX importer.  Every model is
built from a config written out below (no hub download), exported with the
PyTorch dynamo exporter with symbolic batch / sequence dims, and then its
external-data file is DELETED: only the graph is committed.  The initializers
stay in the graph as external-data TensorProtos, so their dims are known but
their bytes are absent -- the importer must map a model without its weights.

Versions used to make the committed files (Python 3.11.7, CPU):
    torch        2.13.0+cpu
    transformers 5.24.0
    onnx         1.23.2
    onnxscript   0.7.2
    onnx_ir      1.1.0

Rerun (from the repo root), in a venv that is NOT the project's .venv:
    python3 -m venv /tmp/export-venv
    /tmp/export-venv/bin/pip install torch==2.13.0 transformers==5.24.0 \
        onnx==1.23.2 onnxscript==0.7.2
    /tmp/export-venv/bin/python tests/models/export_hf.py

Pass model names (bert gpt2 llama llama_decode bert_sdpa llama_sdpa) to
export a subset.  Check the closed-form FLOPs in flops.py against the graphs
(needs only `onnx`; works in the project venv too):
    /tmp/export-venv/bin/python tests/models/export_hf.py verify
The export is deterministic: with these versions, two runs write byte-identical
.onnx files (torch.manual_seed(0) before every model, and a seeded generator
for the random weights, which are discarded anyway).
"""

from __future__ import annotations

import collections
import os
import sys
import warnings

try:  # torch is only needed to export; `verify` needs only onnx
    import torch
except ImportError:
    torch = None

HERE = os.path.dirname(os.path.abspath(__file__))

# Configs are kept in one place; tests/models/flops.py carries the same numbers.
BERT = dict(
    vocab_size=1000,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    intermediate_size=512,
    max_position_embeddings=128,
    type_vocab_size=2,
)
GPT2 = dict(vocab_size=1000, n_embd=128, n_layer=2, n_head=4, n_inner=512, n_positions=128)
LLAMA = dict(
    vocab_size=1000,
    hidden_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    head_dim=32,
    intermediate_size=352,
    max_position_embeddings=256,
    tie_word_embeddings=False,
)

BATCH = "batch"
SEQ = "seq"
PAST = "past_seq"


def _strip_external(path: str) -> None:
    """Delete the external-data file(s) that the exporter wrote next to path.

    Also drop each node's "pkg.torch.onnx.stack_trace" metadata (a third of
    the file, full of this machine's paths); the other node metadata
    (namespace, name_scopes, class_hierarchy, fx_node) is kept: it names the
    module each node came from (e.g. model.layers.0.self_attn.q_proj), which
    matters because the optimizer renames transposed weights to val_NNN.
    """
    import onnx

    m = onnx.load(path, load_external_data=False)
    for node in m.graph.node:
        keep = [p for p in node.metadata_props if p.key != "pkg.torch.onnx.stack_trace"]
        del node.metadata_props[:]
        node.metadata_props.extend(keep)
    onnx.save(m, path)  # initializers keep their external_data references
    locs = set()
    for t in m.graph.initializer:
        for e in t.external_data:
            if e.key == "location":
                locs.add(e.value)
    for loc in locs:
        p = os.path.join(os.path.dirname(path), loc)
        if os.path.exists(p):
            os.remove(p)
    print(f"  {os.path.basename(path)}: {os.path.getsize(path)} bytes, removed external data {sorted(locs)}")


def _distinct_weights(model):
    """Fresh init leaves many parameters bit-identical (LayerNorm/RMSNorm
    weights = 1, biases = 0); the ONNX optimizer would then merge them into
    one shared initializer, which no trained model shows.  Make every
    parameter distinct so the graph keeps one initializer per weight."""
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for p in model.parameters():
            p.copy_(torch.randn(p.shape, generator=g) * 0.02)


def _export(model, args, kwargs, dynamic_shapes, name):
    path = os.path.join(HERE, name + ".onnx")
    model.eval()
    _distinct_weights(model)
    with torch.no_grad():
        torch.onnx.export(
            model,
            args,
            path,
            kwargs=kwargs,
            dynamo=True,
            external_data=True,
            dynamic_shapes=dynamic_shapes,
            optimize=True,
        )
    _strip_external(path)
    _histogram(path)


def _export_torchscript(model, inputs, outputs, name):  # outputs: name -> dynamic axes
    """The legacy TorchScript exporter (dynamo=False, opset 17): what most
    ONNX transformer files in the wild came from (Hugging Face Optimum, older
    torch).  It writes the weights inline; they are moved to external data
    (tensors over 1 KiB) and that file deleted, as for the dynamo exports."""
    import onnx

    path = os.path.join(HERE, name + ".onnx")
    model.eval()
    _distinct_weights(model)
    dynamic = {**{n: {0: BATCH, 1: SEQ} for n in inputs}, **outputs}
    with torch.no_grad():
        torch.onnx.export(
            model,
            tuple(inputs.values()),
            path,
            dynamo=False,
            input_names=list(inputs),
            output_names=list(outputs),
            dynamic_axes=dynamic,
            opset_version=17,
        )
    m = onnx.load(path)
    onnx.save_model(
        m,
        path,
        save_as_external_data=True,
        all_tensors_to_one_file=True,
        location=name + ".onnx.data",
        size_threshold=1024,
    )
    _strip_external(path)
    _histogram(path)


class _Fields(torch.nn.Module if torch else object):
    """A Hugging Face model as a function of positional tensors returning a
    tuple of named output fields (TorchScript traces tensors, not dicts)."""

    def __init__(self, model, fields):
        super().__init__()
        self.model, self.fields = model, fields

    def forward(self, input_ids, attention_mask=None):
        out = self.model(input_ids=input_ids, attention_mask=attention_mask, use_cache=False, return_dict=True)
        return tuple(getattr(out, f) for f in self.fields)


def export_torchscript(family):
    from transformers import BertConfig, BertModel, GPT2Config, GPT2LMHeadModel, LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    ids = _ids()
    # with a mask given, as Optimum exports do (without one, GPT-2 traces
    # aten::diff, which the TorchScript exporter cannot write)
    inputs = {"input_ids": ids, "attention_mask": torch.ones_like(ids)}
    if family == "bert":  # both outputs, so the pooler stays in the graph
        model = _Fields(
            BertModel(BertConfig(**BERT, attn_implementation="eager")), ("last_hidden_state", "pooler_output")
        )
        outputs = {"last_hidden_state": {0: BATCH, 1: SEQ}, "pooler_output": {0: BATCH}}
    else:
        cls, cfg, conf = (
            (GPT2LMHeadModel, GPT2Config, GPT2) if family == "gpt2" else (LlamaForCausalLM, LlamaConfig, LLAMA)
        )
        model = _Fields(cls(cfg(**conf, attn_implementation="eager")), ("logits",))
        outputs = {"logits": {0: BATCH, 1: SEQ}}
    _export_torchscript(model, inputs, outputs, f"hf_{family}_tiny_ts")


def _histogram(path):
    import onnx

    m = onnx.load(path, load_external_data=False)
    h = collections.Counter(n.op_type for n in m.graph.node)
    print(
        "  inputs:",
        [(i.name, [d.dim_param or d.dim_value for d in i.type.tensor_type.shape.dim]) for i in m.graph.input],
    )
    print("  ops:", dict(sorted(h.items())))


# Example sizes are chosen > 1 and distinct from every model dim (heads 4,
# kv heads 2, ...): torch.export specialises a dim whose example is 1 and may
# conflate equal sizes.
def _ids(b=3, s=16, vocab=1000):
    return torch.randint(0, vocab, (b, s), dtype=torch.long)


def export_bert(attn="eager", name="hf_bert_tiny"):
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    model = BertModel(BertConfig(**BERT, attn_implementation=attn))  # + pooler
    ids = _ids()
    mask = torch.ones_like(ids)
    _export(
        model,
        (),
        {"input_ids": ids, "attention_mask": mask},
        {"input_ids": {0: BATCH, 1: SEQ}, "attention_mask": {0: BATCH, 1: SEQ}},
        name,
    )


def export_gpt2(attn="eager", name="hf_gpt2_tiny"):
    from transformers import GPT2Config, GPT2LMHeadModel

    torch.manual_seed(0)
    cfg = GPT2Config(**GPT2, use_cache=False, attn_implementation=attn)
    model = GPT2LMHeadModel(cfg)
    ids = _ids()
    _export(model, (), {"input_ids": ids}, {"input_ids": {0: BATCH, 1: SEQ}}, name)


def export_llama(attn="eager", name="hf_llama_tiny"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**LLAMA, use_cache=False, attn_implementation=attn)
    model = LlamaForCausalLM(cfg)
    ids = _ids()
    _export(model, (), {"input_ids": ids}, {"input_ids": {0: BATCH, 1: SEQ}}, name)


def _llama_decode_wrapper(model):
    """Flat-tensor wrapper: one decode step with a past KV cache as inputs."""
    from transformers import DynamicCache

    class LlamaDecode(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, input_ids, attention_mask, past_kv):
            cache = DynamicCache(config=self.model.config)
            for i in range(self.model.config.num_hidden_layers):
                cache.update(past_kv[2 * i], past_kv[2 * i + 1], i)
            out = self.model(input_ids=input_ids, attention_mask=attention_mask, past_key_values=cache, use_cache=True)
            present = []
            for layer in out.past_key_values.layers:
                present += [layer.keys, layer.values]
            return (out.logits, *present)

    return LlamaDecode()


def export_llama_decode(attn="eager", name="hf_llama_tiny_decode"):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    cfg = LlamaConfig(**LLAMA, use_cache=True, attn_implementation=attn)
    model = _llama_decode_wrapper(LlamaForCausalLM(cfg))
    # seq example 3, not 1: an example of 1 is specialised into the graph (we
    # saw "past_seq + 1" and "4//seq" dims).  Bind seq=1 for a decode step.
    b, past, new = 3, 16, 3
    kvh, hd = LLAMA["num_key_value_heads"], LLAMA["head_dim"]
    ids = _ids(b, new)
    mask = torch.ones(b, past + new, dtype=torch.long)
    kv = [torch.randn(b, kvh, past, hd) for _ in range(2 * LLAMA["num_hidden_layers"])]
    total = "total_seq"
    _export(
        model,
        (ids, mask, kv),
        None,
        {
            "input_ids": {0: BATCH, 1: SEQ},
            "attention_mask": {0: BATCH, 1: total},
            "past_kv": [{0: BATCH, 2: PAST} for _ in kv],
        },
        name,
    )


EXPORTS = {
    "bert": export_bert,
    "gpt2": export_gpt2,
    "llama": export_llama,
    "llama_decode": export_llama_decode,
    "bert_sdpa": lambda: export_bert("sdpa", "hf_bert_tiny_sdpa"),
    "llama_sdpa": lambda: export_llama("sdpa", "hf_llama_tiny_sdpa"),
    "bert_ts": lambda: export_torchscript("bert"),
    "gpt2_ts": lambda: export_torchscript("gpt2"),
    "llama_ts": lambda: export_torchscript("llama"),
}


# (stem, bindings) checked by `verify`; decode binds total_seq = past + seq.
CHECKS = (
    [
        (stem, dict(batch=b, seq=s))
        for stem in ("hf_bert_tiny", "hf_bert_tiny_sdpa", "hf_gpt2_tiny", "hf_llama_tiny", "hf_llama_tiny_sdpa")
        for b, s in ((2, 16), (1, 64), (3, 64))
    ]
    + [
        # TorchScript graphs carry no value_info, and onnx's own inference leaves
        # their attention unresolved at batch 1 (its data propagation stops in the
        # mask arithmetic); the mapper resolves every binding (tests/test_import.py)
        (stem, dict(batch=b, seq=s))
        for stem in ("hf_bert_tiny_ts", "hf_gpt2_tiny_ts", "hf_llama_tiny_ts")
        for b, s in ((2, 16), (3, 64), (2, 100))
    ]
    + [
        ("hf_llama_tiny_decode", dict(batch=b, seq=s, past_seq=p, total_seq=p + s))
        for b, s, p in ((2, 1, 16), (1, 1, 63), (2, 4, 16), (3, 5, 40))
    ]
)


def verify():
    """Compare flops.matrix_flops with per-node counts of the graphs."""
    sys.path.insert(0, HERE)
    from flops import graph_matrix_flops, matrix_flops

    ok = True
    for stem, binds in CHECKS:
        path = os.path.join(HERE, stem + ".onnx")
        want = matrix_flops(stem, binds["batch"], binds["seq"], binds.get("past_seq", 0))
        line = [f"{stem} {binds}: formula {want}"]
        for src in ("hybrid", "exporter", "onnx"):
            r = graph_matrix_flops(path, binds, source=src)
            match = r["flops"] == want and not r["unresolved"]
            if src == "hybrid":
                ok &= match
            un = [u[0] for u in r["unresolved"]]
            line.append(
                f"  {src:8s} {r['flops']:>10d} "
                f"{'MATCH' if match else 'differs'}; "
                f"{len(un)}/{r['nodes']} MatMul/Gemm unresolved {un}"
                + (f"; {len(r['unresolved_values'])} values not fully concrete" if src != "exporter" else "")
            )
        print("\n".join(line))
    print("ALL OK" if ok else "MISMATCH")
    return ok


def main(argv):
    if argv[:1] == ["verify"]:
        sys.exit(0 if verify() else 1)
    warnings.filterwarnings("ignore")
    names = argv or list(EXPORTS)
    for n in names:
        print(f"== {n}")
        EXPORTS[n]()


if __name__ == "__main__":
    main(sys.argv[1:])
