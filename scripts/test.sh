#!/usr/bin/env bash
# Runs every test: installs dependencies, fetches the models (SmolLM2 and Gemma 3 270M: golden
# and model-backed tests need them), builds and runs the whole suite (the Go, Rust and C#
# bindings' tests included), then rebuilds the loader, tokenizer, engine, packed-matmul and C API tests
# under AddressSanitizer + UndefinedBehaviorSanitizer (with the allocation-failure sweeps) and runs
# them again with the fuzz corpora replayed, the host-tier and worker-thread tests under
# ThreadSanitizer and a 30 s soak. LLMKV_FUZZ_SECONDS=N also runs every libFuzzer target for N s
# (scripts/fuzz.sh: a clang build of its own, about 7 minutes here before the first input).
# The Windows stage cross-builds with MinGW-w64 and runs the Windows tests and the demo under
# Wine (scripts/test_windows.sh).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
JOBS="$(nproc)"
# Every "== stage" line below is preceded by the minutes spent so far (CI's budget is 30).
T0=$SECONDS
echo() { if [[ "${1:-}" == "== "* ]]; then builtin echo "[test.sh $(( (SECONDS - T0) / 60 ))m$(( (SECONDS - T0) % 60 ))s]" >&2; fi; builtin echo "$@"; }
"$ROOT/scripts/install_deps.sh"
# The Rust binding's tests use the preinstalled toolchain (rustup's default place).
[[ -d "$HOME/.cargo/bin" ]] && export PATH="$HOME/.cargo/bin:$PATH"
export LLMKV_MODEL="$("$ROOT/scripts/fetch_model.sh")"
# Gemma 3 270M (k-quants, sliding-window layers): its golden, tokenizer and forward tests.
export LLMKV_GEMMA3_MODEL="$("$ROOT/scripts/fetch_model.sh" gemma3)"
# ctest -j N runs N tests at once, most of them with a thread pool as wide as the machine.
# The pool's 200 us poll between ops (for cores it has to itself) then takes the CPU the other
# tests need: the golden and batching tests took 205 s with it and 122 s without (-j2, 2 vCPUs,
# 2026-12-03). With 0 a pool's workers sleep as soon as they are idle; no result depends on
# it. The polling path keeps its own tests (ThreadPool.*, which set the spin explicitly; also
# under ThreadSanitizer below), and the stage that runs one test at a time polls (fault).
export LLMKV_SPIN_US=0
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)

