#!/usr/bin/env bash
# examples/game_loop.c on the real model: the three ways to drive llmkv from a 60 fps frame
# loop (llmkv_step per frame, the worker thread, the worker thread yielding its cores) each
# give every NPC its replies without an error; the frame-time table is printed (timings are
# recorded in docs/PERFORMANCE.md, never asserted). Exits 77 (skipped) without the model.
set -euo pipefail
EXAMPLE="$1"
MODEL="${LLMKV_MODEL:-$2}"
if [[ ! -f "$MODEL" ]]; then
    echo "SKIP: model not found at $MODEL (set LLMKV_MODEL or run scripts/fetch_model.sh)"
    exit 77
fi
OUT="$(mktemp)"
trap 'rm -f "$OUT"' EXIT
# LLMKV_TEST_LAUNCHER runs the program through another (wine, for the Windows build).
${LLMKV_TEST_LAUNCHER:-} "$EXAMPLE" "$MODEL" --seconds "${GAME_LOOP_SECONDS:-5}" --max-seconds 90 --npcs 8 | tr -d '\r' | tee "$OUT"  # (Windows text output ends lines with CR LF)
for mode in step worker worker+; do
    line="$(grep -E "^${mode//+/\\+} +[0-9]" "$OUT")" || { echo "no result line for mode $mode"; exit 1; }
    read -r _ frames _ _ _ _ _ _ _ replies <<<"$line"
    (( frames > 0 )) || { echo "mode $mode ran no frame"; exit 1; }
    (( replies >= 8 )) || { echo "mode $mode finished only $replies replies"; exit 1; }
done
echo "game loop: every mode served all NPCs"
