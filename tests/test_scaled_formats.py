"""FP4 and microscaling formats (issue 34, item 5): NVFP4 and MXFP8/6/4 for weights, activations and the KV cache
where the profile's datasheet gives a peak (B200), each element's share of its block's scale counted in its
bytes, and a profile without the format saying so in one line."""

from __future__ import annotations

import dataclasses

import pytest

import mapper
from mapper.cli.main import main
from mapper.core.vocab import KvDtype, PlanDtype, WeightDtype, values
from mapper.hardware.schema import DTYPES
from mapper.plan.precision import PLAN_DTYPE_BYTES, SCALED_FORMATS, weight_tally

B200, H100 = mapper.load_hardware("b200"), mapper.load_hardware("h100-sxm")
FORMATS = ("nvfp4", "mxfp8", "mxfp6", "mxfp4")
DECODE, PREFILL = {"batch": 1, "seq": 1, "past": 1024}, {"batch": 4, "seq": 2048, "past": 0}

# Bytes an element takes, its block's scale included, written out from the formats' documents:
#   NVFP4 (NVIDIA, 'Introducing NVFP4 ...', 2025): a 4-bit E2M1 element + one 8-bit E4M3 scale per 16 elements
#   MX (OCP Microscaling Formats v1.0, 2023): the element + one 8-bit E8M0 scale per 32 elements
BY_HAND = {
    "nvfp4": 4 / 8 + 1 / 16,  # 0.5625
    "mxfp8": 8 / 8 + 1 / 32,  # 1.03125 (E4M3 or E5M2)
    "mxfp6": 6 / 8 + 1 / 32,  # 0.78125 (E2M3 or E3M2)
    "mxfp4": 4 / 8 + 1 / 32,  # 0.53125
}


def test_element_bytes_count_the_block_scales():
    assert (
        {f: PLAN_DTYPE_BYTES[f] for f in FORMATS}
        == BY_HAND
        == {f: s.bytes_per_element for f, s in SCALED_FORMATS.items()}
    )
    assert BY_HAND == {"nvfp4": 0.5625, "mxfp8": 1.03125, "mxfp6": 0.78125, "mxfp4": 0.53125}


def test_one_vocabulary_for_the_formats():
    """The plan's dtypes are the profile schema's matrix dtypes; weights and the KV cache take the 4-bit ones."""
    assert tuple(d for d in values(PlanDtype) if d != PlanDtype.AUTO) == DTYPES
    assert set(FORMATS) <= set(mapper.PLAN_DTYPES)
    assert {"nvfp4", "mxfp4"} <= set(values(WeightDtype)) & set(values(KvDtype))
    assert {"nvfp4", "mxfp4"} <= set(mapper.WEIGHT_DTYPES) & set(mapper.KV_DTYPES)


def test_b200_has_every_format_at_its_datasheet_rate_and_its_energy_at_its_own_peak():
    """FP4 at twice the FP8 peak (HGX B200: FP4 18 PFLOPS sparse, FP8/FP6 9); energy: the bf16 power at the peak."""
    fp8 = B200.matrix_peak("fp8")
    assert {f: B200.matrix_peak(f) / fp8 for f in FORMATS} == {"nvfp4": 2.0, "mxfp8": 1.0, "mxfp6": 1.0, "mxfp4": 2.0}
    bf16_power = B200.energy_per_flop_j["bf16"] * B200.matrix_peak("bf16")
    for f in FORMATS:
        assert B200.energy_per_flop_j[f] * B200.matrix_peak(f) == pytest.approx(bf16_power, rel=0.01)
        assert "[?]" in B200.sources[f"compute.matrix_peak_flops_per_s.{f}"] or f in ("nvfp4", "mxfp6")
    for name in mapper.list_hardware():  # B200 is the only built-in with an FP4 or MX peak
        has = {f for f in FORMATS if mapper.load_hardware(name).has_matrix_peak(f)}
        assert has == (set(FORMATS) if name == "b200" else set()), name


@pytest.fixture(scope="module")
def llama():
    return mapper.open_model("llama2-7b")


def test_b200_prefill_gemm_computes_twice_as_fast_at_nvfp4_as_at_fp8(llama):
    """A compute-bound prefill GEMM (Llama-2-7B, 4 x 2,048 tokens): its compute time halves at the 2x peak; the
    kernel, now nearer its memory time, gains less. Under data-parallel waves, so that both precisions deal their
    tiles alike (B200's stream-K library takes a tail's spread only where it is faster, which may differ by
    precision)."""
    workload = llama.bind(PREFILL)
    waves = dataclasses.replace(B200, matrix_schedule=None, sha256="data-parallel waves")
    up = {}
    for dtype in ("fp8", "nvfp4"):
        result = mapper.map_workload(workload, waves, mapper.PlanOptions(dtype=dtype))
        up[dtype] = next(e.assessment for e in result.kernels if "layers.0.mlp.up_proj" in e.kernel.name)
    assert up["fp8"].bottleneck == "compute-bound (matrix)"
    assert up["fp8"].compute_time_s / up["nvfp4"].compute_time_s == pytest.approx(2.0, rel=1e-6)
    assert 1.5 < up["fp8"].time_s / up["nvfp4"].time_s < 2.0


