#!/usr/bin/env bash
# A CI job for a repository of models: map every model on every profile, record each run in the team's
# store, keep the sheets and review packets as artifacts, and fail when the latest revision regresses
# against the previous one. tests/test_ci_recipe.py runs it twice.
#
#   MAPPER_STORE=postgresql://ci@db/mapper MODEL_DIR=models PROFILES="h100-sxm h200-sxm" \
#     REVISION=$CI_COMMIT_SHA FAIL_ON="p99=0.05 mfu=0.05" DIMS="batch=8 seq=128" OUT=artifacts bash scripts/ci_recipe.sh
#
# DIMS binds the models' symbolic dims (NAME=VALUE words, each passed as --dim; a model ignores none it lacks:
# give the dims every model of the folder has, or keep static-shape models).
# MAPPER (default `mapper`) is the command to run, e.g. "python -m mapper". Exit: 0, 1 on a regression, 2 on bad input.
set -euo pipefail
: "${MAPPER_STORE:?set MAPPER_STORE to the team store URL}"
MODEL_DIR="${MODEL_DIR:-.}"
PROFILES="${PROFILES:-h100-sxm}"
OUT="${OUT:-artifacts}"
FAIL_ON="${FAIL_ON:-p99=0.05}"
DIM_ARGS=()
for d in ${DIMS:-}; do DIM_ARGS+=(--dim "$d"); done
REVISION="${REVISION:-$(git -C "$MODEL_DIR" rev-parse --short=12 HEAD 2>/dev/null || echo unlabelled)}"
read -r -a MAPPER_CMD <<< "${MAPPER:-mapper}"
mkdir -p "$OUT"
shopt -s nullglob
models=("$MODEL_DIR"/*.onnx)
if [ ${#models[@]} -eq 0 ]; then echo "error: no .onnx models in $MODEL_DIR" >&2; exit 2; fi
for model in "${models[@]}"; do
    stem="$(basename "$model" .onnx)"
    for hw in $PROFILES; do
        "${MAPPER_CMD[@]}" map "$model" --hw "$hw" "${DIM_ARGS[@]}" --store "$MAPPER_STORE" --revision "$REVISION" \
            --out "$OUT/${stem}_${hw}.xlsx" >"$OUT/${stem}_${hw}.txt"
        "${MAPPER_CMD[@]}" review "$model" --hw "$hw" "${DIM_ARGS[@]}" --store "$MAPPER_STORE" --revision "$REVISION" \
            --out "$OUT/${stem}_${hw}_review.zip" >/dev/null
    done
done
# shellcheck disable=SC2086 # FAIL_ON is a list of KPI=FRACTION words
"${MAPPER_CMD[@]}" trend --store "$MAPPER_STORE" --fail-on-regression $FAIL_ON | tee "$OUT/trend.txt"
exit "${PIPESTATUS[0]}"
