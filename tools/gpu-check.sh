#!/usr/bin/env bash
# One command for a machine with a CUDA GPU (sized for an H200 lent for ~10 minutes):
# configure + build Release with LLMKV_CUDA=ON into build-gpu, run `ctest -L gpu`, run the
# GPU benchmark, print a summary table. Every stage has a timeout; nothing can hang.
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
# receives the logs), BENCH_ARGS (e.g. --quick).
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
timeout 20 nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader || echo "(nvidia-smi unavailable)"
nvcc --version 2>/dev/null | tail -1 || true

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
  BENCH_BIN=$PACK/llmkv_gpu_bench
fi

stage "benchmark"
timeout 150 "$BENCH_BIN" ${BENCH_ARGS:-} 2>&1 | tee "$LOGDIR/bench.log"
BENCH_RC=${PIPESTATUS[0]}
set -e

stage "summary"
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
cat <<EOF

targets (shared design TARGETS.md): attention KV read >= 70% of copy bandwidth ("pct_copy" rows),
8-bit decode attention >= 1.7x fp16 at 32k ("speedup_vs_f16" rows).
tests rc=$TEST_RC  bench rc=$BENCH_RC  total $(( $(date +%s) - T0 ))s  logs: $LOGDIR
EOF
[[ $TEST_RC -eq 0 && $BENCH_RC -eq 0 ]]
