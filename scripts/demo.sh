#!/usr/bin/env bash
# The main job: installs build dependencies, builds llmkv, fetches SmolLM2-135M-Instruct and
# runs the village demo on the CPU backend: one shared lore prefix computed once, 16
# villager sessions answering together through llmkv_step, and a throughput/memory summary.
#
#   scripts/demo.sh [-m FILE.gguf | -m MODEL] [more llmkv demo options]
# -m takes a GGUF file, or a name scripts/fetch_model.sh knows (smollm2, gemma3), fetched
# first. Without -m: SmolLM2 ($LLMKV_MODEL when it names a file). Other options go to
# `llmkv demo` (e.g. --villagers 4 -n 32); LLMKV_DEMO_VILLAGERS sets --villagers (16).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"

MODEL_ARG=""
EXTRA=()
while [[ $# -gt 0 ]]; do
    case "$1" in
        -m|--model)
            [[ $# -ge 2 ]] || { echo "demo.sh: $1 needs a FILE or a model name" >&2; exit 2; }
            MODEL_ARG="$2"
            shift 2
            ;;
        -m=*|--model=*)
            MODEL_ARG="${1#*=}"
            shift
            ;;
        -h|--help)
            sed -n '2,9p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
            exit 0
            ;;
        *)
            EXTRA+=("$1")
            shift
            ;;
    esac
done

"$ROOT/scripts/install_deps.sh"
"$ROOT/scripts/build.sh" "$ROOT/build" -DLLMKV_BUILD_TESTS=OFF -DLLMKV_BUILD_BENCH=OFF
if [[ -z "$MODEL_ARG" ]]; then
    MODEL="$("$ROOT/scripts/fetch_model.sh")"
elif [[ -f "$MODEL_ARG" ]]; then
    MODEL="$MODEL_ARG"
else
    MODEL="$("$ROOT/scripts/fetch_model.sh" "$MODEL_ARG")"
fi
has_villagers=0
for a in "${EXTRA[@]+"${EXTRA[@]}"}"; do
    [[ "$a" == --villagers* ]] && has_villagers=1
done
if [[ $has_villagers -eq 0 ]]; then
    EXTRA+=(--villagers "${LLMKV_DEMO_VILLAGERS:-16}")
fi
"$ROOT/build/tools/llmkv/llmkv" demo -m "$MODEL" "${EXTRA[@]}"
