#!/usr/bin/env bash
# Tensor parallelism on CPU ranks, end to end with the llmkv command: the same prompts run
#   - on one rank (llmkv run),
#   - on N ranks as threads of one process (llmkv run --tp N),
#   - on N ranks as MPI processes over loopback (mpirun -np N llmkv-mpi run --mpi),
# for SmolLM2 (3 KV heads: N = 3) and Gemma 3 270M (1 KV head, replicated: N = 2).
# The MPI ranks compute exactly what the threads do (text byte-identical, greedy and
# sampled); against one rank the greedy answers to these prompts are the same text (the
# logits differ by f32 rounding: docs/PARALLELISM.md).
#   scripts/check_tp_mpi.sh BUILD_DIR SMOLLM2.gguf [GEMMA3.gguf]
set -euo pipefail
BUILD="$1"
SMOL="$2"
GEMMA="${3:-}"
LLMKV="$BUILD/tools/llmkv/llmkv"
MPI_BIN="$BUILD/tools/llmkv/llmkv-mpi"
if [[ ! -x "$MPI_BIN" ]] || ! command -v mpirun >/dev/null; then
    echo "check_tp_mpi: SKIPPED: no llmkv-mpi or mpirun (Debian: libopenmpi-dev openmpi-bin)" >&2
    exit 0
fi
# Root in a CI container, more ranks than cores, and ranks that yield while waiting.
MPIRUN=(mpirun --oversubscribe --mca mpi_yield_when_idle 1)
[[ "$(id -u)" == 0 ]] && MPIRUN+=(--allow-run-as-root)
PROMPTS=("What is the capital of France? Answer in one sentence."
         "Name three primary colors.")
fail=0
check() {  # MODEL RANKS
    local model="$1" n="$2"
    for p in "${PROMPTS[@]}"; do
        for sampling in "--temp 0" "--temp 0.8 --seed 7"; do
            # shellcheck disable=SC2086
            one=$("$LLMKV" run -m "$model" --chat -p "$p" -n 32 -t 2 $sampling 2>/dev/null)
            # shellcheck disable=SC2086
            threads=$("$LLMKV" run -m "$model" --chat -p "$p" -n 32 -t 2 --tp "$n" $sampling 2>/dev/null)
            # shellcheck disable=SC2086
            mpi=$("${MPIRUN[@]}" -np "$n" "$MPI_BIN" run -m "$model" --chat -p "$p" -n 32 -t 1 --mpi $sampling 2>/dev/null)
            printf '%s tp=%s [%s] %q\n  tp=1:          %q\n  tp=%s threads:  %q\n  tp=%s mpi:      %q\n' \
                "$(basename "$model")" "$n" "$sampling" "$p" "$one" "$n" "$threads" "$n" "$mpi"
            if [[ "$mpi" != "$threads" ]]; then
                echo "check_tp_mpi: FAIL: MPI ranks and thread ranks differ" >&2
                fail=1
            fi
            if [[ "$sampling" == "--temp 0" && "$threads" != "$one" ]]; then
                echo "check_tp_mpi: FAIL: the greedy answer on $n ranks differs from one rank's" >&2
                fail=1
            fi
        done
    done
}
check "$SMOL" 3
[[ -n "$GEMMA" ]] && check "$GEMMA" 2
# A mixture of experts (the tests' tiny Qwen3-MoE-style model, random weights, no chat
# template) on 2 ranks, every expert split by columns and whole experts per rank
# (LLMKV_TP_EXPERTS, carried to the MPI ranks in the set-up message): MPI = threads, and the
# greedy text equals one rank's.
WRITER="$BUILD/tools/soak/llmkv_write_tiny_model"
if [[ -x "$WRITER" ]]; then
    MOE=$(mktemp --suffix=.gguf)
    trap 'rm -f "$MOE"' EXIT
    "$WRITER" "$MOE" 256 moe
    one=$("$LLMKV" run -m "$MOE" -p "the quick brown fox" -n 24 -t 2 --temp 0 2>/dev/null)
    for split in columns whole; do
        threads=$(LLMKV_TP_EXPERTS=$split "$LLMKV" run -m "$MOE" -p "the quick brown fox" -n 24 -t 2 --tp 2 --temp 0 2>/dev/null)
        mpi=$(LLMKV_TP_EXPERTS=$split "${MPIRUN[@]}" -x LLMKV_TP_EXPERTS -np 2 "$MPI_BIN" run -m "$MOE" -p "the quick brown fox" -n 24 -t 1 --mpi --temp 0 2>/dev/null)
        printf 'tiny qwen3moe tp=2 experts=%s\n  tp=1: %q\n  threads: %q\n  mpi: %q\n' "$split" "$one" "$threads" "$mpi"
        if [[ -z "$one" || "$mpi" != "$threads" || "$threads" != "$one" ]]; then
            echo "check_tp_mpi: FAIL: the mixture of experts (experts $split) differs between one rank, 2 thread ranks and 2 MPI ranks" >&2
            fail=1
        fi
    done
else
    echo "check_tp_mpi: mixture of experts SKIPPED: no $WRITER (built with the tests)" >&2
fi
# A rank whose model file is missing: rank 0 reports it and every process exits non-zero.
if "${MPIRUN[@]}" -np 2 "$MPI_BIN" run -m /nonexistent.gguf -p hi -n 1 --mpi >/dev/null 2>&1; then
    echo "check_tp_mpi: FAIL: a missing model did not fail the MPI run" >&2
    fail=1
fi
[[ $fail == 0 ]] && echo "check_tp_mpi: OK (MPI ranks equal thread ranks; greedy answers equal one rank's)"
exit $fail
