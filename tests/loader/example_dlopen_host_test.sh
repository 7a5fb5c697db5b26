#!/usr/bin/env bash
# examples/dlopen_host.c end to end: it loads the built library by path, answers on the real
# model, and without a library it fails with the loader's message.
#   example_dlopen_host_test.sh EXAMPLE LIB MODEL
# Exits 77 (skipped) with a reason when the model is absent.
set -euo pipefail
EXAMPLE="$1"; LIB="$2"
MODEL="${LLMKV_MODEL:-$3}"
out=$(LLMKV_LIBRARY=/nonexistent/libllmkv.so.0 "$EXAMPLE" "$MODEL" 2>&1) && { echo "FAIL: ran without a library"; exit 1; }
echo "$out"
grep -q '^llmkv is not available: cannot open /nonexistent/libllmkv.so.0 (from LLMKV_LIBRARY): ' <<<"$out" \
    || { echo "FAIL: no loader message"; exit 1; }
if [[ ! -f "$MODEL" ]]; then
    echo "SKIP: model not found at $MODEL (set LLMKV_MODEL or run scripts/fetch_model.sh)"
    exit 77
fi
out=$("$EXAMPLE" --library "$LIB" "$MODEL")
echo "$out"
grep -q '^loaded llmkv [0-9]*\.[0-9]*\.[0-9]* (built against the ' <<<"$out" || { echo "FAIL: no version line"; exit 1; }
answer=$(sed -n '/^> /,$p' <<<"$out" | tail -n +2 | tr -d '[:space:]')
[[ -n "$answer" ]] || { echo "FAIL: empty answer"; exit 1; }
echo "ok"
