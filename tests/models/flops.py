"""Closed-form matrix FLOPs of the tiny Hugging Face ONNX fixtures in this folder.

"Matrix FLOPs" = 2 * MACs summed over every MatMul and Gemm node of the graph
(bias adds, softmax, norms, activations are NOT counted).  The closed forms
below were checked against a per-node count of the exported graphs (see
`graph_matrix_flops` and README.md).  Configs must match export_hf.py.

    from tests.models.flops import matrix_flops, DIM_NAMES, CONFIGS
    matrix_flops("hf_llama_tiny", batch=2, seq=16)
    matrix_flops("hf_llama_tiny_decode", batch=2, seq=1, past=16)
"""

from __future__ import annotations

import ast
import operator

# family: "bert" (BertModel + pooler), "gpt2" (GPT2LMHeadModel), "llama"
# (LlamaForCausalLM).  H hidden, L layers, nh heads, kvh kv heads, hd head
# dim, I FFN intermediate, V vocab, P max positions.
_BERT = dict(family="bert", L=2, H=128, nh=4, kvh=4, hd=32, I=512, V=1000, P=128, type_vocab=2)
_GPT2 = dict(family="gpt2", L=2, H=128, nh=4, kvh=4, hd=32, I=512, V=1000, P=128)
_LLAMA = dict(family="llama", L=2, H=128, nh=4, kvh=2, hd=32, I=352, V=1000, P=256)

CONFIGS = {
    "hf_bert_tiny": _BERT,
    "hf_bert_tiny_sdpa": _BERT,
    "hf_gpt2_tiny": _GPT2,
    "hf_llama_tiny": _LLAMA,
    "hf_llama_tiny_sdpa": _LLAMA,
    "hf_llama_tiny_decode": _LLAMA,
    "hf_bert_tiny_ts": _BERT,  # the TorchScript exporter (dynamo=False)
    "hf_gpt2_tiny_ts": _GPT2,
    "hf_llama_tiny_ts": _LLAMA,
    "optimum_gpt2_tiny_with_past": _GPT2,  # Optimum's text-generation-with-past export (export_optimum.py)
    # transformers 4.57's rotary embedding (inv_freq @ position_ids, [hd/2, 1] x [1, S]) stays a MatMul in
    # Optimum's TorchScript graph; the dynamo and transformers-5 exports compute it without one
    "optimum_llama_tiny_with_past": dict(_LLAMA, rope_matmul=True),
}

# Symbolic dim names exactly as they appear on the graph inputs.
_BS = {"batch": "batch", "seq": "seq"}
DIM_NAMES = {
    "hf_bert_tiny": _BS,
    "hf_bert_tiny_sdpa": _BS,
    "hf_gpt2_tiny": _BS,
    "hf_llama_tiny": _BS,
    "hf_llama_tiny_sdpa": _BS,
    "hf_bert_tiny_ts": _BS,
    "hf_gpt2_tiny_ts": _BS,
    "hf_llama_tiny_ts": _BS,
    "optimum_gpt2_tiny_with_past": {"batch": "batch_size", "seq": "sequence_length", "past": "past_sequence_length"},
    "optimum_llama_tiny_with_past": {"batch": "batch_size", "seq": "sequence_length", "past": "past_sequence_length"},
    # input_ids [batch, seq]; attention_mask [batch, total_seq] where
    # total_seq must be bound to past_seq + seq; past_kv_i [batch, 2, past_seq, 32]
    "hf_llama_tiny_decode": {"batch": "batch", "seq": "seq", "past": "past_seq", "total": "total_seq"},
}


def matrix_flops(model_file_stem: str, batch: int, seq: int, past: int = 0) -> int:
    """2*MACs of all MatMul/Gemm work for one forward pass of the fixture.

    seq is the number of new tokens; past (hf_llama_tiny_decode, optimum_gpt2_tiny_with_past) is the
    KV-cache length already held, so attention spans T = past + seq keys.
    """
    c = CONFIGS[model_file_stem]
    if past and model_file_stem not in (
        "hf_llama_tiny_decode",
        "optimum_gpt2_tiny_with_past",
        "optimum_llama_tiny_with_past",
    ):
        raise ValueError(f"{model_file_stem} has no past KV input")
    B, S, T = batch, seq, past + seq
    L, H, nh, kvh, hd, I, V = (c[k] for k in ("L", "H", "nh", "kvh", "hd", "I", "V"))
    BS = B * S
    attn = 2 * B * nh * S * T * hd * 2  # Q K^T and P V
    fam = c["family"]
    if fam == "bert":
        layer = 4 * 2 * BS * H * H + 2 * 2 * BS * H * I + attn
        return L * layer + 2 * B * H * H  # + pooler Gemm on token 0
    if fam == "gpt2":
        # c_attn (H->3H), c_proj (H->H), c_fc (H->I), mlp c_proj (I->H): Gemm
        layer = 2 * BS * H * 3 * H + 2 * BS * H * H + 2 * 2 * BS * H * I + attn
        return L * layer + 2 * BS * H * V  # tied LM head (MatMul)
    if fam == "llama":
        q_o = 2 * 2 * BS * H * nh * hd
        k_v = 2 * 2 * BS * H * kvh * hd
        mlp = 3 * 2 * BS * H * I  # gate, up, down
        rope = 2 * BS * (hd // 2) if c.get("rope_matmul") else 0
        return L * (q_o + k_v + mlp + attn) + 2 * BS * H * V + rope
    raise KeyError(fam)


# --------------------------------------------------------------------------
# Per-node count of an exported graph (needs the `onnx` package).

_BINOPS = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}


