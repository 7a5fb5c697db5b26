#!/usr/bin/env bash
# examples/npc.cpp end to end on the real model: eight NPCs answer under a JSON Schema in one
# batch and every reply parses (the example exits 1 otherwise); then one answers under a GBNF
# yes/no grammar set for its second turn.
# Needs the real model: exits 77 (skipped) with a reason when it is absent.
set -euo pipefail
EXAMPLE="$1"
MODEL="${LLMKV_MODEL:-$2}"
if [[ ! -f "$MODEL" ]]; then
    echo "SKIP: model not found at $MODEL (set LLMKV_MODEL or run scripts/fetch_model.sh)"
    exit 77
fi
OUT="$("$EXAMPLE" "$MODEL")"
echo "$OUT"
grep -q -- '-- 8 of 8 replies parsed as JSON' <<<"$OUT" || { echo "not every reply parsed"; exit 1; }
grep -q -- '-- yes/no answer: ok' <<<"$OUT" || { echo "the yes/no turn is malformed"; exit 1; }
echo "ok"
