#!/usr/bin/env bash
# One command for a machine with a CUDA GPU (sized for an H200 lent for ~10 minutes):
# configure + build Release with LLMKV_CUDA=ON into build-gpu, run `ctest -L gpu` (tensor
# parallelism included: a one-rank NCCL communicator on one GPU, every GPU as a rank with N), run the
# GPU benchmark, then a quick subset of the GPU tests under compute-sanitizer (memcheck,
# racecheck), print a summary table (also $OUT/report.txt). Every stage has a timeout; nothing can hang. The
# sanitizer stage comes last so the test and benchmark numbers are in first; it is bounded
# by about 3 minutes (SANITIZER_TIMEOUT per tool), so with --prebuilt give the call ~600 s.
# The same gpu tests pass in CI under the device emulator (-DLLMKV_CUDA=EMU, kernels/emu/README.md),
# there with shorter engine prompts and without the real-model tests; what only this run shows:
# nvcc's code generation, libdevice's math, cuBLAS, real NCCL, concurrency and speed.
#
#   tools/gpu-check.sh             build there, test, bench (about 3-5 minutes on 16 cores)
#   tools/gpu-check.sh --pack      on a machine WITHOUT a GPU but with the build dependencies:
#                                  build and copy the test/bench binaries, the CUDA module and
#                                  the non-system libraries they need into build-gpu/pack
#                                  (a few MiB: carry it to a GPU machine whose image lacks
#                                  GTest / flatc / utf8proc / xxhash)
#   tools/gpu-check.sh --prebuilt  skip the build, run build-gpu/pack (also chosen
#                                  automatically when configuring fails and a pack exists)
#
# Environment: JOBS (default 16), LLMKV_CUDA_ARCHITECTURES (default 90-real: H100/H200 only,
# for build time; the default multi-arch list is compiled in CI-like builds), LLMKV_MODEL
# (SmolLM2 GGUF for the greedy parity tests and the tok/s numbers), OUT (a folder that also
# receives the logs), BENCH_ARGS (e.g. --quick), GPU_CHECK_SANITIZER (1 by default; 0 skips
# the compute-sanitizer stage), SANITIZER_TOOLS (default "memcheck racecheck"; synccheck and
# initcheck also work), SANITIZER_TIMEOUT (seconds per tool, default 90),
# SANITIZER_FILTER_<tool> (a gtest filter replacing the built-in subset of that tool),
# LLMKV_NCCL_LIBRARY (libnccl.so.2 for the tensor-parallel tests; found automatically).
set -euo pipefail

cd "$(dirname "$0")/.."
ROOT=$(pwd)
BUILD=${GPU_CHECK_BUILD_DIR:-build-gpu}
PACK=$BUILD/pack
JOBS=${JOBS:-16}
ARCHS=${LLMKV_CUDA_ARCHITECTURES:-90-real}
LOGDIR=${OUT:-$BUILD/logs}
MODE=build
case "${1:-}" in
  --pack) MODE=pack ;;
  --prebuilt) MODE=prebuilt ;;
  "") ;;
  *) echo "usage: $0 [--pack|--prebuilt]" >&2; exit 2 ;;
esac
mkdir -p "$BUILD" "$LOGDIR"
T0=$(date +%s)
stage() { echo; echo "=== [$(( $(date +%s) - T0 ))s] $*"; }
export PATH=/usr/local/cuda/bin:$PATH
export LD_LIBRARY_PATH=/usr/local/cuda/lib64:/usr/local/cuda/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

build() {
  local gen=()
  command -v ninja >/dev/null && gen=(-G Ninja)
  stage "configure ($BUILD, CUDA architectures $ARCHS)"
  timeout 120 cmake -S . -B "$BUILD" "${gen[@]}" -DCMAKE_BUILD_TYPE=Release -DLLMKV_CUDA=ON \
    -DLLMKV_BUILD_BENCH=OFF -DLLMKV_BUILD_TOOLS=OFF -DLLMKV_CUDA_ARCHITECTURES="$ARCHS" \
    >"$LOGDIR/configure.log" 2>&1 || { tail -25 "$LOGDIR/configure.log"; return 1; }
  stage "build (-j$JOBS): llmkv_cuda llmkv_gpu_tests llmkv_gpu_bench"
  timeout 300 cmake --build "$BUILD" -j "$JOBS" --target llmkv_cuda llmkv_gpu_tests llmkv_gpu_bench \
    >"$LOGDIR/build.log" 2>&1 || { tail -40 "$LOGDIR/build.log"; echo "build FAILED (log: $LOGDIR/build.log)"; exit 1; }
  echo "built in $(( $(date +%s) - T0 ))s"
}

