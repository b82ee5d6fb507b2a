"""Built-in CNNs: torchvision ResNet-50, MobileNetV2 (BatchNorm kept as nodes) and AlexNet.

Input "pixel_values" [batch, 3, 224, 224] NCHW float32, output "logits" [batch, 1000].
Names follow torchvision's module paths (layer1.0.conv1.weight, features.3.conv.1.0.weight).
"""

from __future__ import annotations

from dataclasses import dataclass

import onnx

from mapper.zoo.blocks import gemm
from mapper.zoo.builder import FLOAT, GraphBuilder

BN_EPS = 1e-5  # torch.nn.BatchNorm2d default, used by both torchvision models


@dataclass(frozen=True, slots=True)
class ConvShape:
    """A square conv's channels in and out, kernel size, stride and groups (depthwise: groups = channels)."""

    cin: int
    cout: int
    kernel: int
    stride: int
    groups: int = 1


def conv_bn(b: GraphBuilder, x: str, shape: ConvShape, conv: str, bn: str, act: str | None) -> str:
    """Conv (no bias) -> BatchNormalization -> optional Relu or ReLU6 (Clip 0..6)."""
    cin, cout, kernel, stride, groups = shape.cin, shape.cout, shape.kernel, shape.stride, shape.groups
    pad = kernel // 2
    with b.scope(conv):
        w = b.weight("weight", [cout, cin // groups, kernel, kernel])
        y = b.op(
            "Conv",
            x,
            w,
            kernel_shape=[kernel, kernel],
            strides=[stride, stride],
            pads=[pad] * 4,
            group=groups,
            dilations=[1, 1],
        )
    with b.scope(bn):
        y = b.op(
            "BatchNormalization",
            y,
            *(b.weight(leaf, [cout]) for leaf in ("weight", "bias", "running_mean", "running_var")),
            epsilon=BN_EPS,
        )
    if act == "relu":
        return b.op("Relu", y)
    if act == "relu6":
        return b.op("Clip", y, b.scalar(0.0), b.scalar(6.0))
    return y


def classifier(b: GraphBuilder, x: str, channels: int, name: str) -> None:
    """GlobalAveragePool -> Flatten -> Gemm to 1000 ImageNet classes, output "logits"."""
    flat = b.op("Flatten", b.op("GlobalAveragePool", x), axis=1)
    b.output(gemm(b, flat, channels, 1000, name), "logits", ["batch", 1000])


def image_input(b: GraphBuilder) -> str:
    return b.input("pixel_values", ["batch", 3, 224, 224], FLOAT)


# -- ResNet-50 ----------------------------------------------------------------------------------
RESNET50_BLOCKS = (3, 4, 6, 3)  # torchvision resnet50: Bottleneck, layers=[3, 4, 6, 3]
BOTTLENECK_EXPANSION = 4


def build_resnet50(inline_weights: bool = False) -> onnx.ModelProto:
    """ResNet-50 v1.5 (torchvision.models.resnet50; stride on the 3x3 conv, 25,557,032 params).

    Reference: torchvision/models/resnet.py (Bottleneck, _resnet(Bottleneck, [3, 4, 6, 3])),
    He et al. 2016 "Deep Residual Learning for Image Recognition".
    """
    b = GraphBuilder("resnet50", inline_weights=inline_weights)
    x = conv_bn(b, image_input(b), ConvShape(3, 64, 7, 2), "conv1", "bn1", "relu")
    x = b.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for stage, blocks in enumerate(RESNET50_BLOCKS):
        width = 64 * 2**stage
        for index in range(blocks):
            stride = 2 if stage > 0 and index == 0 else 1
            with b.scope(f"layer{stage + 1}.{index}"):
                x = _bottleneck(b, x, cin, width, stride)
            cin = width * BOTTLENECK_EXPANSION
    classifier(b, x, cin, "fc")
    return b.build(build_resnet50.__doc__)


def _bottleneck(b: GraphBuilder, x: str, cin: int, width: int, stride: int) -> str:
    cout = width * BOTTLENECK_EXPANSION
    y = conv_bn(b, x, ConvShape(cin, width, 1, 1), "conv1", "bn1", "relu")
    y = conv_bn(b, y, ConvShape(width, width, 3, stride), "conv2", "bn2", "relu")
    y = conv_bn(b, y, ConvShape(width, cout, 1, 1), "conv3", "bn3", None)
    identity = x
    if stride != 1 or cin != cout:
        identity = conv_bn(b, x, ConvShape(cin, cout, 1, stride), "downsample.0", "downsample.1", None)
    return b.op("Relu", b.op("Add", y, identity))


# -- MobileNetV2 --------------------------------------------------------------------------------
# torchvision mobilenetv2.py inverted_residual_setting: expand ratio t, channels c, repeats n, stride s
MOBILENETV2_SETTING = (
    (1, 16, 1, 1),
    (6, 24, 2, 2),
    (6, 32, 3, 2),
    (6, 64, 4, 2),
    (6, 96, 3, 1),
    (6, 160, 3, 2),
    (6, 320, 1, 1),
)
MOBILENETV2_STEM, MOBILENETV2_LAST = 32, 1280


def build_mobilenetv2(inline_weights: bool = False) -> onnx.ModelProto:
    """MobileNetV2 1.0 (torchvision.models.mobilenet_v2; 3,504,872 params).

    Reference: torchvision/models/mobilenetv2.py (InvertedResidual, width_mult=1.0, last_channel
    1280), Sandler et al. 2018 "MobileNetV2: Inverted Residuals and Linear Bottlenecks".
    ReLU6 exports as Clip(0, 6); depthwise convs are Conv with group = channels.
    """
    b = GraphBuilder("mobilenetv2", inline_weights=inline_weights)
    x = conv_bn(b, image_input(b), ConvShape(3, MOBILENETV2_STEM, 3, 2), "features.0.0", "features.0.1", "relu6")
    cin, feature = MOBILENETV2_STEM, 1
    for expand, cout, repeats, first_stride in MOBILENETV2_SETTING:
        for index in range(repeats):
            with b.scope(f"features.{feature}.conv"):
                x = _inverted_residual(b, x, cin, cout, first_stride if index == 0 else 1, expand)
            cin, feature = cout, feature + 1
    x = conv_bn(b, x, ConvShape(cin, MOBILENETV2_LAST, 1, 1), f"features.{feature}.0", f"features.{feature}.1", "relu6")
    classifier(b, x, MOBILENETV2_LAST, "classifier.1")  # classifier.0 is Dropout: absent at inference
    return b.build(build_mobilenetv2.__doc__)


def _inverted_residual(b: GraphBuilder, x: str, cin: int, cout: int, stride: int, expand: int) -> str:
    hidden = cin * expand
    y, layer = x, 0
    if expand != 1:
        y = conv_bn(b, y, ConvShape(cin, hidden, 1, 1), "0.0", "0.1", "relu6")
        layer = 1
    y = conv_bn(b, y, ConvShape(hidden, hidden, 3, stride, groups=hidden), f"{layer}.0", f"{layer}.1", "relu6")
    y = conv_bn(b, y, ConvShape(hidden, cout, 1, 1), f"{layer + 1}", f"{layer + 2}", None)
    return b.op("Add", x, y) if stride == 1 and cin == cout else y


# -- AlexNet ------------------------------------------------------------------------------------
# torchvision alexnet.py `features`: (index, channels in, out, kernel, stride, padding) of each Conv2d, each followed
# by its ReLU; MaxPool2d(3, 2) after features.1, .4 and .11
ALEXNET_CONVS = ((0, 3, 64, 11, 4, 2), (3, 64, 192, 5, 1, 2), (6, 192, 384, 3, 1, 1), (8, 384, 256, 3, 1, 1),
                 (10, 256, 256, 3, 1, 1))  # fmt: skip
ALEXNET_POOLS_AFTER = frozenset({0, 3, 10})
ALEXNET_POOLED, ALEXNET_HIDDEN = 256 * 6 * 6, 4096


def build_alexnet(inline_weights: bool = False) -> onnx.ModelProto:
    """AlexNet (torchvision.models.alexnet; 61,100,840 params), as the exporter writes it at 224x224.

    Reference: torchvision/models/alexnet.py (features, AdaptiveAvgPool2d((6, 6)), classifier), Krizhevsky et al.
    2012 "ImageNet Classification with Deep Convolutional Neural Networks" (one-GPU variant, Krizhevsky 2014).
    Conv2d keeps its bias; AdaptiveAvgPool2d to 6x6 from a 6x6 map exports as AveragePool of kernel 1; Dropout
    (classifier.0 and .3) is absent at inference.
    """
    b = GraphBuilder("alexnet", inline_weights=inline_weights)
    x = image_input(b)
    for index, cin, cout, kernel, stride, pad in ALEXNET_CONVS:
        with b.scope(f"features.{index}"):
            w, bias = b.weight("weight", [cout, cin, kernel, kernel]), b.weight("bias", [cout])
            x = b.op("Conv", x, w, bias, kernel_shape=[kernel, kernel], strides=[stride, stride], pads=[pad] * 4)
        with b.scope(f"features.{index + 1}"):
            x = b.op("Relu", x)
        if index in ALEXNET_POOLS_AFTER:
            with b.scope(f"features.{index + 2}"):
                x = b.op("MaxPool", x, kernel_shape=[3, 3], strides=[2, 2])
    with b.scope("avgpool"):
        x = b.op("AveragePool", x, kernel_shape=[1, 1], strides=[1, 1])
    x = b.op("Flatten", x, axis=1)
    x = b.op("Relu", gemm(b, x, ALEXNET_POOLED, ALEXNET_HIDDEN, "classifier.1"))
    x = b.op("Relu", gemm(b, x, ALEXNET_HIDDEN, ALEXNET_HIDDEN, "classifier.4"))
    b.output(gemm(b, x, ALEXNET_HIDDEN, 1000, "classifier.6"), "logits", ["batch", 1000])
    return b.build(build_alexnet.__doc__)
