#!/usr/bin/env bash
# Soak: 64 sessions of random traffic (tools/soak/soak.c) for MINUTES, sampled to a CSV, then
# a summary (throughput over time, RSS first/last/max, validate failures) and, when gnuplot
# is installed, a plot. Fails when a validation failed, a call failed unexpectedly, or RSS
# grew beyond the tolerance after warm-up.
#
# Usage: scripts/soak.sh [MINUTES (10)] [OUTDIR (build/soak)]
#   LLMKV_MODEL=path.gguf   the model (SmolLM2 in the docs); without it, the tests' tiny
#                           random-weight model (written by llmkv_write_tiny_model)
#   SOAK_INTERVAL=S         seconds between samples (default: MINUTES*60/60, 2..10)
#   SOAK_THREADS=T          engine threads (0 = all cores)
#   SOAK_RSS_TOLERANCE_MIB  allowed RSS growth after warm-up (default 32)
#   BUILD_DIR=dir           an existing build (default build); built here when it lacks the soak
# CI (short, tiny model, no plot needed):   scripts/soak.sh 0.5
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
MINUTES="${1:-10}"
OUT="${2:-$ROOT/build/soak}"
BUILD="${BUILD_DIR:-$ROOT/build}"
mkdir -p "$OUT"

if [[ ! -x "$BUILD/tools/soak/llmkv_soak" || ! -x "$BUILD/tools/soak/llmkv_write_tiny_model" ]]; then
    GEN=()
    command -v ninja >/dev/null && GEN=(-G Ninja)
    [[ -f "$BUILD/CMakeCache.txt" ]] || cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release >&2
    cmake --build "$BUILD" -j "$(nproc)" --target llmkv_soak llmkv_write_tiny_model >&2
fi

MODEL="${LLMKV_MODEL:-}"
if [[ -z "$MODEL" ]]; then
    MODEL="$OUT/tiny.gguf"
    "$BUILD/tools/soak/llmkv_write_tiny_model" "$MODEL" 2048
    echo "soak: LLMKV_MODEL is not set: using the tiny random-weight test model" >&2
fi

INTERVAL="${SOAK_INTERVAL:-$(awk -v m="$MINUTES" 'BEGIN { s = m * 60 / 60; if (s < 2) s = 2; if (s > 10) s = 10; print s }')}"
CSV="$OUT/soak.csv"
SUMMARY="$OUT/summary.txt"
{
    echo "# llmkv soak: $(date -u +%Y-%m-%dT%H:%M:%SZ), $(uname -srm), $(nproc) CPUs,"\
         "$(awk '/model name/ { $1 = $2 = $3 = ""; print; exit }' /proc/cpuinfo | sed 's/^ *//')"
    echo "# model: $MODEL; minutes: $MINUTES; interval: $INTERVAL s"
} > "$SUMMARY"
set +e
"$BUILD/tools/soak/llmkv_soak" -m "$MODEL" --minutes "$MINUTES" --interval "$INTERVAL" --csv "$CSV" \
    --threads "${SOAK_THREADS:-0}" --rss-tolerance-mib "${SOAK_RSS_TOLERANCE_MIB:-32}" 2> "$OUT/soak.log" \
    | tee -a "$SUMMARY"
RC=${PIPESTATUS[0]}
set -e

if command -v gnuplot >/dev/null; then
    gnuplot <<EOF || echo "soak: gnuplot failed; no plot" >&2
set terminal pngcairo size 1100,650 noenhanced font ",10"
set output "$OUT/soak.png"
set datafile separator ","
set key top left
set multiplot layout 2,1 title "llmkv soak: 64 sessions, $(basename "$MODEL"), $MINUTES min"
set xlabel "time (s)"
set ylabel "generated tokens/s"
set y2label "live sessions"
set y2tics
set ytics nomirror
set yrange [0:*]
set y2range [0:*]
plot "$CSV" every ::1 using 1:2 with linespoints pt 7 ps 0.4 title "tokens/s", \
     "$CSV" every ::1 using 1:4 axes x1y2 with steps title "live sessions"
set ylabel "RSS (MiB)"
set yrange [0:*]
set y2label "preemptions / resumes"
plot "$CSV" every ::1 using 1:3 with lines lw 2 title "RSS (MiB)", \
     "$CSV" every ::1 using 1:10 axes x1y2 with lines title "preemptions (cumulative)", \
     "$CSV" every ::1 using 1:13 axes x1y2 with lines title "resumes (cumulative)"
unset multiplot
EOF
    [[ -f "$OUT/soak.png" ]] && echo "soak: plot $OUT/soak.png" >&2
else
    echo "soak: gnuplot not installed: no plot (apt-get install gnuplot-nox)" >&2
fi
echo "soak: CSV $CSV, summary $SUMMARY, log $OUT/soak.log" >&2
exit "$RC"