echo "== Formatting: every C/C++/CUDA file as clang-format makes it (scripts/check_format.sh)" >&2
"$ROOT/scripts/check_format.sh"
echo "== Release build and full test suite (C API, units, golden, CLI, the Go/Rust/C# bindings)" >&2
# The CUDA module (when nvcc exists) for Hopper only: the other architectures of a default
# build compile the same sources (the one __CUDA_ARCH__ test is a launch-bounds constant), and
# paged_attention.cu alone costs about 2.5 minutes of a core per architecture.
"$ROOT/scripts/build.sh" "$ROOT/build-test" -DLLMKV_CUDA_ARCHITECTURES="90-real" -DCMAKE_INSTALL_PREFIX=/usr
ctest --test-dir "$ROOT/build-test" --output-on-failure -j "$JOBS"
echo "== Tensor parallelism end to end: SmolLM2 on 3 and Gemma 3 on 2 CPU ranks, as threads and as MPI processes (scripts/check_tp_mpi.sh)" >&2
"$ROOT/scripts/check_tp_mpi.sh" "$ROOT/build-test" "$LLMKV_MODEL" "$LLMKV_GEMMA3_MODEL"
echo "== Windows: MinGW-w64 cross build, then under Wine the unit subset, every C API test and the demo (scripts/test_windows.sh)" >&2
"$ROOT/scripts/test_windows.sh" "$ROOT/build-win"
echo "== Linux and Windows builds decode byte-identical text (greedy and sampled, SmolLM2 and Gemma 3; scripts/check_cross_os_tokens.sh)" >&2
"$ROOT/scripts/check_cross_os_tokens.sh" "$ROOT/build-test" "$ROOT/build-win" "$LLMKV_MODEL" "$LLMKV_GEMMA3_MODEL"
if [[ "${LLMKV_TEST_EMU:-1}" != 0 ]]; then
    echo "== CUDA module under the device emulator (-DLLMKV_CUDA=EMU, kernels/emu/README.md): every gpu test, the emulator's own tests, and the defect modes (reverse thread order, held streams) over the kernel and backend tests" >&2
    # Only what the gpu and emu tests need is built (the library, the module, the tests).
    cmake -S "$ROOT" -B "$ROOT/build-emu" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release -DLLMKV_CUDA=EMU \
        -DLLMKV_BUILD_BENCH=OFF -DLLMKV_BUILD_TOOLS=OFF >&2
    cmake --build "$ROOT/build-emu" -j "$JOBS" --target llmkv_gpu_tests llmkv_emu_tests llmkv_cuda llmkv_nccl_emu >&2
    EMU_T0=$SECONDS
    ctest --test-dir "$ROOT/build-emu" --output-on-failure -j "$JOBS" -L 'gpu|emu' | tee "$ROOT/build-emu/ctest-gpu.log"
    builtin echo "emu: $(grep -cE '^ *[0-9]+/[0-9]+ Test .* Passed' "$ROOT/build-emu/ctest-gpu.log") passed, $(grep -cE '\*\*\*Skipped' "$ROOT/build-emu/ctest-gpu.log") skipped, in $(( SECONDS - EMU_T0 )) s" >&2
    # The defect modes over the kernel parity and backend tests (the engine tests add time, not
    # other kernels or orderings).
    EMU_MODE_TESTS='SealParity|KernelParity|AttentionParity|AttentionLayouts|AttentionLongContext|DequantParity|MatvecParity|CudaBackend|CudaModuleAbi|TinyModelParity|ArchParity|TpCudaModule|MoeModule'
    LLMKV_EMU=reverse,quiet ctest --test-dir "$ROOT/build-emu" --output-on-failure -j "$JOBS" -L gpu -R "$EMU_MODE_TESTS"
    # Held streams also over the engine's host tier and preemption (its asynchronous copies).
    LLMKV_EMU=hold,quiet ctest --test-dir "$ROOT/build-emu" --output-on-failure -j "$JOBS" -L gpu \
        -R "$EMU_MODE_TESTS|EngineCuda\.(Preemption|SessionBeyond).*/0"
fi
echo "== CUDA kernel resources for sm_90 (ptxas -v; fails if a hot kernel spills; skipped without the CUDA module)" >&2
CUDA_RESOURCE_ARCHS="${CUDA_RESOURCE_ARCHS:-90}" JOBS="$JOBS" "$ROOT/tools/cuda-resources.sh" "$ROOT/build-test"
echo "== Debian packages from the built tree (cpack, lintian, versions, shlibdeps); clean-system install (debootstrap, apt) with both consumers, then purge" >&2
"$ROOT/scripts/package_deb.sh" "$ROOT/build-test" "$ROOT/build-test/debs"
"$ROOT/scripts/package_install_test.sh" "$ROOT/build-test/debs" "$LLMKV_MODEL"

echo "== AddressSanitizer + UndefinedBehaviorSanitizer build (with fault injection, inert until a test arms it)" >&2
# Sanitizer builds at -O1 with line tables only (what the sanitizers' documentation suggests;
# stack traces keep file:line): measured on engine.cpp and json_schema.cpp, 2.3x less compile
# time than RelWithDebInfo's -O2 -g, which CI spent most of these stages on.
SAN_FLAGS=(-DCMAKE_BUILD_TYPE=RelWithDebInfo "-DCMAKE_C_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG"
    "-DCMAKE_CXX_FLAGS_RELWITHDEBINFO=-O1 -g1 -DNDEBUG")