def test_b200_decode_reads_weights_at_0_5625_bytes_in_nvfp4(llama):
    """A decode step's weights: 0.5625 bytes an element in nvfp4 against fp8's 1 (the scales: 1/16 byte each)."""
    workload = llama.bind(DECODE)
    counts, other, _ = weight_tally(workload.graph)
    elements = sum(counts.values())
    assert 6.73e9 < elements < 6.75e9  # Llama-2-7B's 6.74B parameters
    fp8, nvfp4 = (mapper.map_workload(workload, B200, mapper.PlanOptions(dtype=d)) for d in ("fp8", "nvfp4"))
    assert fp8.totals.weight_bytes == elements * 1.0 + other
    assert nvfp4.totals.weight_bytes == elements * 0.5625 + other
    up8, up4 = (next(e.kernel for e in r.kernels if "layers.0.mlp.up_proj" in e.kernel.name) for r in (fp8, nvfp4))
    assert up4.weight_bytes == up8.weight_bytes * 0.5625 == 4096 * 11008 * 0.5625
    assert nvfp4.totals.latency_s < fp8.totals.latency_s


def test_weight_only_and_kv_formats_store_narrow_and_compute_at_the_activations(llama):
    """Weight-only nvfp4 computes at the activations' precision (as int4 weights do); an mxfp4 cache is sized at
    0.53125 bytes an element; each adds the 4-bit caveat naming calibration or quantization-aware training."""
    workload = llama.bind(DECODE)
    counts, other, _ = weight_tally(workload.graph)
    result = mapper.map_workload(workload, B200, mapper.PlanOptions(dtype="bf16", weight_dtype="nvfp4"))
    assert result.totals.dtype == "bf16" and result.totals.peak_flops_per_s == B200.matrix_peak("bf16")
    assert result.totals.weight_bytes == sum(counts.values()) * 0.5625 + other
    kv = mapper.map_workload(workload, B200, mapper.PlanOptions(dtype="bf16", kv_dtype="mxfp4"))
    bf16 = mapper.map_workload(workload, B200, mapper.PlanOptions(dtype="bf16"))
    assert kv.memory.kv_cache_bytes == bf16.memory.kv_cache_bytes / 2 * 0.53125
    four_bit = [c for c in result.caveats + kv.caveats if "4-bit floats" in c]
    assert [c.split(":")[0] for c in four_bit] == ["nvfp4 (weights)", "mxfp4 (KV cache)"]
    assert all("calibration" in c and "quantization-aware training" in c and "fallback" in c for c in four_bit)
    mx8 = mapper.map_workload(workload, B200, mapper.PlanOptions(dtype="mxfp8"))
    assert not any("-bit floats" in c for c in mx8.caveats)  # an 8-bit format: the precision caveat only


@pytest.mark.parametrize(
    "flag", [["--dtype", "nvfp4"], ["--dtype", "mxfp8"], ["--weight-dtype", "nvfp4"], ["--kv-dtype", "mxfp4"]]
)
def test_a_profile_without_the_format_says_so_in_one_line(flag, capsys):
    """H100 has no FP4 or MX peak: exit 2 and one line naming the dtypes it has."""
    assert (
        main(["map", "llama2-7b", "--hw", "h100-sxm", "--dim", "batch=1", "--dim", "seq=1", "--dim", "past=8", *flag])
        == 2
    )
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: hardware h100-sxm: no matrix peak for")
    assert "it supports fp32, tf32, bf16, fp16, fp8, int8;" in err and flag[1] in err


@pytest.mark.slow
def test_the_review_offers_fp4_on_b200_and_not_on_h100():
    """Llama-2-7B bf16 decode: on B200 the FP4 lever (NVFP4 weights and activations, the cache in fp8) with its
    owner and quality evidence; H100 has no FP4 peak, so no such candidate."""
    b200 = mapper.run_review(mapper.ReviewRequest("llama2-7b", DECODE, B200, mapper.PlanOptions(dtype="bf16")))
    fp4 = next(c for c in b200.candidates if dict(c.changes).get("dtype") == "nvfp4")
    assert dict(fp4.changes) == {"dtype": "nvfp4", "kv_dtype": "fp8"}
    assert fp4.label == "FP4 weights and activations (KV cache in fp8)" and fp4.owner == "ML compiler engineer"
    assert "4-bit floats" in fp4.evidence and "quantization-aware training" in fp4.evidence
    assert "fallback" in fp4.evidence and any("4-bit floats" in c for c in fp4.caveats)
    assert fp4.gain > 0.5  # weights at 0.5625 bytes against 2
    h100 = mapper.run_review(mapper.ReviewRequest("llama2-7b", DECODE, H100, mapper.PlanOptions(dtype="bf16")))
    assert not any(dict(c.changes).get("dtype") in FORMATS for c in h100.candidates)


def test_a_plan_in_a_block_format_is_not_offered_integer_weights():
    """At nvfp4 the weights are 4-bit floats already: no int4/int8 weight-only row (no kernel feeds integer
    weights to an FP4 matrix instruction), and no FP4 row either (the plan is not wider)."""
    r = mapper.run_review(mapper.ReviewRequest("llama2-7b", DECODE, B200, mapper.PlanOptions(dtype="nvfp4")))
    changed = [dict(c.changes) for c in r.candidates if c.kind == "plan"]
    assert changed and not any("weight_dtype" in c or c.get("dtype") in ("nvfp4", "mxfp4") for c in changed)
