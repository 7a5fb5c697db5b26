#!/usr/bin/env bash
# examples/serve.c end to end on the real model: twelve conversations in an 8 MiB int8 pool
# with a host tier finish both turns, parking and resuming every one of them.
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
answers=$(grep -c '^\[[a-z]*\] ' <<<"$OUT" || true)
[[ "$answers" -ge 24 ]] || { echo "expected 24 answers (12 users x 2 turns), got $answers"; exit 1; }
grep -Eq -- '-- .* ([0-9]+) parks, .* ([0-9]+) resumes' <<<"$OUT" || { echo "no stats line"; exit 1; }
parks=$(sed -nE 's/.* ([0-9]+) parks.*/\1/p' <<<"$OUT")
resumes=$(sed -nE 's/.* ([0-9]+) resumes.*/\1/p' <<<"$OUT")
[[ "$parks" -ge 12 && "$resumes" -ge 12 ]] || { echo "expected every conversation parked and resumed ($parks parks, $resumes resumes)"; exit 1; }
echo "ok: $answers answers, $parks parks, $resumes resumes"
