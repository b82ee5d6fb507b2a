"""One table of the plan options (PlanOptions field -> `mapper map` flag -> link key -> text form), and the
command line that reproduces a mapped slice from its document.

The reproduce command (the sheet's Provenance, `--json`, every dashboard header), the dashboard's link and
Compare's variable options are all written from PLAN_FIELDS, so a new PlanOptions field needs one row here
(a test fails on a field without one). Text from a link is hostile: `parse_option` reads it strictly and
`PlanOptions` judges the value where it is built, one line naming the option when it is refused.
"""

from __future__ import annotations

import dataclasses
import math
import shlex
from dataclasses import dataclass

from mapper import pipeline  # the option vocabularies (PLAN_DTYPES ...)
from mapper.core.errors import MapperError
from mapper.core.options import PlanOptions
from mapper.plan.layout import LAYOUTS

TRISTATE = {"auto": None, "on": True, "off": False}  # attention_fusion: None follows the fusion policy
SWITCH = {"on": True, "off": False, "true": True, "false": False, "1": True, "0": False}
MAX_OPTION_TEXT = 24  # longest option value a link or a plan setting may hold ("tensorrt-llm" is 12)
UPLOAD_PLACEHOLDER = "MODEL.onnx"  # the command's model argument where the model came as bytes


@dataclass(frozen=True, slots=True)
class PlanField:
    """One plan option: where it lives in PlanOptions, on the command line and in a link, and its kind.

    kind: choice (one of `choices`), int, float, optional-float (None: "none"), tristate (auto|on|off),
    switch (a flag without a value on the command line)."""

    name: str
    flag: str
    url_key: str
    kind: str
    label: str
    choices: tuple[str, ...] = ()


PLAN_FIELDS = (
    PlanField("dtype", "--dtype", "dtype", "choice", "dtype", pipeline.PLAN_DTYPES),
    PlanField("weight_dtype", "--weight-dtype", "weight_dtype", "choice", "weight dtype", pipeline.WEIGHT_DTYPES),
    PlanField("fusion", "--fusion", "fusion", "choice", "fusion", pipeline.FUSION_POLICIES),
    PlanField("attention_fusion", "--attention-fusion", "attention", "tristate", "attention fusion", tuple(TRISTATE)),
    PlanField("layout", "--layout", "layout", "choice", "layout", LAYOUTS),
    PlanField("power_cap_w", "--power-cap-w", "power_cap_w", "optional-float", "power cap (W)"),
    PlanField("tp", "--tp", "tp", "int", "TP"),
    PlanField("pp", "--pp", "pp", "int", "PP"),
    PlanField("dp", "--dp", "dp", "int", "DP"),
    PlanField(
        "overlap_collectives", "--overlap-collectives", "overlap", "switch", "overlap collectives", ("off", "on")
    ),
    PlanField("runtime", "--runtime", "runtime", "choice", "runtime", pipeline.RUNTIMES),
    PlanField("kv_cache", "--kv-cache", "kv_cache", "choice", "KV-cache update", pipeline.KV_CACHE_MODES),
    PlanField("launch", "--launch", "launch", "choice", "launch", pipeline.LAUNCHES),
    PlanField("sparsity", "--sparsity", "sparsity", "choice", "sparsity", pipeline.SPARSITIES),
    PlanField("ep", "--ep", "ep", "int", "EP"),
    PlanField("expert_imbalance", "--expert-imbalance", "expert_imbalance", "float", "expert imbalance"),
    PlanField("kv_dtype", "--kv-dtype", "kv_dtype", "choice", "KV-cache dtype", pipeline.KV_DTYPES),
    PlanField("gqa_decode", "--gqa-decode", "gqa_decode", "choice", "GQA decode attention", pipeline.GQA_DECODES),
    PlanField("attention_dp", "--attention-dp", "attention_dp", "switch", "attention DP", ("off", "on")),
    PlanField("expert_tp", "--expert-tp", "expert_tp", "switch", "expert TP", ("off", "on")),
)
FIELD_BY_NAME = {f.name: f for f in PLAN_FIELDS}
DEFAULT_OPTIONS = PlanOptions()


