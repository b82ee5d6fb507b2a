"""The engine against published serving-engine figures (bench/published_rows.py): Llama-2-7B and 70B on A100
and H100, gpt-fast and TensorRT-LLM v0.5, each row mapped as its metric says (decode step, first token,
static-batch throughput). One handle per model, each slice mapped once over all rows."""

from __future__ import annotations

import pytest

from bench.published_rows import MEDIAN_WITHIN, ROWS, WITHIN, Predictor, median_abs_error, score

pytestmark = pytest.mark.slow  # every row mapped (the module's fixture): the full tier


@pytest.fixture(scope="module")
def scored():
    return score(ROWS, Predictor())


def test_median_error_over_all_rows(scored):
    assert len(scored) == len(ROWS) >= 20
    assert median_abs_error(scored) <= MEDIAN_WITHIN


def test_every_row_within_its_bound(scored):
    for s in scored:
        assert abs(s.error) <= s.row.within, f"{s.row.model} {s.row.hardware} {s.row.table}: {s.error:+.0%}"


def test_wider_bounds_are_the_documented_gap_only(scored):
    # rows held to more than 50% are the H100 FP8 70B long-context ones, and they miss in the stated direction
    # (the engine faster than published), so a change that closes or flips the gap shows here
    wide = [s for s in scored if s.row.within > WITHIN]
    assert wide and all(s.row.known_gap for s in wide)
    assert all(s.row.hardware == "h100-sxm" and s.row.model == "llama2-70b" for s in wide)
    assert all(s.error > WITHIN / 2 for s in wide)


def test_gqa_attention_reads_the_kv_heads_once(scored):
    # the A100 FP16 70B rows of the same table (8 KV heads of 64): an attention kernel that charged GQA's
    # expanded K and V (written and re-read, 8x each) predicted 2048/2048 at 296 tok/s against 738 published
    a100_70b = [
        s for s in scored if s.row.model == "llama2-70b" and s.row.hardware == "a100-sxm-80gb" and s.row.tp == 4
    ]
    assert len(a100_70b) == 4
    # within 20%: the A100 GEMM curve refitted on Vidur's 7B kernels (docs/validation.md) left 128/128 at +19%
    assert all(abs(s.error) <= 0.20 for s in a100_70b)


def test_a_step_is_mapped_once_for_rows_that_share_it():
    predictor = Predictor()
    h100_7b = [r for r in ROWS if r.model == "llama2-7b" and r.hardware == "h100-sxm" and r.batch == 64]
    score(tuple(h100_7b), predictor)
    # three rows at batch 64: prefills at input 128 and 2048 (the first two rows share theirs), 3 steps each;
    # 128/128 and 128/2048 share the first step (context 128), 128/2048 and 2048/128 the last (context 2174)
    assert len(predictor.latency_s) == 2 + 3 * 3 - 2
    assert list(predictor.handles) == ["llama2-7b"]
