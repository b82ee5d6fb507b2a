"""What every command shares: the one-line parser error, --dim parsing, the model and plan options.

Bad input of any kind: a MapperError (printed as one line beginning `error:`, exit code 2).
"""

from __future__ import annotations

import argparse
import dataclasses

import mapper
from mapper.core.errors import MapperError
from mapper.model.dim_defaults import default_bindings


class Parser(argparse.ArgumentParser):
    def error(self, message: str):  # one line, exit 2, like every other bad input
        raise MapperError(
            f"{message} (see `mapper {self.prog.split()[-1]} --help`)"
            if " " in self.prog
            else f"{message} (see `mapper --help`)"
        )


def parse_dim(text: str) -> tuple[str, int]:
    name, sep, value = text.partition("=")
    if not sep or not name or not value.strip().lstrip("-").isdigit():
        raise MapperError(f"--dim {text!r} must look like NAME=INTEGER, e.g. --dim seq=512")
    return name.strip(), int(value)


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("model", help="an .onnx file or a built-in name (see `mapper zoo`)")
    p.add_argument("--hw", default="h100-sxm", help="a profile name (see `mapper hw`) or a profile file")
    p.add_argument("--batch", type=int, help="binds the model's batch dim")
    p.add_argument("--seq", type=int, help="binds the model's sequence dim")
    p.add_argument("--dim", action="append", default=[], metavar="NAME=VALUE", help="binds a symbolic dim by name")
    add_plan_args(p)


def add_plan_args(p: argparse.ArgumentParser) -> None:
    """Every plan option's flag (options_from reads them back)."""
    p.add_argument(
        "--dtype",
        default="auto",
        choices=mapper.PLAN_DTYPES,
        help="the plan's precision; auto: the model's released precision",
    )
    p.add_argument(
        "--weight-dtype", default="same", choices=mapper.WEIGHT_DTYPES, help="weight-only quantization (decoder LLMs)"
    )
    p.add_argument("--fusion", default="default", choices=mapper.FUSION_POLICIES, help="the fusion policy")
    p.add_argument(
        "--attention-fusion",
        choices=("auto", "on", "off"),
        default="auto",
        help="FlashAttention-style fusion: auto follows --fusion (on in aggressive)",
    )
    p.add_argument(
        "--layout", default="auto", choices=mapper.LAYOUTS, help="conv layout; auto: the profile's preferred"
    )
    p.add_argument("--power-cap-w", type=float, help="cap the board power below the profile's TDP")
    p.add_argument("--devices", type=int, help="devices in all (= tp x pp x dp; the rest of tp x pp becomes dp)")
    p.add_argument("--tp", type=int, default=1, help="tensor-parallel degree (Megatron column/row GEMMs)")
    p.add_argument("--pp", type=int, default=1, help="pipeline stages, balanced by time")
    p.add_argument("--dp", type=int, help="data-parallel replicas")
    p.add_argument("--overlap-collectives", action="store_true", help="hide collectives behind the next compute")
    p.add_argument("--ep", type=int, default=1, help="expert-parallel degree (mixture-of-experts layers)")
    p.add_argument(
        "--attention-dp",
        action="store_true",
        help="MoE at --tp 1 --ep N: attention data-parallel over the N devices, each its own requests and KV cache",
    )
    p.add_argument(
        "--expert-tp",
        action="store_true",
        help="with --attention-dp: slice every expert over the N ranks (TensorRT-LLM MoE TP) instead of E/N whole",
    )
    p.add_argument(
        "--expert-imbalance", type=float, default=1.0, help="MoE load imbalance: busiest expert's tokens / mean"
    )
    p.add_argument(
        "--runtime", default="auto", choices=mapper.RUNTIMES, help="runtime preset (sets --kv-cache and --launch)"
    )
    p.add_argument("--kv-cache", default="auto", choices=mapper.KV_CACHE_MODES, help="decoder KV-cache update")
    p.add_argument("--launch", default="auto", choices=mapper.LAUNCHES, help="eager launches or graph replay")
    p.add_argument("--sparsity", default="dense", choices=mapper.SPARSITIES, help="structured sparsity of weights")
    p.add_argument(
        "--kv-dtype", default="same", choices=mapper.KV_DTYPES, help="the KV cache's storage precision (decoders)"
    )
    p.add_argument(
        "--gqa-decode",
        default="auto",
        choices=mapper.GQA_DECODES,
        help="decode attention over grouped-query heads: packed into one kernel's rows, or per head; auto: the"
        " runtime preset's",
    )


