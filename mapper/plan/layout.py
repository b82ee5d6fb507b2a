"""Data layout: which conv layout the kernels run in, and the transposes that costs.

Between fusion and cost. ONNX convs are NCHW; tensor-core GPUs prefer NHWC
(channels innermost, so a K-slice is contiguous). With `auto` the profile's
preferred layout is used and a transpose kernel is inserted wherever a spatial
tensor crosses the boundary of the conv region (layout-agnostic ops, such as
elementwise, pooling and BN, follow the region's layout). With a forced layout
that differs from the profile's, every conv pays a conversion of its input.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from mapper.core.errors import MapperError
from mapper.core.graph import Graph, LayerType
from mapper.core.result import Kernel
from mapper.core.timeline import Kernels
from mapper.core.vocab import Engine, KernelRule, Layout, values
from mapper.plan.precision import Sizer

LAYOUTS = values(Layout)
# Kernels whose ops work in either layout: the conv region spreads through them.
REGION_LAYERS = frozenset({LayerType.CONV, LayerType.POOLING, LayerType.ELEMENTWISE, LayerType.NORMALIZATION})
GRAPH_LAYOUT = "nchw"  # ONNX's convention for Conv
IMAGE_RANK = 4  # an N, C, H, W tensor: the only rank a layout change converts


def _transpose(name: str, tensor_bytes: float, note: str) -> Kernel:
    return Kernel(
        name=name,
        nodes=(),
        op_types=("Transpose",),
        rule=KernelRule.LAYOUT_TRANSFORM,
        engine=Engine.VECTOR,
        layer_type=LayerType.DATA_MOVEMENT,
        flops=0.0,
        matrix_flops=0.0,
        sfu_ops=0.0,
        dram_bytes=2 * tensor_bytes,
        weight_bytes=0.0,
        note=note,
    )


def plan_layout(
    graph: Graph, kernels: Sequence[Kernel], layout: str, preferred: str, sizer: Sizer
) -> tuple[Sequence[Kernel], str]:
    """Kernels with conv layouts set and transposes inserted; and the layout chosen."""
    if layout not in LAYOUTS:
        raise MapperError(f"layout {layout!r} is not one of {', '.join(LAYOUTS)}")
    if not any(k.layer_type is LayerType.CONV for k in Kernels.of(kernels).templates):  # read, none written
        return kernels, "n/a"
    chosen = preferred if layout == Layout.AUTO else layout
    region = {n for k in kernels if k.layer_type in REGION_LAYERS for n in k.nodes}
    out: list[Kernel] = []
    if chosen == GRAPH_LAYOUT and layout == Layout.AUTO:
        return [replace(k, layout=chosen) if k.layer_type is LayerType.CONV else k for k in kernels], chosen
    node_of = {n.name: n for n in graph.nodes}
    converted: set[str] = set()
    for k in kernels:
        if k.layer_type is LayerType.CONV and chosen != preferred:
            # the library converts this conv's input to its native layout and back
            x = graph.tensors[node_of[k.nodes[0]].inputs[0]]
            out.append(
                _transpose(
                    f"{k.name}:to-{preferred}",
                    sizer.bytes(x),
                    f"{chosen.upper()} forced on a {preferred.upper()} device: per-conv conversion",
                )
            )
        elif chosen != GRAPH_LAYOUT:
            for name in k.nodes:
                for t in node_of[name].inputs:
                    spec = graph.tensors.get(t)
                    if not spec or len(spec.shape) != IMAGE_RANK or t in converted or t in graph.weights:
                        continue
                    src = graph.producer(t)
                    crosses_in = (
                        name in region and k.layer_type is LayerType.CONV and (src is None or src.name not in region)
                    )
                    crosses_out = name not in region and src is not None and src.name in region
                    if (crosses_in or crosses_out) and spec.shape[2] * spec.shape[3] > 1:
                        converted.add(t)
                        direction = f"{GRAPH_LAYOUT}->{chosen}" if crosses_in else f"{chosen}->{GRAPH_LAYOUT}"
                        out.append(
                            _transpose(
                                f"transpose:{t}",
                                sizer.bytes(spec),
                                f"inserted: {direction.upper()} at the conv region boundary",
                            )
                        )
        out.append(replace(k, layout=chosen) if k.layer_type is LayerType.CONV else k)
    return out, chosen
