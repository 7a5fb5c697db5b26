#!/usr/bin/env bash
# The binary has no link-time dependency on libllmkv: no NEEDED entry naming it and no
# undefined llmkv_* symbol (llmkv_load / llmkv_unload are the loader's own, defined inside).
#   check_no_link.sh BINARY
# Exits 1 naming what it found; 77 (skipped) without readelf.
set -euo pipefail
BIN="$1"
if ! command -v readelf >/dev/null; then
    echo "SKIP: readelf not found (binutils)"
    exit 77
fi
needed=$(readelf -d --wide "$BIN" | sed -n 's/.*(NEEDED).*\[\(.*\)\].*/\1/p')
echo "NEEDED by $(basename "$BIN"): $(echo $needed)"
undef=$(readelf -s --wide --dyn-syms "$BIN" | awk '$7 == "UND" && $8 ~ /^llmkv_/ {print $8}' | sort -u)
status=0
if grep -q 'llmkv' <<<"$needed"; then
    echo "FAIL: $(basename "$BIN") needs $(grep llmkv <<<"$needed" | tr '\n' ' ')at load time"
    status=1
fi
if [[ -n "$undef" ]]; then
    echo "FAIL: $(basename "$BIN") references undefined symbols: $(echo $undef)"
    status=1
fi
[[ $status -eq 0 ]] && echo "ok: no link-time dependency on libllmkv"
exit $status