def parallel_degrees(devices: int | None, tp: int, pp: int, dp: int | None) -> tuple[int, int, int]:
    """--devices with --tp/--pp/--dp: the devices left over by tp x pp become data-parallel replicas."""
    for name, value in (("tp", tp), ("pp", pp), ("dp", dp), ("devices", devices)):
        if value is not None and value < 1:
            raise MapperError(f"--{name} {value} must be at least 1")
    if devices is None:
        return tp, pp, dp or 1
    if devices % (tp * pp):
        raise MapperError(f"--devices {devices} is not a multiple of tp x pp = {tp * pp}")
    if dp is not None and dp * tp * pp != devices:
        raise MapperError(f"--devices {devices} != tp x pp x dp = {tp * pp * dp}; drop one of them")
    return tp, pp, devices // (tp * pp)


def options_from(args) -> mapper.PlanOptions:
    """Every plan option from its flag (each PlanOptions field's flag writes the field's name: tests/test_reproduce.py
    checks the table), with --devices resolved into TP x PP x DP and --attention-fusion's auto/on/off."""
    tp, pp, dp = parallel_degrees(args.devices, args.tp, args.pp, args.dp)
    chosen = {f.name: getattr(args, f.name) for f in dataclasses.fields(mapper.PlanOptions)}
    attention = {"auto": None, "on": True, "off": False}[args.attention_fusion]
    return mapper.PlanOptions(**chosen | {"tp": tp, "pp": pp, "dp": dp, "attention_fusion": attention})


def workload_from(args) -> mapper.Workload:
    dims = dict(parse_dim(d) for d in args.dim)
    return mapper.load_workload(args.model, dims or None, batch=args.batch, seq=args.seq)


def add_store_args(p: argparse.ArgumentParser) -> None:
    """--store/--revision: record the command's result in the run store (mapper/cli/store.py records it)."""
    p.add_argument(
        "--store",
        nargs="?",
        const="default",
        default=None,
        metavar="URL",
        help="record the run: a database URL (sqlite:///runs.sqlite, postgresql://...), a file, or none for the"
        " default store in the user's data directory; default: $MAPPER_STORE when set",
    )
    p.add_argument(
        "--revision", help="the revision label of what was mapped (default: the git commit of the current directory)"
    )


def add_load_args(p: argparse.ArgumentParser) -> None:
    """The serving question of `map`, `serve` and `review`, under the same names with one meaning each."""
    p.add_argument(
        "--rate", type=float, help="offered requests per second (default: derived from the targets, else saturation)"
    )
    p.add_argument(
        "--max-batch", type=int, help="requests per batch at most; decoders: running sequences (default: the batch)"
    )
    p.add_argument(
        "--max-wait-ms", type=float, default=0.0, help="dynamic batching: longest wait for a batch to fill (ms)"
    )
    for row in mapper.TARGET_ROWS:
        p.add_argument(f"--{row.flag}", type=float, metavar="MS", help=f"the {row.label} target (milliseconds)")
    p.add_argument("--prompt-tokens", type=int, help="decoders: the prompt length (default: the slice's context)")
    p.add_argument(
        "--output-tokens", type=int, default=mapper.DEFAULT_OUTPUT_TOKENS, help="decoders: output tokens per request"
    )
    p.add_argument("--requests", type=int, help="requests simulated (default: 20000, decoders 1000)")
    p.add_argument("--load-curve", action="store_true", help="request queues: also sweep offered load to saturation")
    p.add_argument(
        "--speculative-draft",
        metavar="MODEL",
        help="decoders: serve with speculative decoding, this draft model proposing tokens (a built-in, an .onnx"
        " file or a config) on the same devices; needs --acceptance-rate",
    )
    p.add_argument(
        "--draft-tokens",
        type=int,
        help=f"speculative decoding: tokens the draft proposes a round (default {mapper.DEFAULT_DRAFT_TOKENS})",
    )
    p.add_argument(
        "--acceptance-rate",
        type=float,
        help="speculative decoding: the chance the target accepts each draft token, in [0, 1) (measure it)",
    )


