"""One slice, one answer: every renderer shows the assessment's first failure, its load and percentiles, the
TTFT/TPOT of a decoder, and the chosen fix, word for word.

The slices were chosen before the assessment was written (issue 32): a CNN at the derived load and at a given
rate, an encoder with a p99 target, a vision transformer, a decoder's prefill and decode, a decoder with TTFT and
TPOT targets, a mixture of experts at TP 8, a model that does not fit, an offered load over capacity, a Hugging
Face config. The renderers: the document's assessment section, `mapper map` text and --json, `mapper serve` text,
the sheet (XLSX Summary, JSON, CSV), the review (its steps, review.json and `mapper review` text), and the
dashboard's Overview and Review pages. Two slices are also checked against a hand computation.
"""

from __future__ import annotations

import io
import json
import zipfile
from dataclasses import dataclass

import openpyxl
import pytest

import mapper
import mapper.review.review as reviewing
from mapper.cli.args import question_from, slice_from
from mapper.cli.main import build_parser, main
from mapper.report.sheet import sheet_bytes

pytestmark = pytest.mark.slow  # every view of each slice: CLI runs in child processes, 1.5-7.6 s a case

CONFIG = "data/configs/llama-3-8b.json"


@dataclass(frozen=True)
class Slice:
    name: str
    argv: tuple[str, ...]  # `mapper map` arguments: the model, the slice, the plan and the question


SLICES = (
    Slice("cnn derived load", ("resnet50", "--batch=8", "--hw=h100-sxm")),
    Slice("cnn given rate", ("mobilenetv2", "--batch=4", "--hw=h100-sxm", "--rate=2000")),
    Slice("encoder p99 target", ("bert-base", "--batch=8", "--seq=384", "--hw=h100-sxm", "--p99-target-ms=20")),
    Slice("vision transformer", ("vit-b16", "--batch=32", "--hw=a100-sxm-80gb", "--rate=500")),
    Slice("decoder prefill", ("gpt2-small", "--batch=4", "--seq=512", "--dim=past=0", "--hw=h100-sxm")),
    Slice("decoder decode", ("llama2-7b", "--batch=32", "--dim=past=2048", "--dim=seq=1", "--hw=a100-sxm-80gb")),
    Slice(
        "decoder ttft tpot targets",
        ("llama2-7b", "--batch=8", "--dim=past=1024", "--dim=seq=1", "--ttft-p99-ms=2000", "--tpot-p99-ms=40"),
    ),
    Slice("moe tp 8", ("mixtral-8x7b", "--batch=8", "--dim=past=1024", "--dim=seq=1", "--tp=8", "--hw=h100-sxm")),
    Slice("does not fit", ("llama2-70b", "--batch=1", "--dim=past=1024", "--dim=seq=1", "--hw=h100-sxm")),
    Slice("overloaded", ("bert-base", "--batch=8", "--seq=128", "--hw=h100-sxm", "--rate=100000")),
    Slice("hf config decode", (CONFIG, "--batch=16", "--dim=past=1024", "--dim=seq=1", "--hw=h200-sxm")),
    Slice("encoder given rate", ("bert-base", "--batch=8", "--seq=384", "--hw=h100-sxm", "--rate=200")),
)
IDS = [s.name for s in SLICES]


def assess(s: Slice) -> mapper.Assessment:
    """The engine's assessment of the slice, asked with the question the CLI builds from the same flags."""
    args = build_parser().parse_args(["map", *s.argv])
    model, dims = slice_from(args)
    from mapper.cli.args import options_from

    return mapper.assess_slice(model, dims, mapper.load_hardware(args.hw), options_from(args), question_from(args))


class Assessed(dict):
    """Each slice's assessment, made when a test first reads it: a worker assesses the slices its tests read."""

    def __missing__(self, name: str) -> mapper.Assessment:
        found = self[name] = assess(next(s for s in SLICES if s.name == name))
        return found


@pytest.fixture(scope="module")
def assessed() -> dict[str, mapper.Assessment]:
    return Assessed()


def lines(doc: dict) -> list[str]:
    return [f"{r.name}: {r.text}" for r in mapper.answer_rows(doc)]


def essentials(doc: dict) -> dict:
    """What the meeting reads: the first failure, the load, the percentiles, the targets, the chosen fix."""
    rows = mapper.answer_rows(doc)
    return {
        "failure": mapper.assessed_failure(doc),
        "verdict": mapper.verdict_sentence(doc),
        **{f"{r.section}:{r.name}": r.text for r in rows if r.section in ("load", "latency", "target", "fix")},
    }