# Only the unit tests this stage runs are compiled.
cmake -S "$ROOT" -B "$ROOT/build-asan" "${GEN[@]}" "${SAN_FLAGS[@]}" \
    -DLLMKV_SANITIZE=address,undefined -DLLMKV_FAULT_INJECTION=ON -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF \
    -DLLMKV_BUILD_TOOLS=OFF \
    -DLLMKV_UNIT_TEST_FILTER='/(gguf|tokenizer|engine|engine_window|batching|host_offload|block_pool|constraints|grammar|chat_template|scheduler|kv_groups|tensor_parallel|matmul_packed|thread_pool|setup|worker)_test\.cpp$' >&2
cmake --build "$ROOT/build-asan" -j "$JOBS" --target llmkv_unit_tests llmkv_test_capi_all llmkv_fault_tests \
    fuzz_replay_gguf fuzz_replay_tokenizer fuzz_replay_chat fuzz_replay_snapshot fuzz_replay_capi fuzz_replay_grammar >&2
export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
ctest --test-dir "$ROOT/build-asan" --output-on-failure -j "$JOBS" -L 'unit|capi' \
    -R 'Gguf|Tokenizer|Utf8|Engine|BlockPool|KvCache|capi|Constraints|StopStrings|Grammar|ChatTemplate|Scheduler|KvGroups|TpForward|TpCodec|TpKvLayout|TpShard|TpCommunicator|PackedMatmul|PackedWeights|ThreadPool'
echo "== Fault injection (same build): allocation-failure sweeps, snapshot I/O failures" >&2
# One test at a time: polling is faster here (fault.workload 14 s, 21 s without).
env -u LLMKV_SPIN_US ctest --test-dir "$ROOT/build-asan" --output-on-failure -L fault
echo "== Fuzz corpora replayed under ASan/UBSan (every seed and regression input of every target)" >&2
ctest --test-dir "$ROOT/build-asan" --output-on-failure -j "$JOBS" -L fuzz
echo "== ThreadSanitizer build: the copy thread against the engine (park, swap, destroy in flight), the worker thread, tensor-parallel rank threads" >&2
cmake -S "$ROOT" -B "$ROOT/build-tsan" "${GEN[@]}" "${SAN_FLAGS[@]}" \
    -DLLMKV_SANITIZE=thread -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF -DLLMKV_BUILD_TOOLS=OFF \
    -DLLMKV_UNIT_TEST_FILTER='/(copy_engine|host_tier|host_offload|tensor_parallel|thread_pool|worker)_test\.cpp$' >&2
cmake --build "$ROOT/build-tsan" -j "$JOBS" --target llmkv_unit_tests capi_api_worker capi_api_threads >&2
TSAN_OPTIONS=halt_on_error=1 ctest --test-dir "$ROOT/build-tsan" --output-on-failure -j "$JOBS" -L 'unit|capi' \
    -R 'EngineHostTier|CopyEngine|HostTier|capi.api_worker|capi.api_threads|TpEngine|TpForward|TpKvLayout|TpCommunicator|ThreadPool|Worker\.'
echo "== Soak (30 s on the tiny model; scripts/soak.sh MINUTES for the real one)" >&2
env -u LLMKV_MODEL BUILD_DIR="$ROOT/build-test" "$ROOT/scripts/soak.sh" 0.5 "$ROOT/build-test/soak"
if [[ "${LLMKV_FUZZ_SECONDS:-0}" != 0 ]]; then
    echo "== Fuzz targets (libFuzzer + ASan/UBSan, $LLMKV_FUZZ_SECONDS s each from the committed corpora)" >&2
    "$ROOT/scripts/fuzz.sh" "$LLMKV_FUZZ_SECONDS"
else
    echo "== libFuzzer runs skipped (the corpora were replayed under ASan/UBSan above); LLMKV_FUZZ_SECONDS=N or scripts/fuzz.sh N runs them" >&2
fi
echo "== all tests passed ($(( (SECONDS - T0) / 60 )) min)" >&2