def targets_from(args) -> mapper.Targets:
    values = {row.field: getattr(args, row.flag.replace("-", "_")) for row in mapper.TARGET_ROWS}
    for row in mapper.TARGET_ROWS:
        if values[row.field] is not None and not values[row.field] > 0:
            raise MapperError(f"--{row.flag} {values[row.field]:g} must be a positive number of milliseconds")
    return mapper.Targets(**{k: v / 1e3 if v is not None else None for k, v in values.items()})


def question_from(args, serving: mapper.ServingConfig | None = None, **request) -> mapper.Question:
    """The Question of the load flags (`serving`: `serve`'s own batching, seed, jitter and trace; `request`: the
    rest of its ServeRequest). Without --max-batch the serving follows the mapped batch."""
    for name in ("rate", "max_batch", "prompt_tokens", "output_tokens", "requests"):
        value = getattr(args, name)
        if value is not None and not value > 0:
            raise MapperError(f"--{name.replace('_', '-')} {value:g} must be positive")
    serving = serving or mapper.ServingConfig()
    if not args.max_wait_ms >= 0:
        raise MapperError(f"--max-wait-ms {args.max_wait_ms:g} must be zero or more")
    serving = dataclasses.replace(
        serving,
        rate_per_s=args.rate or serving.rate_per_s,
        max_batch=args.max_batch or serving.max_batch,
        max_wait_s=args.max_wait_ms / 1e3,
    )
    request = {"load_curve": args.load_curve, "speculative": speculative_from(args), **request}
    serve = mapper.ServeRequest(
        serving, output_tokens=args.output_tokens, follow_mapped_batch=args.max_batch is None, **request
    )
    return mapper.Question(
        serve, args.rate is not None, targets_from(args), prompt_tokens=args.prompt_tokens, requests=args.requests
    )


def speculative_from(args) -> mapper.SpeculativeConfig | None:
    """Speculative decoding from its flags (None without --speculative-draft; the other two alone are refused),
    the draft opened once here for every step the serving maps."""
    draft, tokens, rate = args.speculative_draft, args.draft_tokens, args.acceptance_rate
    if draft is None:
        given = [f for f, v in (("--draft-tokens", tokens), ("--acceptance-rate", rate)) if v is not None]
        if given:
            verb = "apply" if len(given) > 1 else "applies"
            raise MapperError(f"{' and '.join(given)} {verb} to speculative decoding: name its --speculative-draft")
        return None
    if rate is None:
        raise MapperError(
            "--speculative-draft needs --acceptance-rate: the share of draft tokens the target accepts (measured on"
            " your prompts; the gain depends on it)"
        )
    spec = mapper.SpeculativeConfig(draft, rate, mapper.DEFAULT_DRAFT_TOKENS if tokens is None else tokens)
    spec = mapper.validate_speculative(spec)  # the numbers first: a bad rate is refused before a model is read
    return dataclasses.replace(spec, draft=mapper.open_draft(spec))


def slice_from(args, served: bool = False) -> tuple[mapper.ModelHandle, dict[str, int]]:
    """The model (parsed once) and the slice's complete bindings from --dim, --batch and --seq (`served`:
    `serve`'s, whose simulation binds each batch and step itself: a dim left free takes the default of its
    role or name (mapper.model.dim_defaults, the CI recipe's table), a sequence the prompt's length)."""
    model = mapper.open_model(args.model)
    dims = model.shortcut_dims(dict(parse_dim(d) for d in args.dim), batch=getattr(args, "batch", None), seq=args.seq)
    dims = dict(dims or {})
    if served:
        prompt = {"seq": args.prompt_tokens} if args.prompt_tokens else {}
        dims = default_bindings(model.roles, {**prompt, **dims}) | dims
    return model, dict(model.bind(dims or None).graph.dims)
