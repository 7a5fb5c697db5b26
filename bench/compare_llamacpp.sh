#!/usr/bin/env bash
# Same-run comparison of llmkv with a llama.cpp build on this machine: prefill 128/512 tokens
# and decode (short, at 2,048 and 8,000 tokens of context) per model file, and aggregate
# decode with 1/8/32 sessions. Runs alternate between the two engines, ROUNDS rounds; the
# median of the rounds is printed per workload. Nothing here builds llama.cpp: point
# LLAMA_BIN at a directory holding llama-bench and llama-batched-bench from a build you made.
#
#   LLAMA_BIN=/path/to/llama.cpp/build/bin bench/compare_llamacpp.sh MODEL.gguf [MODEL2.gguf ...]
#
# Environment: LLMKV (default build/tools/llmkv/llmkv), THREADS (2), ROUNDS (3),
# CONTEXTS ("2048 8000": SmolLM2 holds 8,192 tokens), FA (llama.cpp flash attention for the
# long-context runs, default 1: without it an 8,000-token prompt takes minutes), BATCHES ("1 8 32"), OUT (a directory for the raw outputs;
# default a new temporary one). The machine should be quiet: other processes skew both.
set -euo pipefail

LLMKV=${LLMKV:-build/tools/llmkv/llmkv}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
CONTEXTS=${CONTEXTS:-"2048 8000"}
FA=${FA:-1}
BATCHES=${BATCHES:-"1 8 32"}
OUT=${OUT:-$(mktemp -d)}
[[ -n "${LLAMA_BIN:-}" && -x "$LLAMA_BIN/llama-bench" && -x "$LLAMA_BIN/llama-batched-bench" ]] || {
    echo "set LLAMA_BIN to a directory with llama-bench and llama-batched-bench" >&2; exit 2; }
