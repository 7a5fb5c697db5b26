#!/usr/bin/env bash
# The main job: installs build dependencies, builds llmkv, fetches SmolLM2-135M-Instruct
# and has it answer a question through libllmkv on the CPU backend.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/install_deps.sh"
"$ROOT/scripts/build.sh" "$ROOT/build" -DLLMKV_BUILD_TESTS=OFF -DLLMKV_BUILD_BENCH=OFF
MODEL="$("$ROOT/scripts/fetch_model.sh")"
"$ROOT/build/tools/llmkv/llmkv" run -m "$MODEL" --chat -n 200 \
    -p "${LLMKV_DEMO_PROMPT:-Explain in three sentences why the sky is blue.}"