@pytest.mark.parametrize("s", SLICES, ids=IDS)
def test_map_text_and_json_show_the_assessment(s, assessed, capsys):
    doc = assessed[s.name].document()
    assert main(["map", *s.argv, "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    assert printed["assessment"] == doc["assessment"] and printed["serving"] == doc["serving"]
    assert essentials(printed) == essentials(doc)
    assert main(["map", *s.argv]) == 0
    text = capsys.readouterr().out.splitlines()
    for line in lines(doc):
        assert line in text, (s.name, line)


@pytest.mark.parametrize("s", SLICES, ids=IDS)
def test_the_sheet_in_every_format_shows_the_assessment(s, assessed):
    a = assessed[s.name]
    doc = a.document()
    summary = openpyxl.load_workbook(io.BytesIO(sheet_bytes(a.result, "xlsx")))["Summary"]
    cells = {(r[0], r[1]): r[2] for r in summary.iter_rows(min_row=2, values_only=True)}
    for r in mapper.answer_rows(doc):
        assert cells[(r.section, r.name)] == r.text, (s.name, r.name)
    as_json = json.loads(sheet_bytes(a.result, "json"))
    assert as_json["assessment"] == doc["assessment"]
    html = sheet_bytes(a.result, "html").decode()
    failure = mapper.assessed_failure(doc).sentence
    assert failure.split(":")[0] in html  # the HTML escapes the rest; its first words are plain


SERVE = [s for s in SLICES if s.name in ("encoder p99 target", "decoder ttft tpot targets", "cnn given rate")]


@pytest.mark.parametrize("s", SERVE, ids=[s.name for s in SERVE])
def test_serve_text_shows_the_same_assessment(s, assessed, capsys):
    """`serve` of the same slice and question (its batch as --dim, since serve forms batches from it)."""
    argv = [a.replace("--batch=", "--dim=batch=") for a in s.argv]
    assert main(["serve", *argv]) == 0
    text = capsys.readouterr().out.splitlines()
    for line in lines(assessed[s.name].document()):
        assert line in text, (s.name, line)


REVIEWED = [
    s for s in SLICES if s.name in ("encoder p99 target", "decoder decode", "does not fit", "decoder ttft tpot targets")
]


@pytest.mark.parametrize("s", REVIEWED, ids=[s.name for s in REVIEWED])
def test_the_review_is_the_same_assessment(s, assessed, capsys, tmp_path, monkeypatch):
    """`mapper review` of the slice: the review it runs (kept as the command runs it: one review, not a second
    beside it), its text and its packet."""
    a = assessed[s.name]
    doc = a.document()
    runs = []
    run_review = reviewing.run_review
    monkeypatch.setattr(reviewing, "run_review", lambda request: runs.append(run_review(request)) or runs[-1])
    packet = tmp_path / "p.zip"
    assert main(["review", *s.argv, f"--out={packet}"]) == 0
    (review,) = runs
    baseline = mapper.mapping_document(review.baseline)
    assert essentials(baseline) == essentials(doc)
    assert review.failure == a.failure and review.chosen == a.chosen
    text = capsys.readouterr().out.splitlines()
    for line in lines(doc):
        assert line in text, (s.name, line)
    with zipfile.ZipFile(packet) as z:
        review_json = json.loads(z.read("review.json"))
    assert review_json["first_failure"]["check"] == a.failure.check
    chosen = review_json["chosen_fix"]
    assert (chosen or {}).get("label") == (a.chosen.label if a.chosen else None)
    assert review_json["kpis"]["load_sentence"] == doc["assessment"]["load"]["sentence"]


def test_hand_computed_resnet50_saturation_and_dominant_class(assessed):
    """ResNet-50 at batch 8 without a rate or a target: the load is the saturation rate, 8 requests per batch
    latency, derived and labelled so, with no percentile; the first failure is the class holding most time."""
    doc = assessed["cnn derived load"].document()
    t, load = doc["totals"], doc["assessment"]["load"]
    assert load["derived"] and load["source"] == "saturation rate"
    assert load["rate_per_s"] == pytest.approx(8 / t["latency_s"], rel=1e-6)
    assert not [r for r in mapper.answer_rows(doc) if r.section == "latency"]
    by_class: dict[str, float] = {}
    for k in doc["kernels"]:
        by_class[k["bottleneck"]] = by_class.get(k["bottleneck"], 0.0) + k["time_s"]
    top = max(by_class, key=by_class.__getitem__)
    assert doc["assessment"]["first_failure"]["check"] == "dominant bottleneck"
    assert f"is mostly {top}: {by_class[top] / t['latency_s']:.0%}" in mapper.verdict_sentence(doc)


def test_hand_computed_llama2_7b_decode_fits_at_fp16_and_batch_64_does_not(assessed):
    """Llama-2-7B at its released fp16, batch 32, 2048 cached tokens on an 80 GB A100: weights 6.74e9 x 2 B =
    13.5 GB, KV cache 32 seqs x 2049 tokens x 32 layers x 2 (K, V) x 4096 x 2 B = 34.4 GB: 47.9 GB before
    activations, so it fits; at batch 64 the KV cache alone is 68.7 GB, 82 GB with the weights: rejected."""
    a = assessed["decoder decode"]
    doc = a.document()
    assert doc["totals"]["dtype"] == "fp16" and doc["memory"]["fits"]
    weights, kv = 6.74e9 * 2, 32 * 2049 * 32 * 2 * 4096 * 2
    assert doc["memory"]["per_device_bytes"] == pytest.approx(weights + kv, rel=0.05)
    batch64 = next(c for c in a.candidates if dict(c.slice_changes) == {"batch": 64})
    assert batch64.rejected.startswith("does not fit") and batch64.per_device_bytes > weights + 2 * kv
    assert a.chosen is not None and not a.chosen.rejected and a.chosen.fits
    assert doc["assessment"]["decode_step"] and doc["assessment"]["first_failure"]["check"] == "dominant bottleneck"


def test_no_chosen_fix_is_rejected_and_a_failing_check_without_a_fix_says_so(assessed):
    for name, a in assessed.items():
        if a.chosen is not None:
            assert not a.chosen.rejected and a.chosen.fixes, name
        else:
            assert a.chosen_reason.startswith("no candidate"), (name, a.chosen_reason)
        for c in a.candidates:
            if not c.fits:
                assert c.rejected.startswith("does not fit"), (name, c.label)
