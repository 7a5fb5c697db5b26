#!/usr/bin/env bash
# CI entry point of the Rust binding: builds llmkv-sys and llmkv, checks the -sys crate's
# ABI against include/llmkv.h, runs every test (cargo test --offline) and the two_sessions
# example over the real model.
#
#   LLMKV_LIB_DIR=<dir with libllmkv.so> LLMKV_INCLUDE_DIR=<repo>/include \
#   LLMKV_MODEL=<model.gguf> bindings/rust/test.sh
#
# Defaults: LLMKV_LIB_DIR=<repo>/build, LLMKV_INCLUDE_DIR=<repo>/include. Without
# LLMKV_MODEL the model-backed tests skip (each prints why) and the example is not run.
# Exit status: 0 all passed; 1 a failure; 77 cargo is missing (nothing was run).
# Build output goes to bindings/rust/target only; no network is used.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
cd "$here"

if ! command -v cargo >/dev/null 2>&1; then
    echo "SKIP bindings/rust: cargo is not installed (install a Rust toolchain to run these tests)"
    exit 77
fi

export LLMKV_LIB_DIR="${LLMKV_LIB_DIR:-$repo/build}"
export LLMKV_INCLUDE_DIR="${LLMKV_INCLUDE_DIR:-$repo/include}"
export CARGO_TARGET_DIR="$here/target"
export CARGO_BUILD_JOBS="${CARGO_BUILD_JOBS:-2}"
export CARGO_NET_OFFLINE=true

fail() { echo "FAIL bindings/rust: $*" >&2; exit 1; }

[ -e "$LLMKV_LIB_DIR/libllmkv.so" ] || fail "no libllmkv.so in LLMKV_LIB_DIR=$LLMKV_LIB_DIR"
[ -f "$LLMKV_INCLUDE_DIR/llmkv.h" ] || fail "no llmkv.h in LLMKV_INCLUDE_DIR=$LLMKV_INCLUDE_DIR"
# Make LLMKV_LIB_DIR and LLMKV_INCLUDE_DIR absolute (the tests run in other directories).
LLMKV_LIB_DIR="$(cd "$LLMKV_LIB_DIR" && pwd)"
LLMKV_INCLUDE_DIR="$(cd "$LLMKV_INCLUDE_DIR" && pwd)"
echo "== bindings/rust: lib $LLMKV_LIB_DIR, header $LLMKV_INCLUDE_DIR, $(cargo --version)"

# ---- ABI: what the C compiler sees in llmkv.h, for tests/abi.rs of llmkv-sys ----
abi_dir="$CARGO_TARGET_DIR/abi"
mkdir -p "$abi_dir"
command -v python3 >/dev/null || fail "python3 is needed for the ABI check (bindings/abi/gen_layout.py)"
python3 "$repo/bindings/abi/gen_layout.py" "$LLMKV_INCLUDE_DIR/llmkv.h" > "$abi_dir/layout.c" \
    || fail "gen_layout.py failed"
"${CC:-cc}" -std=c11 -I "$LLMKV_INCLUDE_DIR" "$abi_dir/layout.c" -o "$abi_dir/layout" \
    || fail "compiling the layout program failed"
"$abi_dir/layout" > "$abi_dir/layout.txt" || fail "the layout program failed"
export LLMKV_ABI_LAYOUT="$abi_dir/layout.txt"
echo "== ABI layout: $(grep -c '^struct' "$LLMKV_ABI_LAYOUT") structs, $(grep -c '^const' "$LLMKV_ABI_LAYOUT") constants, $(grep -c '^func' "$LLMKV_ABI_LAYOUT") functions"

model_ok=0
if [ -n "${LLMKV_MODEL:-}" ] && [ -f "$LLMKV_MODEL" ]; then
    LLMKV_MODEL="$(cd "$(dirname "$LLMKV_MODEL")" && pwd)/$(basename "$LLMKV_MODEL")"
    export LLMKV_MODEL
    model_ok=1
else
    echo "NOTE: LLMKV_MODEL is unset or missing ('${LLMKV_MODEL:-}'): model-backed tests will SKIP and the example will not run"
fi

# ---- Build and test ----
echo "== cargo build"
cargo build --offline --workspace --all-targets || fail "cargo build"
echo "== cargo test"
log="$CARGO_TARGET_DIR/test.log"
# Without a model, show the tests' output so that every SKIP line and its reason is seen.
show=()
[ "$model_ok" -eq 1 ] || show=(-- --show-output)
set +e
cargo test --offline --workspace "${show[@]}" 2>&1 | tee "$log"
rc=${PIPESTATUS[0]}
set -e
[ "$rc" -eq 0 ] || fail "cargo test (exit $rc)"
awk '/^test result:/ { p += $4; f += $6; i += $8 } END { printf "== tests: %d passed, %d failed, %d ignored\n", p, f, i }' "$log"

# ---- The example: two sessions streamed over the real model ----
if [ "$model_ok" -eq 1 ]; then
    echo "== example two_sessions"
    out="$CARGO_TARGET_DIR/two_sessions.out"
    cargo run --offline -p llmkv --example two_sessions > "$out" || { cat "$out"; fail "the example failed"; }
    cat "$out"
    for i in 1 2; do
        grep -q "^\[$i\] \"" "$out" || fail "the example streamed no chunk of session $i"
        grep -Eq "^session $i \([0-9]+ tokens, [A-Za-z]+\): .*[^[:space:]]" "$out" \
            || fail "the example printed no text for session $i"
    done
    echo "== example: both sessions streamed text"
fi
echo "PASS bindings/rust"
