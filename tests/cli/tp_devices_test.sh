#!/usr/bin/env bash
# `llmkv run --devices` and `llmkv bench tp --devices` (GPU tensor-parallel ranks): a list that
# does not fit the rank count is refused before anything loads (exit 1, the message says why);
# without a usable CUDA device the engine refuses GPU ranks naming the reason (exit 1); with
# one, `run --devices 0 --tp 3` (three ranks sharing the device) must exit 0 and print text
# (the tokens are compared with one rank's by the gpu suite, tests/gpu/tp_cuda_test.cpp).
# Exits 77 (skipped) with a reason when the model is absent.
set -euo pipefail
LLMKV="$1"
MODEL="${LLMKV_MODEL:-$2}"
if [[ ! -f "$MODEL" ]]; then
    echo "SKIP: model not found at $MODEL (set LLMKV_MODEL or run scripts/fetch_model.sh)"
    exit 77
fi
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT

expect_fail() {  # expect_fail NAME PATTERN ARGS...
    local name=$1 pattern=$2
    shift 2
    set +e
    "$LLMKV" "$@" > "$DIR/$name.out" 2> "$DIR/$name.err"
    local rc=$?
    set -e
    [[ $rc == 1 ]] || { echo "$name: exit $rc, expected 1"; cat "$DIR/$name.err"; exit 1; }
    grep -q -- "$pattern" "$DIR/$name.err" || { echo "$name: no '$pattern' in:"; cat "$DIR/$name.err"; exit 1; }
}

expect_fail run_too_few "lists 2 devices for 3 ranks" run -m "$MODEL" -p "Hi" -n 2 --devices 0,1 --tp 3
# bench tp refuses the same list at its first rank count (exit 2: bad arguments)
set +e
"$LLMKV" bench tp -m "$MODEL" --tp-sizes 3 --devices 0,1 --prompt-tokens 4 --gen-tokens 2 > "$DIR/b.out" 2> "$DIR/b.err"
rc=$?
set -e
[[ $rc == 2 ]] || { echo "bench tp --devices 0,1 --tp-sizes 3: exit $rc, expected 2"; cat "$DIR/b.err"; exit 1; }
grep -q "lists 2 devices for 3 ranks" "$DIR/b.err" || { echo "bench tp: no reason"; cat "$DIR/b.err"; exit 1; }

set +e
"$LLMKV" run -m "$MODEL" -p "The capital of France is" -n 4 --devices 0 --tp 3 > "$DIR/gpu.out" 2> "$DIR/gpu.err"
rc=$?
set -e
if [[ $rc == 0 ]]; then
    [[ -s "$DIR/gpu.out" ]] || { echo "GPU ranks ran but printed nothing"; exit 1; }
    echo "a CUDA device is present: three GPU ranks on device 0 ran"
else
    [[ $rc == 1 ]] || { echo "run --devices 0 --tp 3: exit $rc"; cat "$DIR/gpu.err"; exit 1; }
    grep -q "LLMKV_ERR_UNSUPPORTED: GPU tensor-parallel ranks: the CUDA backend is not available" "$DIR/gpu.err" ||
        { echo "no CUDA device: the refusal does not say why:"; cat "$DIR/gpu.err"; exit 1; }
    echo "no CUDA device here: GPU ranks refused with the reason"
fi
echo "ok"
