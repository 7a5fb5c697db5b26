#!/usr/bin/env bash
# The ABI checker catches breaks (packaging/abi/check_abi.py): each mutation of a copy of
# include/llmkv.h below must make it fail, and a purely additive change (a field appended to a
# struct, with the functions taking it raised to the current version, and a new function
# with its symbols.txt line) must pass.
# Usage: abi_break_test.sh SOURCE_DIR PROJECT_VERSION
set -euo pipefail
SRC="$1"; VERSION="$2"
CHECK=(python3 "$SRC/packaging/abi/check_abi.py" --version "$VERSION")
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
fail=0
expect() {  # expect pass|fail NAME SED_SCRIPT [SYMBOLS_FILE]
    local want="$1" name="$2" script="$3" syms="${4:-$SRC/packaging/abi/symbols.txt}"
    mkdir -p "$TMP/$name"
    sed -e "$script" "$SRC/include/llmkv.h" > "$TMP/$name/llmkv.h"
    if cmp -s "$SRC/include/llmkv.h" "$TMP/$name/llmkv.h"; then
        echo "FIXTURE BROKEN: $name did not change the header"; fail=1; return
    fi
    if "${CHECK[@]}" --header "$TMP/$name/llmkv.h" --symbols "$syms" >"$TMP/$name/out" 2>&1; then got=pass; else got=fail; fi
    if [[ $got == "$want" ]]; then
        echo "ok   $name: $want ($(grep -m1 '^ABI: ' "$TMP/$name/out" || tail -1 "$TMP/$name/out"))"
    else
        echo "FAIL $name: expected $want, got $got"; cat "$TMP/$name/out"; fail=1
    fi
}
# Breaks.
expect fail swapped_fields 's/^\(    uint32_t n_devices;\)$/    uint32_t n_threads_x;/; s/^    uint32_t n_threads; .*$/    uint32_t n_devices;/; s/n_threads_x/n_threads/'
expect fail widened_field  's/^    uint32_t n_devices;$/    uint64_t n_devices;/'
expect fail inserted_field 's/^    uint32_t n_devices;$/    uint32_t inserted;\n    uint32_t n_devices;/'
expect fail changed_value  's/LLMKV_SESSION_FINISHED = 5/LLMKV_SESSION_FINISHED = 6/'
expect fail removed_func   '/^LLMKV_API llmkv_status llmkv_worker_stop(llmkv_engine \*e);$/d'
expect fail removed_const  '/^#define LLMKV_ENGINE_KEEP_WINDOW_BLOCKS 0x2u$/d'
# A struct grew but the function taking it keeps an old minimum version in symbols.txt (set
# to 0.1.0 here, whatever the committed file says: the current release may already have raised it).
sed -e "s/^\(llmkv_engine_get_stats *\)[0-9.]*/\10.1.0/" "$SRC/packaging/abi/symbols.txt" > "$TMP/symbols_old.txt"
expect fail grown_struct_old_version 's/^} llmkv_stats;$/    uint64_t appended_counter;\n} llmkv_stats;/' \
    "$TMP/symbols_old.txt"
# A new function without a symbols.txt line.
expect fail new_func_no_symbol 's/^LLMKV_API llmkv_status llmkv_worker_stop(llmkv_engine \*e);$/&\nLLMKV_API int llmkv_brand_new(void);/'
# Additions done right pass.
MINOR="$(echo "$VERSION" | cut -d. -f1-2).0"
sed -e "s/^\(llmkv_engine_get_stats *\)[0-9.]*/\1$MINOR/" "$SRC/packaging/abi/symbols.txt" > "$TMP/symbols_ok.txt"
echo "llmkv_brand_new $MINOR" >> "$TMP/symbols_ok.txt"
expect pass appended_field_and_new_func \
    's/^} llmkv_stats;$/    uint64_t appended_counter;\n} llmkv_stats;/; s/^LLMKV_API llmkv_status llmkv_worker_stop(llmkv_engine \*e);$/&\nLLMKV_API int llmkv_brand_new(void);/' \
    "$TMP/symbols_ok.txt"
exit $fail
