"""Kernels under the names people know, and repeated layers grouped (the Overview, Kernels page, sheet).

A kernel is named by the module that made it and what it is (`plan.kernel_names`): "model.layers.0.mlp.up_proj ·
matmul + mul". Kernels of the same module in every layer (`model.layers.*.mlp.up_proj · matmul + mul`, one per
layer) are one row with their count and total share, so a 32-layer model's top bottlenecks are not five copies
of one layer's kernel at 1-3% each.
"""

from __future__ import annotations

import re

from mapper.plan.kernel_names import kernel_module

# A list index in a module path ("layers.0", "h.11", "layer.3"): what differs between repeated layers.
LAYER_INDEX = re.compile(r"(?<=\.)\d+(?=\.|$)")


def module_path(kernel_name: str) -> str:
    """The module path a kernel's name starts with ("model.layers.0.mlp.up_proj · matmul + mul" ->
    "model.layers.0.mlp.up_proj"); "" for a kernel at the model's root ("gather")."""
    return kernel_module(kernel_name)


def layer_pattern(path: str) -> str:
    """The module path with its layer indices as "*": "model.layers.7.mlp.up_proj" -> "model.layers.*.mlp.up_proj"."""
    return LAYER_INDEX.sub("*", path)


def name_pattern(kernel_name: str) -> str:
    """A kernel's name with its module's layer indices as "*": the same kernel of every layer reads alike."""
    module = kernel_module(kernel_name)
    return layer_pattern(module) + kernel_name[len(module) :]


def repeated_groups(kernels: list[dict]) -> list[tuple[str, list[dict]]]:
    """The document's kernels with repeated layers together, in first-seen order: (label, members). Kernels
    whose names differ only in their layer indices group, labelled by that pattern and "x N"; a kernel of its
    own keeps its name."""
    groups: dict[str, list[dict]] = {}
    for k in kernels:
        groups.setdefault(name_pattern(k["name"]), []).append(k)
    return [
        (f"{pattern} x {len(members)}" if len(members) > 1 else members[0]["name"], members)
        for pattern, members in groups.items()
    ]


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
