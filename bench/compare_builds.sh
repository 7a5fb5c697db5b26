#!/usr/bin/env bash
# Runs the same `llmkv` benchmarks with two builds, alternating (A B A B) so that both see
# the same machine state, and prints each run's output under its label. For "no speed
# regression" checks of a change: compare the two builds' numbers from one run of this script.
#
# Usage: bench/compare_builds.sh OLD_LLMKV NEW_LLMKV [MODEL]
#   OLD_LLMKV / NEW_LLMKV: paths to the two `llmkv` binaries (e.g. a worktree of the base commit,
#   built with scripts/build.sh); MODEL defaults to $LLMKV_MODEL, then models/SmolLM2-....gguf.
# Environment: ROUNDS (default 2), BENCH_ARGS (default "-t 1 -t 2 --reps 2 --context 2048"),
#   BATCH_ARGS (default "--decode-tokens 32"; set to "skip" to leave bench batch out).
set -euo pipefail
OLD="$1"
NEW="$2"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MODEL="${3:-${LLMKV_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}}"
ROUNDS="${ROUNDS:-2}"
read -r -a BENCH <<<"${BENCH_ARGS:--t 1 -t 2 --reps 2 --context 2048}"
read -r -a BATCH <<<"${BATCH_ARGS:---decode-tokens 32}"
for round in $(seq 1 "$ROUNDS"); do
    for which in old new; do
        bin="$OLD"
        [ "$which" = new ] && bin="$NEW"
        echo "=== round $round, $which: $bin bench -m $MODEL ${BENCH[*]}"
        "$bin" bench -m "$MODEL" "${BENCH[@]}"
        if [ "${BATCH[*]}" != skip ]; then
            echo "=== round $round, $which: $bin bench batch -m $MODEL ${BATCH[*]}"
            "$bin" bench batch -m "$MODEL" "${BATCH[@]}"
        fi
    done
done
