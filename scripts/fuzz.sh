#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build-fuzz/, LLMKV_FUZZ=ON: the library, the test
# support code and the targets instrumented with -fsanitize=fuzzer,address,undefined) and
# runs each for SECONDS (default 60) seeded from its committed corpus fuzz/corpus/<target>/.
# New inputs go to build-fuzz/corpus/<target>/ (never into the repository); a crash input is
# kept under build-fuzz/crashes/<target>/ and fails the script. Prints executions, exec/s,
# coverage (cov/ft) and corpus size per target from libFuzzer's final stats.
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]     targets: gguf tokenizer chat snapshot capi grammar
# Environment: FUZZ_JOBS (build parallelism, default nproc), FUZZ_ARGS (extra libFuzzer flags).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$ROOT/build-fuzz"
SECONDS_PER_TARGET="${1:-60}"
shift || true
TARGETS=("$@")
[ ${#TARGETS[@]} -gt 0 ] || TARGETS=(gguf tokenizer chat snapshot capi grammar)
JOBS="${FUZZ_JOBS:-$(nproc)}"

command -v clang++ >/dev/null || { echo "fuzz.sh: clang++ not found (apt-get install clang libclang-rt-dev)" >&2; exit 2; }
GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
echo "== configure and build ($BUILD)" >&2
start=$(date +%s)
CC=clang CXX=clang++ cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
    -DLLMKV_FUZZ=ON -DLLMKV_WERROR=OFF -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF -DLLMKV_BUILD_TOOLS=OFF >&2
cmake --build "$BUILD" -j "$JOBS" --target $(printf 'fuzz_%s ' "${TARGETS[@]}") >&2
echo "== built in $(( $(date +%s) - start )) s" >&2

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1:allocator_may_return_null=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}"
export LLMKV_FUZZ_TMPDIR="${LLMKV_FUZZ_TMPDIR:-}"
failed=()
summary=()
for t in "${TARGETS[@]}"; do
    seeds="$ROOT/fuzz/corpus/$t"
    work="$BUILD/corpus/$t"
    crashes="$BUILD/crashes/$t"
    log="$BUILD/logs/$t.log"
    mkdir -p "$work" "$crashes" "$(dirname "$log")"
    echo "== $t: ${SECONDS_PER_TARGET} s" >&2
    rc=0
    # Inputs the run finds go to $work (first corpus dir); the seeds are only read.
    "$BUILD/fuzz/fuzz_$t" "$work" "$seeds" -max_total_time="$SECONDS_PER_TARGET" -print_final_stats=1 \
        -artifact_prefix="$crashes/" -rss_limit_mb=2048 -timeout=10 ${FUZZ_ARGS:-} >"$log" 2>&1 || rc=$?
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+.*(cov|ft):' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
    summary+=("$(printf '%-10s execs %-10s exec/s %-7s cov %-6s ft %-7s corpus %s' "$t" "${execs:-?}" "${rate:-?}" \
        "${cov:-?}" "${ft:-?}" "${corp:-?}")")
    if [ "$rc" -ne 0 ]; then
        failed+=("$t")
        echo "!! $t failed (exit $rc); log $log; inputs kept in $crashes:" >&2
        ls -1 "$crashes" >&2 || true
        grep -E 'ERROR|FUZZ_CHECK|SUMMARY|==[0-9]+==' "$log" | head -20 >&2 || true
    fi
done
echo "== results (${SECONDS_PER_TARGET} s per target)"
printf '%s\n' "${summary[@]}"
if [ ${#failed[@]} -gt 0 ]; then
    echo "== FAILED: ${failed[*]} (crash inputs under $BUILD/crashes/)" >&2
    exit 1
fi
echo "== no crashes"