pack() {
  rm -rf "$PACK" && mkdir -p "$PACK"
  cp "$BUILD/tests/gpu/llmkv_gpu_tests" "$BUILD/tests/gpu/llmkv_gpu_bench" "$BUILD/libllmkv-cuda.so" "$PACK/"
  # Libraries a bare CUDA image may lack (CUDA's own and the C/C++ runtime are expected there).
  for bin in "$PACK/llmkv_gpu_tests" "$PACK/llmkv_gpu_bench"; do
    # (a binary may need none of them: grep finding nothing is not an error)
    ldd "$bin" | awk '/=> \// {print $3}' | { grep -E 'utf8proc|xxhash|gtest' || true; } | xargs -r -I{} cp -L {} "$PACK/"
  done
  ls -la "$PACK"
}

if [[ $MODE == pack ]]; then
  build || { echo "configure FAILED"; exit 1; }
  pack
  echo "pack ready: carry $PACK and run: tools/gpu-check.sh --prebuilt"
  exit 0
fi

stage "GPU"
HAVE_DEVICE=1
if ! timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader; then
  echo "(nvidia-smi unavailable)"
  timeout 20 nvidia-smi -L >/dev/null 2>&1 || HAVE_DEVICE=0
fi
[[ $HAVE_DEVICE == 1 ]] || echo "no CUDA device on this machine: the GPU tests will report skipped, the sanitizer stage will not run"
nvcc --version 2>/dev/null | tail -1 || true
# NCCL for the GPU tensor-parallel tests (the module loads it at run time): the CUDA toolkit's,
# else one a Python package ships (nvidia-nccl-cu13), else the module's own search
# (libnccl.so.2 on the loader's path, then the library it was built against).
if [[ -z ${LLMKV_NCCL_LIBRARY:-} ]]; then
  for f in /usr/local/cuda/lib64/libnccl.so.2 /usr/local/cuda/lib/libnccl.so.2 \
           /usr/lib/x86_64-linux-gnu/libnccl.so.2 \
           $(python3 -c 'import os, nvidia.nccl as n; print(os.path.join(list(n.__path__)[0], "lib", "libnccl.so.2"))' 2>/dev/null); do
    if [[ -f $f ]]; then export LLMKV_NCCL_LIBRARY=$f; break; fi
  done
fi
echo "NCCL: ${LLMKV_NCCL_LIBRARY:-none found here (the module looks for libnccl.so.2 itself)}"
echo "GPUs: $(timeout 20 nvidia-smi -L 2>/dev/null | wc -l) (tensor-parallel tests over NCCL need 2 or more; with 1, a one-rank communicator and ranks sharing the device)"

if [[ $MODE == build ]]; then
  if ! build; then
    if [[ -x $PACK/llmkv_gpu_tests ]]; then
      echo "configure failed here; falling back to the carried pack in $PACK"
      MODE=prebuilt
    else
      echo "configure FAILED (log: $LOGDIR/configure.log)"; exit 1
    fi
  fi
fi

set +e
if [[ $MODE == build ]]; then
  stage "ctest -L gpu"
  (cd "$BUILD" && timeout 240 ctest -L gpu --timeout 120 --parallel 4 --output-on-failure) 2>&1 | tee "$LOGDIR/ctest.log"
  TEST_RC=${PIPESTATUS[0]}
  TESTS_BIN=$BUILD/tests/gpu/llmkv_gpu_tests
  BENCH_BIN=$BUILD/tests/gpu/llmkv_gpu_bench
  export LLMKV_CUDA_MODULE=$ROOT/$BUILD/libllmkv-cuda.so
else
  export LD_LIBRARY_PATH=$ROOT/$PACK:$LD_LIBRARY_PATH
  export LLMKV_CUDA_MODULE=$ROOT/$PACK/libllmkv-cuda.so
  stage "llmkv_gpu_tests (prebuilt)"
  timeout 240 "$PACK/llmkv_gpu_tests" 2>&1 | tee "$LOGDIR/ctest.log"
  TEST_RC=${PIPESTATUS[0]}
  TESTS_BIN=$PACK/llmkv_gpu_tests
  BENCH_BIN=$PACK/llmkv_gpu_bench
fi

stage "benchmark"
# shellcheck disable=SC2086  # BENCH_ARGS is a list of words
timeout 150 "$BENCH_BIN" ${BENCH_ARGS:-} 2>&1 | tee "$LOGDIR/bench.log"
BENCH_RC=${PIPESTATUS[0]}