def eval_dim(expr: str, binds: dict) -> int:
    """Evaluate a torch-exported dim expression such as 'past_seq + seq'."""

    def ev(n):
        if isinstance(n, ast.Expression):
            return ev(n.body)
        if isinstance(n, ast.Constant) and isinstance(n.value, int):
            return n.value
        if isinstance(n, ast.Name):
            return binds[n.id]
        if isinstance(n, ast.BinOp) and type(n.op) in _BINOPS:
            return _BINOPS[type(n.op)](ev(n.left), ev(n.right))
        if isinstance(n, ast.UnaryOp) and isinstance(n.op, ast.USub):
            return -ev(n.operand)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Name) and n.func.id.lower() in ("max", "min"):
            f = max if n.func.id.lower() == "max" else min
            return f(ev(a) for a in n.args)
        raise ValueError(f"cannot evaluate dim {expr!r}")

    return ev(ast.parse(expr, mode="eval"))


def _shape_table(graph):
    t = {}
    for vi in list(graph.value_info) + list(graph.input) + list(graph.output):
        dims = []
        for d in vi.type.tensor_type.shape.dim:
            dims.append(d.dim_value if d.HasField("dim_value") else (d.dim_param or None))
        t[vi.name] = dims
    for init in graph.initializer:  # dims are known without the data
        t[init.name] = list(init.dims)
    return t


def _node_flops(node, a, b):
    if node.op_type == "Gemm":
        at = {x.name: x.i for x in node.attribute}
        M, K = (a[1], a[0]) if at.get("transA") else (a[0], a[1])
        N = b[0] if at.get("transB") else b[1]
        return 2 * M * N * K
    a = [1] + a if len(a) == 1 else a
    b = b + [1] if len(b) == 1 else b
    if a[-1] != b[-2]:
        raise ValueError(f"{node.name}: K mismatch {a} x {b}")
    n = max(len(a), len(b)) - 2
    pa, pb = [1] * (n - len(a) + 2) + a[:-2], [1] * (n - len(b) + 2) + b[:-2]
    batch = 1
    for x, y in zip(pa, pb):
        batch *= max(x, y)
    return 2 * batch * a[-2] * a[-1] * b[-1]


def graph_matrix_flops(path: str, binds: dict, *, source: str = "onnx") -> dict:
    """Sum 2*M*N*K over the MatMul/Gemm nodes of an exported fixture.

    binds maps symbolic input dim names to ints (see DIM_NAMES).
    source="onnx": drop the exporter's value_info, make the graph inputs
    concrete and run onnx.shape_inference (strict, data_prop); operands it
    cannot resolve are reported in "unresolved" and NOT counted.
    source="exporter": use only the exporter's own symbolic value_info
    (expressions like 'past_seq + seq') evaluated under binds; values that
    have no value_info (inside the decomposed SDPA) are "unresolved".
    source="hybrid": write the evaluated exporter dims into the graph, then
    run onnx.shape_inference (strict) over it: fills the gaps and fails
    loudly if ONNX's inference disagrees with the exporter's shapes.
    Returns {"flops", "nodes", "unresolved", "unresolved_values"}.
    """
    import onnx
    from onnx import shape_inference

    m = onnx.load(path, load_external_data=False)
    if source in ("onnx", "hybrid"):
        for vi in m.graph.input:
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param:
                    d.dim_value = binds[d.dim_param]
        for vi in list(m.graph.value_info) + list(m.graph.output):
            for d in vi.type.tensor_type.shape.dim:
                if d.dim_param:
                    if source == "hybrid":
                        d.dim_value = eval_dim(d.dim_param, binds)
                    else:
                        d.Clear()  # keep rank, forget the dim
        if source == "onnx":
            del m.graph.value_info[:]
        # strict: raises if a concrete exporter shape contradicts ONNX's own
        m = shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
        table = _shape_table(m.graph)
        conc = lambda dims: dims
    elif source == "exporter":
        table = _shape_table(m.graph)
        conc = lambda dims: [eval_dim(d, binds) if isinstance(d, str) else d for d in dims]
    else:
        raise ValueError(source)
    total, nodes, unresolved = 0, 0, []
    for node in m.graph.node:
        if node.op_type not in ("MatMul", "Gemm"):
            continue
        nodes += 1
        a, b = table.get(node.input[0]), table.get(node.input[1])
        if a is None or b is None:
            unresolved.append((node.name, a, b))
            continue
        a, b = conc(a), conc(b)
        if any(not isinstance(x, int) for x in a + b):
            unresolved.append((node.name, a, b))
            continue
        total += _node_flops(node, a, b)
    bad = []
    if source != "exporter":
        bad = sorted(k for k, v in table.items() if v is None or any(not isinstance(x, int) for x in v))
    return {"flops": total, "nodes": nodes, "unresolved": unresolved, "unresolved_values": bad}