[[ -x "$LLMKV" ]] || { echo "no llmkv CLI at $LLMKV (build it first)" >&2; exit 2; }
(( $# >= 1 )) || { echo "usage: LLAMA_BIN=DIR $0 MODEL.gguf [MODEL.gguf ...]" >&2; exit 2; }
mkdir -p "$OUT"
# Newer llama.cpp builds take a value after -fa (on|off|auto); older ones take the bare flag.
fa_arg=()
if [[ $FA == 1 ]]; then
    help=$("$LLAMA_BIN/llama-batched-bench" --help 2>&1 || true)
    if [[ $help == *"--flash-attn [on"* ]]; then fa_arg=(-fa on); else fa_arg=(-fa); fi
fi

median() { sort -g | awk '{v[NR]=$1} END {if (NR == 0) print "-"; else if (NR % 2) print v[(NR+1)/2]; else printf "%.1f\n", (v[NR/2]+v[NR/2+1])/2}'; }
# llmkv bench's table row "| threads | prefill | decode short | decode at context | ..."
llmkv_row() { grep -E "^\| $THREADS \|" | head -1; }
col() { awk -F'|' -v c="$1" '{gsub(/ /, "", $c); print $c}'; }

{
echo "machine: $(grep -m1 'model name' /proc/cpuinfo | cut -d: -f2- | xargs), $(nproc) cpus; threads $THREADS; rounds $ROUNDS"
echo "llmkv: $($LLMKV --version 2>/dev/null | head -1) ($(git rev-parse --short HEAD 2>/dev/null || echo '?'))"
echo "llama.cpp: $LLAMA_BIN, build $("$LLAMA_BIN/llama-bench" -m "$1" -p 1 -n 0 -r 1 -o csv 2>/dev/null | tail -1 | cut -d, -f1,2 | tr -d '"')"
} | tee "$OUT/header.txt"

for model in "$@"; do
    name=$(basename "$model")
    declare -A R=()
    for ((round = 1; round <= ROUNDS; ++round)); do
        for p in 128 512; do
            # llmkv: prefill p tokens (and decode 32 at short context)
            "$LLMKV" bench -m "$model" -t "$THREADS" --prompt-tokens "$p" --gen-tokens 32 \
                --context "$((p + 32))" --reps 1 > "$OUT/llmkv-$name-p$p-r$round.txt" 2>&1
            R[llmkv_pp$p]+="$(llmkv_row < "$OUT/llmkv-$name-p$p-r$round.txt" | col 3) "
            [[ $p == 128 ]] && R[llmkv_tg]+="$(llmkv_row < "$OUT/llmkv-$name-p$p-r$round.txt" | col 4) "
            "$LLAMA_BIN/llama-bench" -m "$model" -t "$THREADS" -p "$p" -n 0 -r 1 -o csv \
                > "$OUT/llama-$name-p$p-r$round.csv" 2>/dev/null
            R[llama_pp$p]+="$(tail -1 "$OUT/llama-$name-p$p-r$round.csv" | awk -F'","' '{print $(NF-1)}') "
        done
        "$LLAMA_BIN/llama-bench" -m "$model" -t "$THREADS" -p 0 -n 32 -r 1 -o csv \
            > "$OUT/llama-$name-tg-r$round.csv" 2>/dev/null
        R[llama_tg]+="$(tail -1 "$OUT/llama-$name-tg-r$round.csv" | awk -F'","' '{print $(NF-1)}') "
        for c in $CONTEXTS; do
            "$LLMKV" bench -m "$model" -t "$THREADS" --prompt-tokens 128 --gen-tokens 32 --context "$c" \
                --reps 1 > "$OUT/llmkv-$name-c$c-r$round.txt" 2>&1
            R[llmkv_c$c]+="$(llmkv_row < "$OUT/llmkv-$name-c$c-r$round.txt" | col 5) "
            "$LLAMA_BIN/llama-batched-bench" -m "$model" -t "$THREADS" -c "$((c + 64))" -npp "$c" \
                -ntg 32 -npl 1 "${fa_arg[@]}" > "$OUT/llama-$name-c$c-r$round.txt" 2>&1
            # | PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s |
            R[llama_c$c]+="$(grep -E '^\|\s+[0-9]' "$OUT/llama-$name-c$c-r$round.txt" | tail -1 | col 9) "
        done
    done
    echo
    echo "== $name (median of $ROUNDS)"
    printf '| workload | llama.cpp tok/s | llmkv tok/s | llmkv / llama.cpp |\n|---|---|---|---|\n'
    row() {
        local a b
        a=$(tr ' ' '\n' <<< "${R[$2]}" | grep -v '^$' | median)
        b=$(tr ' ' '\n' <<< "${R[$3]}" | grep -v '^$' | median)
        printf '| %s | %s | %s | %s |\n' "$1" "$a" "$b" "$(awk -v a="$a" -v b="$b" 'BEGIN {if (a > 0) printf "%.2fx", b / a; else print "-"}')"
    }
    row "prefill 128" llama_pp128 llmkv_pp128
    row "prefill 512" llama_pp512 llmkv_pp512
    row "decode, short context" llama_tg llmkv_tg
    for c in $CONTEXTS; do row "decode at $c context (f16 KV; llama.cpp -fa $FA)" "llama_c$c" "llmkv_c$c"; done
    unset R
done | tee "$OUT/summary.md"

# Aggregate decode with several sessions (first model only): 128-token prompts, 64 new each.
model=$1
npl=$(tr ' ' ',' <<< "$BATCHES")
max_b=$(tr ' ' '\n' <<< "$BATCHES" | sort -n | tail -1)
"$LLAMA_BIN/llama-batched-bench" -m "$model" -t "$THREADS" -c "$((max_b * 192))" -npp 128 -ntg 64 \
    -npl "$npl" > "$OUT/llama-batched.txt" 2>&1 || true
"$LLMKV" bench batch -m "$model" -t "$THREADS" > "$OUT/llmkv-batch.txt" 2>&1 || true
{
    echo
    echo "== aggregate decode, $(basename "$model") (one round; raw outputs in $OUT)"
    echo "llama.cpp (llama-batched-bench -npp 128 -ntg 64, S_TG t/s per batch):"
    grep -E '^\|\s+[0-9]' "$OUT/llama-batched.txt" | awk -F'|' '{gsub(/ /,""); print "  batch " $4 ": " $9}'
    echo "llmkv (llmkv bench batch):"
    echo "  | sessions | aggregate tok/s | per session | vs 1 |"
    grep -E '^\| [0-9]+ \|' "$OUT/llmkv-batch.txt" | head -4 | sed 's/^/  /'
} | tee -a "$OUT/summary.md"
echo "raw outputs: $OUT"
