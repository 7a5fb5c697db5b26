#!/usr/bin/env bash
# Runs every test: installs dependencies, fetches the models (SmolLM2 and Gemma 3 270M: golden
# and model-backed tests need them), builds and runs the whole suite, then rebuilds the loader, tokenizer, engine and
# C API tests under AddressSanitizer + UndefinedBehaviorSanitizer and runs them again, and
# the host-tier tests under ThreadSanitizer, the allocation-failure sweeps, a 30 s soak, and
# every fuzz target for a bounded time.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="$(nproc)"
"$ROOT/scripts/install_deps.sh"
export LLMKV_MODEL="$("$ROOT/scripts/fetch_model.sh")"
# Gemma 3 270M (k-quants, sliding-window layers): its golden, tokenizer and forward tests.
export LLMKV_GEMMA3_MODEL="$("$ROOT/scripts/fetch_model.sh" gemma3)"

echo "== Release build and full test suite" >&2
"$ROOT/scripts/build.sh" "$ROOT/build-test"
ctest --test-dir "$ROOT/build-test" --output-on-failure -j "$JOBS"
echo "== CUDA kernel resources for sm_90 (ptxas -v; fails if a hot kernel spills; skipped without the CUDA module)" >&2
CUDA_RESOURCE_ARCHS="${CUDA_RESOURCE_ARCHS:-90}" JOBS="$JOBS" "$ROOT/tools/cuda-resources.sh" "$ROOT/build-test"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build" >&2
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$ROOT" -B "$ROOT/build-asan" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLLMKV_SANITIZE=address,undefined -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF >&2
cmake --build "$ROOT/build-asan" -j "$JOBS" --target llmkv_unit_tests llmkv_test_capi_all >&2
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$ROOT/build-asan" --output-on-failure -j "$JOBS" -L 'unit|capi' \
    -R 'Gguf|Tokenizer|Utf8|Engine|BlockPool|KvCache|capi|Constraints|StopStrings|Grammar|ChatTemplate|Scheduler|KvGroups'
echo "== ThreadSanitizer build: the copy thread against the engine (park, swap, destroy in flight)" >&2
cmake -S "$ROOT" -B "$ROOT/build-tsan" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLLMKV_SANITIZE=thread -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF -DLLMKV_BUILD_TOOLS=OFF >&2
cmake --build "$ROOT/build-tsan" -j "$JOBS" --target llmkv_unit_tests >&2
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$ROOT/build-tsan" --output-on-failure -j "$JOBS" -L unit \
    -R 'EngineHostTier|CopyEngine|HostTier'
echo "== Fault injection (ASan + UBSan): allocation-failure sweeps, snapshot I/O failures" >&2
cmake -S "$ROOT" -B "$ROOT/build-fault" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DLLMKV_FAULT_INJECTION=ON \
    -DLLMKV_SANITIZE=address,undefined -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF -DLLMKV_BUILD_TOOLS=OFF >&2
cmake --build "$ROOT/build-fault" -j "$JOBS" --target llmkv_fault_tests >&2
ctest --test-dir "$ROOT/build-fault" --output-on-failure -L fault
echo "== Soak (30 s on the tiny model; scripts/soak.sh MINUTES for the real one)" >&2
env -u LLMKV_MODEL BUILD_DIR="$ROOT/build-test" "$ROOT/scripts/soak.sh" 0.5 "$ROOT/build-test/soak"
echo "== Fuzz targets (libFuzzer + ASan/UBSan, 20 s each from the committed corpora; scripts/fuzz.sh runs longer)" >&2
"$ROOT/scripts/fuzz.sh" "${LLMKV_FUZZ_SECONDS:-20}"
echo "== all tests passed" >&2
