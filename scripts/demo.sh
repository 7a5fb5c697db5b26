#!/usr/bin/env bash
# The main job: installs build dependencies, builds llmkv, fetches SmolLM2-135M-Instruct and
# runs the village demo on the CPU backend: one shared lore prefix computed once, 16
# villager sessions answering together through llmkv_step, and a throughput/memory summary.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$ROOT/scripts/install_deps.sh"
"$ROOT/scripts/build.sh" "$ROOT/build" -DLLMKV_BUILD_TESTS=OFF -DLLMKV_BUILD_BENCH=OFF
MODEL="$("$ROOT/scripts/fetch_model.sh")"
"$ROOT/build/tools/llmkv/llmkv" demo -m "$MODEL" --villagers "${LLMKV_DEMO_VILLAGERS:-16}"