def format_option(f: PlanField, value) -> str:
    """The option's text, as a link and a plan setting write it (parse_option reads it back)."""
    if f.kind == "tristate":
        return next(text for text, v in TRISTATE.items() if v is value)
    if f.kind == "switch":
        return "on" if value else "off"
    if f.kind == "optional-float" and value is None:
        return "none"
    if f.kind in ("float", "optional-float"):
        return repr(float(value)).removesuffix(".0")
    return str(value)


def parse_option(f: PlanField, text: str):
    """Text -> the option's value, validated; a MapperError naming the option when it is not one."""
    raw = str(text).strip().lower()
    try:
        value = _parse_text(f, raw)
        return getattr(dataclasses.replace(DEFAULT_OPTIONS, **{f.name: value}), f.name)
    except (ValueError, MapperError):
        shown = str(text)[:MAX_OPTION_TEXT]
        hint = f"one of {', '.join(f.choices)}" if f.choices else f"a {f.kind.removeprefix('optional-')} in range"
        raise MapperError(f"option {f.name}={shown!r} is not {hint}") from None


def _parse_text(f: PlanField, raw: str):
    if not raw.isascii() or len(raw) > MAX_OPTION_TEXT:
        raise ValueError(raw)
    if f.kind == "tristate":
        return TRISTATE[raw] if raw in TRISTATE else _bad(raw)
    if f.kind == "switch":
        return SWITCH[raw] if raw in SWITCH else _bad(raw)
    if f.kind == "int":
        return int(raw) if raw.isdigit() else _bad(raw)
    if f.kind == "optional-float" and raw in ("", "none", "0"):
        return None
    if f.kind in ("float", "optional-float"):
        number = float(raw)
        return number if math.isfinite(number) else _bad(raw)
    return raw


def _bad(raw: str):
    raise ValueError(raw)


def changed_options(options: PlanOptions) -> list[tuple[PlanField, object]]:
    """The options that differ from PlanOptions' defaults, in table order."""
    return [
        (f, getattr(options, f.name))
        for f in PLAN_FIELDS
        if getattr(options, f.name) != getattr(DEFAULT_OPTIONS, f.name)
    ]


def option_flags(options: PlanOptions) -> list[str]:
    """`mapper map` flags for every option away from its default (the CLI's defaults are PlanOptions')."""
    flags: list[str] = []
    for f, value in changed_options(options):
        flags += [f.flag] if f.kind == "switch" else [f.flag, format_option(f, value)]
    return flags


def options_query(options: PlanOptions) -> dict[str, str]:
    """The link's query params of every option away from its default."""
    return {f.url_key: format_option(f, value) for f, value in changed_options(options)}


def options_from_query(query) -> tuple[dict[str, object], list[str]]:
    """The options a link carries ({field: value}) and one line for each value it refused."""
    values, refused = {}, []
    for f in PLAN_FIELDS:
        if f.url_key in query:
            try:
                values[f.name] = parse_option(f, query[f.url_key])
            except MapperError as e:
                refused.append(f"The link's {e}: ignored.")
    return values, refused


def hardware_argument(doc: dict) -> str:
    """--hw: the built-in's name when the document's profile is that built-in, unedited; else the profile's file."""
    return doc["hardware"]["name"] if doc["hardware"].get("builtin") else f"{doc['hardware']['name']}.json"


def model_argument(doc: dict) -> str:
    """The model argument: a built-in's name when the document's model is that built-in (the handle opened it
    by its name), else a placeholder for the file (an upload may carry a built-in's name; its sha256 is in the
    document)."""
    return doc["model"]["name"] if doc["model"].get("builtin") else UPLOAD_PLACEHOLDER


def reproduce_command(doc: dict, model: str | None = None, hw: str | None = None) -> str:
    """`mapper map --hw HW --dim NAME=VALUE ... [option flags] [question flags] -- MODEL`: the command that maps
    and assesses this slice again (the assessment's load and targets included).
    `model`/`hw` name the file the caller read them from; by default what the document itself says. The model
    comes last, after `--`, so a file named like an option (`--out=x.onnx`) is read as the model."""
    options = PlanOptions(**doc["options"])
    words = ["mapper", "map", f"--hw={hw or hardware_argument(doc)}"]
    for name, value in doc["model"]["dims"].items():
        words.append(f"--dim={name}={value}")  # `=`: a dim name the model gives may start with a dash
    asked = ((doc.get("assessment") or {}).get("question") or {}).get("flags", [])  # the load and the targets
    return shlex.join([*words, *option_flags(options), *asked, "--", model or model_argument(doc)])
