"""`mapper train`: a training step of a model on a device plan: step time, tokens per second per device, MFU and
HFU, memory per device, the bubble, exposed-communication and recompute shares; the first failure (capacity)
with the smallest plan that fits, and with --review the levers re-mapped for their gain."""

from __future__ import annotations

import argparse
import json

import mapper
from mapper.core.units import format_bytes, format_duration, format_number

SHOWN_SHARE = 0.005  # layer types under half a percent of the step are not listed


def add_arguments(sub) -> None:
    help_text = "map a training step: step time, MFU/HFU, memory per device, bubble and communication"
    p = sub.add_parser("train", help=help_text, description=help_text)
    p.add_argument("model", help="a built-in name (see `mapper zoo`), a config.json or an .onnx decoder")
    p.add_argument("--hw", default="h100-sxm", help="a profile name (see `mapper hw`) or a profile file")
    p.add_argument("--devices", type=int, help="devices in all: must be tp x pp x dp x cp")
    for flag, text in (
        ("--tp", "tensor-parallel degree (with sequence parallelism)"),
        ("--pp", "pipeline stages"),
        ("--dp", "data-parallel replicas"),
        ("--cp", "context-parallel degree (ring attention)"),
        ("--ep", "expert-parallel degree (MoE)"),
        ("--vp", "virtual stages a device (interleaved 1F1B)"),
    ):
        p.add_argument(flag, type=int, default=1, help=text)
    p.add_argument("--zero", type=int, default=1, help="ZeRO stage over DP: 0-3 (3 = FSDP); default 1")
    p.add_argument("--micro-batch", type=int, default=1, help="sequences a micro-batch")
    p.add_argument("--global-batch", type=int, default=0, help="sequences a step (default: micro-batch x dp)")
    p.add_argument("--seq", type=int, default=2048, help="tokens a sequence")
    p.add_argument("--recompute", default="selective", choices=mapper.RECOMPUTE_POLICIES)
    p.add_argument("--dtype", default="auto", choices=mapper.TRAIN_DTYPES, help="auto: the model's released precision")
    p.add_argument("--schedule", default="1f1b", choices=mapper.PIPELINE_SCHEDULES, help="pipeline schedule")
    p.add_argument("--no-sequence-parallel", action="store_true", help="TP without sequence parallelism")
    p.add_argument("--offload-optimizer", action="store_true", help="optimizer state in host memory")
    p.add_argument("--no-overlap", action="store_true", help="DP gradient reduction after the backward, not during")
    p.add_argument("--dropout", action="store_true", help="the model trains with dropout (its masks are kept)")
    p.add_argument("--unfused-attention", action="store_true", help="attention without FlashAttention (scores kept)")
    p.add_argument("--review", action="store_true", help="re-map the levers (recompute, ZeRO, batch, TP/PP/CP, fp8)")
    p.add_argument("--json", action="store_true", help="print one JSON document")
    p.set_defaults(func=cmd_train)


def options_from(args) -> mapper.TrainOptions:
    options = mapper.TrainOptions(
        tp=args.tp, pp=args.pp, dp=args.dp, cp=args.cp, ep=args.ep, vp=args.vp, zero=args.zero,
        micro_batch=args.micro_batch, global_batch=args.global_batch, seq=args.seq, recompute=args.recompute,
        dtype=args.dtype, schedule=args.schedule, sequence_parallel=not args.no_sequence_parallel,
        offload_optimizer=args.offload_optimizer, overlap_grad_reduce=not args.no_overlap, dropout=args.dropout,
        fused_attention=not args.unfused_attention,
    )  # fmt: skip
    mapper.check_train_devices(options, args.devices)
    return options


def cmd_train(args: argparse.Namespace) -> int:
    hw = mapper.load_hardware(args.hw)
    options = options_from(args)
    review = mapper.review_training(args.model, hw, options, levers=args.review)
    doc = mapper.training_document(review)
    if args.json:
        print(json.dumps(doc, indent=1, allow_nan=False))
    else:
        print_training(doc)
    return 0


def print_training(doc: dict) -> None:
    t, m, o = doc["totals"], doc["memory"], doc["options"]
    plan = f"TP {o['tp']} x PP {o['pp']} x DP {o['dp']} x CP {o['cp']} = {o['devices']} devices"
    print(
        f"{doc['model']} on {doc['hardware']} ({plan}; {t['dtype']}, recompute {o['recompute']}, ZeRO {o['zero']};"
        f" {o['global_batch']} x {o['seq']} tokens, micro-batch {o['micro_batch']}, {o['micro_batches']}"
        f" micro-batches): step {format_duration(t['step_time_s'])},"
        f" {format_number(t['tokens_per_s_per_device'], 'tok/s')} a device, MFU {t['mfu']:.1%}, HFU {t['hfu']:.1%}"
    )
    print(
        f"  shares of the step: bubble {t['bubble_share']:.1%}, exposed communication"
        f" {t['exposed_communication_share']:.1%}, TP collectives {t['tensor_parallel_share']:.1%}, recompute"
        f" {t['recompute_share']:.1%}, optimizer {t['optimizer_share']:.1%}; memory stall"
        f" {t['memory_stall_fraction']:.1%}"
    )
    parts = ", ".join(
        f"{name} {format_bytes(m[key])}"
        for name, key in (
            ("weights", "weight_bytes"),
            ("gradients", "gradient_bytes"),
            ("optimizer", "optimizer_bytes"),
            ("activations", "activation_bytes"),
            ("logits", "logits_bytes"),
            ("recompute working set", "recompute_working_bytes"),
        )
        if m[key]
    )
    fits = "fits" if m["fits"] else f"does NOT fit (short {format_bytes(m['shortfall_bytes'])})"
    print(
        f"  memory per device (stage {m['stage']}): {format_bytes(m['per_device_bytes'])} of"
        f" {format_bytes(m['capacity_bytes'])}, {fits}: {parts}"
    )
    shown = ", ".join(f"{k} {v:.1%}" for k, v in doc["layer_shares"].items() if v >= SHOWN_SHARE)
    print(f"  time by layer type: {shown}")
    review = doc["review"]
    print(f"  first failure: {review['first_failure']}")
    fix = review.get("fix")
    if fix:
        print(f"  fix: {fix['change']} -> {fix['text']}")
    for lever in review.get("levers", []):
        print(f"  lever: {lever['change']}: {lever['text']} (owner: {lever['owner']}; rollback: {lever['rollback']})")
    print(f"  FLOP convention: {t['flop_convention']}")
    for note in doc["assumptions"][2:]:  # past the convention and the gradient sync: what the step assumed
        print(f"  note: {note}")
