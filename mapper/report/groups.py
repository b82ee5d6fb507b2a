"""Kernels under the names people know, and repeated layers grouped (the Overview, Kernels page, sheet).

A kernel is named after its first node. Exporters name a node after the module that made it: the
TorchScript exporter (and the zoo) write "/model/layers.0/mlp/up_proj/MatMul", whose module path is
`model.layers.0.mlp.up_proj`. Kernels of the same module in every layer (`model.layers.*.mlp.up_proj`,
one per layer) are one row with their count and total share, so a 32-layer model's top bottlenecks are
not five copies of one layer's kernel at 1-3% each.
"""

from __future__ import annotations

import re

# A list index in a module path ("layers.0", "h.11", "layer.3"): what differs between repeated layers.
LAYER_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")
FUSED_SUFFIX = re.compile(r"\+\d+$")  # "<first node>+2": a kernel of three fused nodes


def module_path(kernel_name: str) -> str:
    """The exporter's module path of a kernel ("/model/layers.0/mlp/up_proj/MatMul+1" ->
    "model.layers.0.mlp.up_proj"); a name without module scopes ("node_linear_3") is its own path."""
    name = FUSED_SUFFIX.sub("", kernel_name)
    parts = [p for p in name.split("/") if p]
    if not name.startswith("/") or len(parts) < 2:  # noqa: PLR2004 - a module and its op leaf
        return name
    return ".".join(parts[:-1])


def layer_pattern(path: str) -> str:
    """The module path with its layer indices as "*": "model.layers.7.mlp.up_proj" -> "model.layers.*.mlp.up_proj"."""
    return LAYER_INDEX.sub("*", path)


def _leaf(kernel_name: str) -> str:
    """What names a kernel inside its module: the op leaf and fused count ("MatMul_1+2")."""
    return kernel_name.rsplit("/", 1)[-1] if kernel_name.startswith("/") else kernel_name


def repeated_groups(kernels: list[dict]) -> list[tuple[str, list[dict]]]:
    """The document's kernels with repeated layers together, in first-seen order: (label, members). The label
    is the pattern, "x N" when repeated, the op leaf added where two groups of one module would read alike.
    Kernels of one module path pattern and op leaf group; anything else stays alone."""
    groups: dict[tuple[str, str], list[dict]] = {}
    for k in kernels:
        pattern = layer_pattern(module_path(k["name"]))
        groups.setdefault((pattern, _leaf(k["name"])), []).append(k)
    base = {key: key[0] if len(m) > 1 else module_path(m[0]["name"]) for key, m in groups.items()}
    uses: dict[str, int] = {}
    for label in base.values():
        uses[label] = uses.get(label, 0) + 1
    out = []
    for key, members in groups.items():
        label = base[key] if uses[base[key]] == 1 or base[key] == key[1] else f"{base[key]}/{key[1]}"
        out.append((f"{label} x {len(members)}" if len(members) > 1 else label, members))
    return out


def group_kernels(kernels: list[dict], latency_s: float) -> list[dict]:
    """The document's kernels with repeated layers as one row each (`repeated_groups`), slowest total first:
    `kernel` (the group's label), `count`, `time_s` (total), `share` of the latency, and the class, evidence
    and owner of the group's slowest member."""
    rows = []
    for label, members in repeated_groups(kernels):
        slowest = max(members, key=lambda k: k["time_s"])
        time_s = sum(k["time_s"] for k in members)
        rows.append(
            {
                "kernel": label,
                "count": len(members),
                "time_s": time_s,
                "share": time_s / latency_s if latency_s else 0.0,
                "ops": slowest["ops"],
                "bottleneck": slowest["bottleneck"],
                "evidence": slowest["evidence"],
                "owner": slowest["owner"],
                "first": members[0]["name"],
            }
        )
    rows.sort(key=lambda r: (-r["time_s"], r["kernel"]))
    return rows
