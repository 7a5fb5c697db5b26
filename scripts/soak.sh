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
# Redraw a plot:                            scripts/soak.sh --plot OUTDIR [TITLE]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
# The plot (gnuplot; for the docs, CI needs none): generated tokens/s and prefill tokens/s
# (recomputation after preemption included) with live sessions; RSS with the cumulative
# preemptions and resumes.
plot() {
    local csv="$1" png="$2" title="$3"
    if ! command -v gnuplot >/dev/null; then
        echo "soak: gnuplot not installed: no plot (apt-get install gnuplot-nox)" >&2
        return 0
    fi
    gnuplot <<GNUPLOT || echo "soak: gnuplot failed; no plot" >&2
set terminal pngcairo size 1100,700 noenhanced font ",10"
set output "$png"
set datafile separator ","
set key top right opaque box
set autoscale xfix
set multiplot layout 2,1 title "$title"
set xlabel "time (s)"
set ylabel "tokens/s"
set y2label "live sessions"
set y2tics
set ytics nomirror
set yrange [0:*]
set y2range [0:*]
x0 = 0; p0 = 0
plot "$csv" every ::1 using 1:2 with linespoints pt 7 ps 0.4 title "generated tokens/s", \
     "$csv" every ::1 using 1:(dx = \$1 - x0, x0 = \$1, dp = \$9 - p0, p0 = \$9, dp / dx) with lines title "prefilled tokens/s (incl. recomputation)", \
     "$csv" every ::1 using 1:4 axes x1y2 with steps title "live sessions"
set ylabel "RSS (MiB)"
set yrange [0:*]
set y2label "preemptions / resumes (cumulative)"
plot "$csv" every ::1 using 1:3 with lines lw 2 title "RSS (MiB)", \
     "$csv" every ::1 using 1:10 axes x1y2 with lines title "preemptions", \
     "$csv" every ::1 using 1:13 axes x1y2 with lines title "resumes"
unset multiplot
GNUPLOT
    [[ -f "$png" ]] && echo "soak: plot $png" >&2
    return 0
}

# scripts/soak.sh --plot OUTDIR [TITLE]: only (re)draw OUTDIR/soak.png from OUTDIR/soak.csv.
if [[ "${1:-}" == "--plot" ]]; then
    plot "$2/soak.csv" "$2/soak.png" "${3:-llmkv soak}"
    exit 0
fi

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

plot "$CSV" "$OUT/soak.png" "llmkv soak: 64 sessions, $(basename "$MODEL"), $MINUTES min"
echo "soak: CSV $CSV, summary $SUMMARY, log $OUT/soak.log" >&2
exit "$RC"