# compute-sanitizer over a quick subset of the GPU tests: memcheck (out-of-bounds and
# misaligned accesses, API errors) on the kernels' parity tests and the backend through the
# module; racecheck (shared-memory hazards) on the kernels that use shared memory (seal,
# attention, RMSNorm). A tool's result: "0 errors", "N errors" (fails the check), "timeout"
# (fails), "skipped (why)".
declare -A SAN_RESULT=()
SAN_RC=0
SAN_TOOLS=${SANITIZER_TOOLS:-memcheck racecheck}
declare -A SAN_FILTER=(
  [memcheck]='*KernelParity.*:*SealParity.*:*AttentionParity.*:AttentionLayouts.*:CudaBackend.*:CudaModuleAbi.*:*DequantParity.*:*MatvecParity.*:*ArchParity*-CudaModuleAbi.QuantizedPrefillCoversEveryRowChunk:CudaModuleAbi.PoolsBeyondFourGiBAddressTheirLastBlock:CudaModuleAbi.OutOfMemoryChangesNothing:AttentionLongContext.*'
  [racecheck]='*SealParity.*:*AttentionParity.*/f16_f16*:*AttentionParity.*/int4r_int4r*:*AttentionParity.*/int8r_int8r*:KernelParity.RmsNorm*'
  [synccheck]='*SealParity.*:*AttentionParity.*:KernelParity.RmsNorm*'
  [initcheck]='*KernelParity.*:*SealParity.*:*AttentionParity.*:*DequantParity.*:*MatvecParity.*')
SANITIZER=$(command -v compute-sanitizer || true)
for c in /usr/local/cuda/bin/compute-sanitizer /usr/local/cuda/compute-sanitizer/compute-sanitizer; do
  [[ -z $SANITIZER && -x $c ]] && SANITIZER=$c
done
for tool in $SAN_TOOLS; do
  if [[ ${GPU_CHECK_SANITIZER:-1} == 0 ]]; then SAN_RESULT[$tool]="skipped (GPU_CHECK_SANITIZER=0)"; continue; fi
  if [[ $HAVE_DEVICE == 0 ]]; then SAN_RESULT[$tool]="skipped (no device)"; continue; fi
  if [[ -z $SANITIZER ]]; then SAN_RESULT[$tool]="skipped (compute-sanitizer not found)"; continue; fi
  if [[ ! -x ${TESTS_BIN:-} ]]; then SAN_RESULT[$tool]="skipped (no test binary)"; continue; fi
  var=SANITIZER_FILTER_$tool
  filter=${!var:-${SAN_FILTER[$tool]:-*KernelParity.*}}
  stage "compute-sanitizer --tool $tool (--gtest_filter=$filter)"
  log=$LOGDIR/sanitizer-$tool.log
  timeout "${SANITIZER_TIMEOUT:-90}" "$SANITIZER" --tool "$tool" --error-exitcode 99 --print-limit 50 \
    "$TESTS_BIN" --gtest_filter="$filter" --gtest_brief=1 >"$log" 2>&1
  rc=$?
  tail -15 "$log"
  errors=$(grep -oE 'ERROR SUMMARY: [0-9]+' "$log" | tail -1 | grep -oE '[0-9]+$' || true)
  if [[ $rc == 124 || $rc == 137 ]]; then
    SAN_RESULT[$tool]="timeout after ${SANITIZER_TIMEOUT:-90}s (log: $log)"; SAN_RC=1
  elif [[ -n $errors && $errors != 0 ]]; then
    SAN_RESULT[$tool]="$errors errors (log: $log)"; SAN_RC=1
  elif [[ $rc != 0 ]]; then
    SAN_RESULT[$tool]="FAILED, rc=$rc${errors:+, $errors errors} (log: $log)"; SAN_RC=1
  else
    SAN_RESULT[$tool]="${errors:-0} errors"
  fi
done
set -e

stage "summary (also in $LOGDIR/report.txt)"
summary() {
  if [[ $MODE == build ]]; then
    grep -E "tests passed|tests failed" "$LOGDIR/ctest.log" | tail -1 || true
    echo "skipped: $(grep -c '(Skipped)' "$LOGDIR/ctest.log" || true)"
    grep -E "^\s+[0-9]+ - .*\((Failed|Timeout|SEGFAULT|Subprocess aborted|Exception)\)" "$LOGDIR/ctest.log" || true
  else
    grep -E "^\[  (PASSED|FAILED|SKIPPED) +\] [0-9]+ tests?" "$LOGDIR/ctest.log" || true
    grep -E "^\[  FAILED  \] [A-Za-z]" "$LOGDIR/ctest.log" | sort -u || true
  fi
  printf '\n%-44s %14s\n' "benchmark" "value"
  grep '^RESULT ' "$LOGDIR/bench.log" | awk '{printf "%-44s %14s\n", $2, $3}' || true
  printf '\n%-44s %s\n' "compute-sanitizer (quick subset)" "result"
  for tool in $SAN_TOOLS; do printf '%-44s %s\n' "$tool" "${SAN_RESULT[$tool]}"; done
  cat <<EOF

targets (shared design TARGETS.md): attention KV read >= 70% of copy bandwidth ("pct_copy" rows),
8-bit decode attention >= 1.7x fp16 at 32k ("speedup_vs_f16" rows).
tests rc=$TEST_RC  bench rc=$BENCH_RC  sanitizer rc=$SAN_RC  total $(( $(date +%s) - T0 ))s  logs: $LOGDIR
EOF
}
summary | tee "$LOGDIR/report.txt"
[[ $TEST_RC -eq 0 && $BENCH_RC -eq 0 && $SAN_RC -eq 0 ]]
