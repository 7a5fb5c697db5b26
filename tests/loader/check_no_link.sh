#!/usr/bin/env bash
# The binary has no link-time dependency on libllmkv: no NEEDED entry naming it and no
# undefined llmkv_* symbol (llmkv_load / llmkv_unload are the loader's own, defined inside).
# With --plugin (a shared library that compiles the loader in), it must not export
# llmkv_load / llmkv_unload either (hidden, so plugins never bind to each other's copy).
#   check_no_link.sh [--plugin] BINARY
# Exits 1 naming what it found; 77 (skipped) without readelf.
set -euo pipefail
PLUGIN=0
if [[ "$1" == "--plugin" ]]; then PLUGIN=1; shift; fi
BIN="$1"
NAME="$(basename "$BIN")"
if ! command -v readelf >/dev/null; then
    echo "SKIP: readelf not found (binutils)"
    exit 77
fi
needed=$(readelf -d --wide "$BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
echo "NEEDED by $NAME: $(echo $needed)"
dynsyms=$(readelf --dyn-syms --wide "$BIN")
undef=$(awk '$7 == "UND" && $8 ~ /^llmkv_/ {print $8}' <<<"$dynsyms" | sort -u)
status=0
if grep -q 'llmkv' <<<"$needed"; then
    echo "FAIL: $NAME needs $(grep llmkv <<<"$needed" | tr '\n' ' ')at load time"
    status=1
fi
if [[ -n "$undef" ]]; then
    echo "FAIL: $NAME references undefined symbols: $(echo $undef)"
    status=1
fi
if [[ $PLUGIN == 1 ]]; then
    exported=$(awk '$7 != "UND" && ($8 == "llmkv_load" || $8 == "llmkv_unload") {print $8}' <<<"$dynsyms")
    if [[ -n "$exported" ]]; then
        echo "FAIL: $NAME exports $(echo $exported)"
        status=1
    fi
    grep -q ' plugin_llmkv_version$' <<<"$dynsyms" || { echo "FAIL: $NAME lacks its own export"; status=1; }
fi
[[ $status -eq 0 ]] && echo "ok: no link-time dependency on libllmkv$([[ $PLUGIN == 1 ]] && echo ', loader not exported')"
exit $status
