#!/usr/bin/env bash
# The Linux and the Windows builds decode the same text: `llmkv run` of a Linux build and
# `llmkv.exe run` of the MinGW build (under Wine) on the same prompts, greedy and seeded
# sampling, f16 and int4 KV, SmolLM2 and (when given) Gemma 3 (k-quants, GELU, sliding
# windows), with the same thread count. Their output must be byte-identical: the library's
# math does not come from the C runtime (src/common/float_math.h) and the same CPU runs the
# same kernels.
#
#   scripts/check_cross_os_tokens.sh LINUX_BUILD_DIR WINDOWS_BUILD_DIR MODEL [GEMMA_MODEL]
set -euo pipefail
LINUX="$1/tools/llmkv/llmkv"
WIN="$2/tools/llmkv/llmkv.exe"
MODEL="$3"
GEMMA="${4:-}"
export WINEPREFIX="${WINEPREFIX:-$(cd "$2" && pwd)/wineprefix}" WINEDEBUG=-all
[[ -x "$LINUX" && -f "$WIN" ]] || { echo "check_cross_os_tokens: need $LINUX and $WIN" >&2; exit 1; }
PROMPT="The old miller walked to the market with bread and a story about winter stars. Then"
failed=0
compare() {  # label, model, run options...
    local label="$1" model="$2"
    shift 2
    local a b
    a="$("$LINUX" run -m "$model" -p "$PROMPT" -t 2 "$@" 2>/dev/null)"
    b="$(wine "$WIN" run -m "$model" -p "$PROMPT" -t 2 "$@" 2>/dev/null | tr -d '\r')"
    if [[ "$a" == "$b" ]]; then
        echo "same text on Linux and Windows: $label (${#a} bytes)"
    else
        echo "DIFFERENT text on Linux and Windows: $label" >&2
        diff <(echo "$a") <(echo "$b") >&2 || true
        failed=1
    fi
}
compare "SmolLM2 greedy, f16 KV" "$MODEL" -n 64
compare "SmolLM2 seeded sampling, int4 KV" "$MODEL" -n 64 --temp 0.8 --top-p 0.95 --seed 7 --kv-dtype int4
if [[ -n "$GEMMA" && -f "$GEMMA" ]]; then
    compare "Gemma 3 greedy, int8 KV" "$GEMMA" -n 48 --kv-dtype int8
    compare "Gemma 3 seeded sampling, f16 KV" "$GEMMA" -n 48 --temp 0.9 --seed 3
fi
exit $failed
