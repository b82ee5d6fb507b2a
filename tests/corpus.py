"""The acceptance corpus of the engine's refactors: slices whose mapping documents must not change.

Chosen before the engine moved to tables (issue 33) and kept: the built-ins at several bindings and plan
choices, every test model, every shipped config, on the NVIDIA profiles (whose numbers must stay identical)
and on the others (whose changes, where a tiling constant became the profile's own, are listed in
docs/architecture.md with their cause). `document(case)` is what `mapper map --json` prints for the slice,
less the two fields that name the run rather than the slice (its time and the engine's version).
`scripts/corpus_snapshot.py` writes the documents to tests/data/corpus/; tests/test_corpus.py compares.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SNAPSHOTS = ROOT / "tests" / "data" / "corpus"
NVIDIA = ("h100-sxm", "a100-sxm-80gb", "h200-sxm", "b200", "l4")
OTHERS = ("mi300x", "gaudi2", "tpu-v5e", "cpu-x86")
RUN_FIELDS = ("created_utc", "engine_version")  # name the run, not the slice
# The shipped configs the corpus was recorded with; configs shipped since are checked in tests/test_hf_config.py
RECORDED_CONFIGS = ("llama-3-70b", "llama-3-8b", "mistral-7b", "mixtral-8x7b", "qwen2-7b")
ROLE_DIMS = {"batch": 2, "seq": 16, "past": 8, "total": 24, "branch": 1, "other": 4}  # a test model's bindings


@dataclass(frozen=True)
class Case:
    model: str  # a built-in name or a path relative to the repository
    hw: str
    dims: dict[str, int] = field(default_factory=dict)
    options: dict = field(default_factory=dict)

    @property
    def name(self) -> str:
        model = Path(self.model).stem if "/" in self.model else self.model
        dims = "-".join(f"{k}{v}" for k, v in sorted(self.dims.items()))
        opts = "-".join(f"{k}{v}" for k, v in sorted(self.options.items())).replace(":", "")
        return "_".join(p for p in (model, self.hw, dims, opts) if p)


def _cases() -> list[Case]:
    cases: list[Case] = []
    small = {"resnet50": {"batch": 1}, "mobilenetv2": {"batch": 1}, "vit-b16": {"batch": 1}}
    large = {"resnet50": {"batch": 64}, "mobilenetv2": {"batch": 32}, "vit-b16": {"batch": 32}}
    small |= {"bert-base": {"batch": 1, "seq": 128}, "gpt2-small": {"batch": 1, "seq": 1, "past": 128}}
    large |= {"bert-base": {"batch": 16, "seq": 384}, "gpt2-small": {"batch": 8, "seq": 512, "past": 0}}
    small |= {"llama2-7b": {"batch": 1, "seq": 1, "past": 1024}, "mixtral-8x7b": {"batch": 4, "seq": 1, "past": 512}}
    large |= {"llama2-7b": {"batch": 4, "seq": 2048, "past": 0}, "mixtral-8x7b": {"batch": 1, "seq": 1024, "past": 0}}
    for hw in ("h100-sxm", "a100-sxm-80gb"):
        for bindings in (small, large):
            cases += [Case(m, hw, d) for m, d in bindings.items()]
    decode70 = {"batch": 8, "seq": 1, "past": 2048}
    cases += [Case("llama2-70b", "h100-sxm", decode70, {"tp": 8}), Case("llama2-70b", "h200-sxm", decode70, {"tp": 4})]
    cases += [Case("llama2-70b", "b200", {"batch": 1, "seq": 2048, "past": 0}, {"tp": 8, "pp": 1})]
    for hw in ("h200-sxm", "b200", "l4", *OTHERS):
        cases += [Case("resnet50", hw, {"batch": 8}), Case("bert-base", hw, {"batch": 4, "seq": 128})]
        cases += [Case("llama2-7b", hw, {"batch": 2, "seq": 1, "past": 512})]
    variants = [
        {"fusion": "none"},
        {"fusion": "aggressive"},
        {"dtype": "fp8"},
        {"dtype": "fp32"},
        {"dtype": "int8"},
        {"layout": "nchw"},
        {"power_cap_w": 400.0},
        {"sparsity": "2:4", "dtype": "bf16"},
        {"runtime": "vllm"},
        {"runtime": "onnxruntime"},
        {"launch": "graph"},
        {"kv_cache": "copy"},
        {"attention_fusion": True},
    ]
    for variant in variants:
        cases += [Case("resnet50", "h100-sxm", {"batch": 16}, variant)]
        cases += [Case("llama2-7b", "h100-sxm", {"batch": 4, "seq": 1, "past": 1024}, variant)]
    cases += [Case("llama2-7b", "h100-sxm", {"batch": 4, "seq": 1, "past": 1024}, {"weight_dtype": "int4"})]
    cases += [Case("llama2-7b", "h100-sxm", {"batch": 16, "seq": 1, "past": 1024}, {"tp": 2, "pp": 2})]
    cases += [Case("llama2-7b", "h100-sxm", {"batch": 16, "seq": 1, "past": 1024}, {"tp": 4, "dp": 2})]
    cases += [Case("llama2-7b", "h100-sxm", {"batch": 16, "seq": 512}, {"tp": 2, "overlap_collectives": True})]
    cases += [Case("mixtral-8x7b", "h100-sxm", {"batch": 32, "seq": 1, "past": 512}, {"ep": 8, "tp": 1})]
    cases += [
        Case("mixtral-8x7b", "h100-sxm", {"batch": 32, "seq": 1, "past": 512}, {"ep": 4, "expert_imbalance": 1.5})
    ]
    for model in sorted((ROOT / "tests" / "models").glob("*.onnx")):
        cases += [Case(str(model.relative_to(ROOT)), "h100-sxm", {"by_role": 1})]
    for name in RECORDED_CONFIGS:
        tp = {"tp": 8} if "70b" in name or "mixtral" in name else {}
        cases += [Case(f"data/configs/{name}.json", "h100-sxm", {"batch": 4, "seq": 1, "past": 1024}, tp)]
    return cases


CASES = _cases()


def document(case: Case) -> dict:
    """The slice's mapping document, as --json prints it, without the run's own fields."""
    import json

    from mapper import PlanOptions, load_hardware, map_workload, mapping_document, open_model

    handle = open_model(case.model if "/" not in case.model else str(ROOT / case.model))
    dims = dict(case.dims)
    if dims.pop("by_role", None):  # a test model's dims, bound by their roles
        dims |= {name: ROLE_DIMS[role] for name, role in handle.roles.items()}
    workload = handle.bind(dims or None)
    result = map_workload(workload, load_hardware(case.hw), PlanOptions(**case.options))
    parsed = json.loads(json.dumps(mapping_document(result)))
    for key in RUN_FIELDS:
        parsed.pop(key, None)
    return parsed
