#!/usr/bin/env bash
# A system prompt computed and saved by one `llmkv run` process, then loaded from the
# snapshot by a second process, gives byte-identical output (greedy and seeded sampling).
# Needs the real model: exits 77 (skipped) with a reason when it is absent.
set -euo pipefail
LLMKV="$1"
MODEL="${LLMKV_MODEL:-$2}"
if [[ ! -f "$MODEL" ]]; then
    echo "SKIP: model not found at $MODEL (set LLMKV_MODEL or run scripts/fetch_model.sh)"
    exit 77
fi
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
SYSTEM="You are Mira, the innkeeper of Oakvale. You answer briefly and warmly."
for args in "" "--temp 0.8 --seed 7"; do
    rm -f "$DIR/sys.snap"
    # shellcheck disable=SC2086
    "$LLMKV" run -m "$MODEL" -t 2 --chat --system "$SYSTEM" --prefix-file "$DIR/sys.snap" -p "Who are you?" -n 24 $args \
        > "$DIR/first.txt" 2> "$DIR/first.err"
    grep -q "computed" "$DIR/first.err" || { echo "first run did not compute the prefix"; cat "$DIR/first.err"; exit 1; }
    # shellcheck disable=SC2086
    "$LLMKV" run -m "$MODEL" -t 2 --chat --system "$SYSTEM" --prefix-file "$DIR/sys.snap" -p "Who are you?" -n 24 $args \
        > "$DIR/second.txt" 2> "$DIR/second.err"
    grep -q "loaded from" "$DIR/second.err" || { echo "second run did not load the snapshot"; cat "$DIR/second.err"; exit 1; }
    # And a run without any prefix gives the same text too.
    # shellcheck disable=SC2086
    "$LLMKV" run -m "$MODEL" -t 2 --chat --system "$SYSTEM" -p "Who are you?" -n 24 $args > "$DIR/plain.txt" 2>/dev/null
    cmp "$DIR/first.txt" "$DIR/second.txt" || { echo "loaded prefix changed the output ($args)"; exit 1; }
    cmp "$DIR/first.txt" "$DIR/plain.txt" || { echo "prefix run differs from a plain run ($args)"; exit 1; }
    # A corrupted snapshot is detected and recomputed, with the same output.
    printf '\xff' | dd of="$DIR/sys.snap" bs=1 seek=5000 conv=notrunc status=none
    # shellcheck disable=SC2086
    "$LLMKV" run -m "$MODEL" -t 2 --chat --system "$SYSTEM" --prefix-file "$DIR/sys.snap" -p "Who are you?" -n 24 $args \
        > "$DIR/third.txt" 2> "$DIR/third.err"
    grep -q "LLMKV_ERR_SNAPSHOT_FORMAT" "$DIR/third.err" || { echo "corruption not reported"; cat "$DIR/third.err"; exit 1; }
    cmp "$DIR/first.txt" "$DIR/third.txt"
done
echo "prefix-file snapshots: identical output across processes"

# A snapshot written by another kernel variant (the portable kernels, as on a player's machine
# without AVX2): refused by default (the bytes would not be what this machine computes), loaded
# with --any-kernel (LLMKV_PREFIX_LOAD_ANY_KERNEL), which still checks everything else.
rm -f "$DIR/port.snap"
LLMKV_CPU_FEATURES=portable "$LLMKV" run -m "$MODEL" -t 2 --chat --system "$SYSTEM" --prefix-file "$DIR/port.snap" \
    -p "Who are you?" -n 8 > /dev/null 2> "$DIR/port.err"
grep -q "computed" "$DIR/port.err" || { echo "portable run did not compute the prefix"; cat "$DIR/port.err"; exit 1; }
cp "$DIR/port.snap" "$DIR/port.keep"
"$LLMKV" run -m "$MODEL" -t 2 --chat --system "$SYSTEM" --prefix-file "$DIR/port.snap" -p "Who are you?" -n 8 \
    > /dev/null 2> "$DIR/strict.err"
if grep -q "loaded from" "$DIR/strict.err"; then
    echo "this machine's own kernels are the portable ones: the cross-variant case is not exercised here"
else
    grep -q "LLMKV_ERR_SNAPSHOT_FORMAT" "$DIR/strict.err" && grep -q "codec differs" "$DIR/strict.err" \
        || { echo "another variant's snapshot was not refused"; cat "$DIR/strict.err"; exit 1; }
    cp "$DIR/port.keep" "$DIR/port.snap"  # the refused run recomputed and saved its own
    "$LLMKV" run -m "$MODEL" -t 2 --chat --system "$SYSTEM" --prefix-file "$DIR/port.snap" --any-kernel \
        -p "Who are you?" -n 8 > "$DIR/any.txt" 2> "$DIR/any.err"
    grep -q "loaded from" "$DIR/any.err" || { echo "--any-kernel did not load it"; cat "$DIR/any.err"; exit 1; }
    [[ -s "$DIR/any.txt" ]] || { echo "no text from the cross-variant prefix"; exit 1; }
    # Everything but the kernel variant is still checked: a corrupted file is refused.
    printf '\xff' | dd of="$DIR/port.snap" bs=1 seek=5000 conv=notrunc status=none
    "$LLMKV" run -m "$MODEL" -t 2 --chat --system "$SYSTEM" --prefix-file "$DIR/port.snap" --any-kernel \
        -p "Who are you?" -n 8 > /dev/null 2> "$DIR/anybad.err"
    grep -q "LLMKV_ERR_SNAPSHOT_FORMAT" "$DIR/anybad.err" || { echo "corruption not reported"; cat "$DIR/anybad.err"; exit 1; }
    echo "prefix-file snapshots: another kernel variant's file refused by default, loaded with --any-kernel"
fi
