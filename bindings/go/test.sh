#!/usr/bin/env bash
# bindings/go/test.sh - builds the Go binding of llmkv and runs everything CI checks:
# the ABI check against include/llmkv.h, go vet, the tests (plain and under the race
# detector) and the two_sessions example over the real model.
#
#   LLMKV_LIB_DIR=DIR       directory holding libllmkv.so (default: <repo>/build)
#   LLMKV_INCLUDE_DIR=DIR   directory holding llmkv.h (default: <repo>/include)
#   LLMKV_MODEL=FILE        a GGUF model (SmolLM2-135M-Instruct); without it the tests that
#                           need a model skip with a printed reason and the example is skipped
#
# Exit status: 0 all passed, 1 a failure, 77 the Go toolchain is missing. Works from any
# directory, offline; build output goes to bindings/go/.build (git-ignored).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"

if ! command -v go >/dev/null 2>&1; then
    echo "test.sh: SKIP: the Go toolchain (go) is not installed (Debian: apt-get install golang-go)" >&2
    exit 77
fi

lib_dir="${LLMKV_LIB_DIR:-$repo/build}"
inc_dir="${LLMKV_INCLUDE_DIR:-$repo/include}"
lib_dir="$(cd "$lib_dir" 2>/dev/null && pwd)" || { echo "test.sh: LLMKV_LIB_DIR=${LLMKV_LIB_DIR:-$repo/build} is not a directory" >&2; exit 1; }
inc_dir="$(cd "$inc_dir" 2>/dev/null && pwd)" || { echo "test.sh: LLMKV_INCLUDE_DIR=${LLMKV_INCLUDE_DIR:-$repo/include} is not a directory" >&2; exit 1; }
[ -e "$lib_dir/libllmkv.so" ] || { echo "test.sh: no libllmkv.so in $lib_dir (set LLMKV_LIB_DIR)" >&2; exit 1; }
[ -e "$inc_dir/llmkv.h" ] || { echo "test.sh: no llmkv.h in $inc_dir (set LLMKV_INCLUDE_DIR)" >&2; exit 1; }
if [ -n "${LLMKV_MODEL:-}" ]; then
    LLMKV_MODEL="$(cd "$(dirname "$LLMKV_MODEL")" 2>/dev/null && pwd)/$(basename "$LLMKV_MODEL")" || true
fi

build="$here/.build"
mkdir -p "$build"
export LLMKV_LIB_DIR="$lib_dir" LLMKV_INCLUDE_DIR="$inc_dir" LLMKV_MODEL="${LLMKV_MODEL:-}"
export GOCACHE="$build/gocache" GOPATH="$build/gopath" GOMODCACHE="$build/gopath/pkg/mod"
export GOPROXY=off GOSUMDB=off GOFLAGS=-mod=mod GOTOOLCHAIN=local GO111MODULE=on GOWORK=off
export CGO_ENABLED=1
export CGO_CFLAGS="-I$inc_dir ${CGO_CFLAGS_EXTRA:-}"
export CGO_LDFLAGS="-L$lib_dir -Wl,-rpath,$lib_dir"
export LD_LIBRARY_PATH="$lib_dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

cd "$here"
echo "== llmkv Go binding: $(go version); library $lib_dir; header $inc_dir; model ${LLMKV_MODEL:-(none)}"
if [ -z "$LLMKV_MODEL" ] || [ ! -f "$LLMKV_MODEL" ]; then
    echo "== NOTE: LLMKV_MODEL is unset or missing: the model tests will SKIP and the example will not run"
fi

status=0
summary() { # log file, label
    local p s f
    p=$(grep -c -- '^\s*--- PASS' "$1" || true)
    s=$(grep -c -- '^\s*--- SKIP' "$1" || true)
    f=$(grep -c -- '^\s*--- FAIL' "$1" || true)
    echo "== $2: $p passed, $s skipped, $f failed"
    # the reasons the skipped tests printed (the log line just before each --- SKIP)
    grep -B1 -- '^\s*--- SKIP' "$1" | grep -v -e '--- SKIP' -e '^--$' -e '^=== ' | sed 's/^ *[a-z_]*_test.go:[0-9]*: //' | sort | uniq -c | sed 's/^/   skipped: /' || true
}

echo "== ABI check (bindings/abi/gen_layout.py vs package raw)"
if go test -count=1 -v -run 'TestABI' ./raw > "$build/abi.log" 2>&1; then
    summary "$build/abi.log" "ABI"
else
    cat "$build/abi.log"; echo "== ABI check FAILED"; status=1
fi

echo "== go vet ./..."
go vet ./... || { echo "== go vet FAILED"; status=1; }

echo "== go test ./..."
if go test -count=1 -v ./... > "$build/test.log" 2>&1; then
    summary "$build/test.log" "go test"
else
    grep -v '^=== ' "$build/test.log" | tail -n 200; summary "$build/test.log" "go test"; echo "== go test FAILED"; status=1
fi

echo "== go test -race ./..."
if go test -race -count=1 -v ./... > "$build/race.log" 2>&1; then
    summary "$build/race.log" "go test -race"
else
    grep -v '^=== ' "$build/race.log" | tail -n 200; summary "$build/race.log" "go test -race"; echo "== go test -race FAILED"; status=1
fi

echo "== example two_sessions"
go build -o "$build/two_sessions" ./examples/two_sessions || { echo "== example build FAILED"; status=1; }
if [ -n "$LLMKV_MODEL" ] && [ -f "$LLMKV_MODEL" ] && [ -x "$build/two_sessions" ]; then
    if "$build/two_sessions" "$LLMKV_MODEL" > "$build/example.out" 2>&1; then
        head -n 12 "$build/example.out" | sed 's/^/   /'
        for i in 1 2; do
            if ! grep -qE "^\[$i\] \".+\"\$" "$build/example.out"; then
                echo "== example: no text from session $i"; status=1
            fi
            if ! grep -qE "^session $i done" "$build/example.out"; then
                echo "== example: session $i did not finish"; status=1
            fi
        done
        [ $status -eq 0 ] && echo "== example: both sessions streamed text"
    else
        cat "$build/example.out"; echo "== example FAILED"; status=1
    fi
else
    echo "== example: SKIP (needs LLMKV_MODEL)"
fi

if [ $status -eq 0 ]; then echo "== ALL PASSED"; else echo "== FAILED"; fi
exit $status
