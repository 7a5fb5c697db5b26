#!/usr/bin/env bash
# The GPU tests that run a real model (SmolLM2-135M greedy parity per KV codec, SmolLM2 on three
# tensor-parallel CUDA ranks) under the device emulator: minutes each, so scripts/test.sh leaves
# them out (they skip with a printed reason) and this runs them. Builds BUILD_DIR with
# -DLLMKV_CUDA=EMU first when it is not one.
#   scripts/test_emu_models.sh [BUILD_DIR]     default BUILD_DIR: build-emu
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-emu}"
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DLLMKV_CUDA=EMU \
    -DLLMKV_BUILD_BENCH=OFF -DLLMKV_BUILD_TOOLS=OFF >&2
cmake --build "$BUILD" -j "$(nproc)" --target llmkv_gpu_tests llmkv_cuda llmkv_nccl_emu >&2
export LLMKV_MODEL="${LLMKV_MODEL:-$("$ROOT/scripts/fetch_model.sh")}"
export LLMKV_EMU_MODELS=1 LLMKV_SPIN_US=0
T0=$SECONDS
ctest --test-dir "$BUILD" --output-on-failure -L gpu -R 'SmolLM2' --timeout 1800
echo "test_emu_models: passed in $(( SECONDS - T0 )) s" >&2
