#!/usr/bin/env bash
# A CI job for a repository of models: map every model on every profile, record each run in the team's
# store, keep the sheets and review packets as artifacts, and fail when the latest revision regresses
# against the previous one. tests/test_ci_recipe.py runs it twice.
#
#   MAPPER_STORE=postgresql://ci@db/mapper MODEL_DIR=models PROFILES="h100-sxm h200-sxm" \
#     REVISION=$CI_COMMIT_SHA FAIL_ON="p99=0.05 mfu=0.05" DIMS="batch=8 seq=512" LOAD="--rate=200" \
#     OUT=artifacts bash scripts/ci_recipe.sh
#
# LOAD is the serving question `map` and `review` assess each model at (their --rate, --max-batch, --p99-target-ms,
# --ttft-p99-ms, --tpot-p99-ms words): without a rate or a target no percentile exists (the load would be the
# saturation rate), so a p99 in FAIL_ON is checked only where LOAD gives one; latency always is.
#
# Every symbolic dim of an export is bound (scripts/ci_dims.py, mapper/model/dim_defaults.py): by its role, batch 1,
# sequence 128, KV cache 0 (a prefill), a cache-plus-new total their sum, Optimum's use_cache_branch 1 where a cache
# is bound; by name, num_channels 3, height and width 224. DIMS overrides them: NAME=VALUE words, each by dim name
# or by role (seq=512 binds seq, sequence_length or s1, whatever the exporter called it); a word naming no dim of
# a model is left out for it. A dim neither covers (its role "other") stops the job (exit 2) naming it.
# MAPPER (default `mapper`) is the command to run, e.g. "python -m mapper"; PYTHON (default: MAPPER's interpreter
# where it is "PY -m mapper", else python3) reads each model's dims. Exit: 0, 1 on a regression, 2 on bad input.
set -euo pipefail
: "${MAPPER_STORE:?set MAPPER_STORE to the team store URL}"
MODEL_DIR="${MODEL_DIR:-.}"
PROFILES="${PROFILES:-h100-sxm}"
OUT="${OUT:-artifacts}"
FAIL_ON="${FAIL_ON:-p99=0.05 latency=0.05}"
read -r -a LOAD_WORDS <<< "${LOAD:-}"
HERE="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
read -r -a DIM_WORDS <<< "${DIMS:-}"
REVISION="${REVISION:-$(git -C "$MODEL_DIR" rev-parse --short=12 HEAD 2>/dev/null || echo unlabelled)}"
read -r -a MAPPER_CMD <<< "${MAPPER:-mapper}"
if [ -z "${PYTHON:-}" ] && [ ${#MAPPER_CMD[@]} -eq 3 ] && [ "${MAPPER_CMD[1]}" = "-m" ]; then
    PYTHON="${MAPPER_CMD[0]}"
fi
PYTHON="${PYTHON:-python3}"
mkdir -p "$OUT"
shopt -s nullglob
models=("$MODEL_DIR"/*.onnx)
if [ ${#models[@]} -eq 0 ]; then echo "error: no .onnx models in $MODEL_DIR" >&2; exit 2; fi
for model in "${models[@]}"; do
    stem="$(basename "$model" .onnx)"
    words="$("$PYTHON" "$HERE/ci_dims.py" "$model" "${DIM_WORDS[@]}")" || exit 2
    dims=()
    if [ -n "$words" ]; then mapfile -t dims <<< "$words"; fi
    echo "ci_recipe: $stem: ${dims[*]:-static shapes}" >&2  # stdout is the trend alone (trend.txt)
    for hw in $PROFILES; do
        "${MAPPER_CMD[@]}" map "$model" --hw "$hw" "${dims[@]}" "${LOAD_WORDS[@]}" --store "$MAPPER_STORE" --revision "$REVISION" \
            --out "$OUT/${stem}_${hw}.xlsx" >"$OUT/${stem}_${hw}.txt"
        "${MAPPER_CMD[@]}" review "$model" --hw "$hw" "${dims[@]}" "${LOAD_WORDS[@]}" --store "$MAPPER_STORE" --revision "$REVISION" \
            --out "$OUT/${stem}_${hw}_review.zip" >/dev/null
    done
done
# shellcheck disable=SC2086 # FAIL_ON is a list of KPI=FRACTION words
"${MAPPER_CMD[@]}" trend --store "$MAPPER_STORE" --fail-on-regression $FAIL_ON | tee "$OUT/trend.txt"
exit "${PIPESTATUS[0]}"
