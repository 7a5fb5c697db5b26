#!/usr/bin/env bash
# Runs the benchmarks behind docs/charts with --json, then scripts/plot_bench.py on them.
#
# Usage: scripts/charts.sh [--quick] [--data DIR] [--out DIR] [--llmkv BIN] [--model MODEL] [-t THREADS]
#   --quick   tiny sizes (well under a minute): checks that every report parses and that the
#             plot script writes its charts; for CI (tests/cli/charts_quick_test.sh). The
#             charts go to DIR/charts unless --out is given, so docs/charts is not touched.
#   --data    where the JSON reports go (default build/charts-data)
#   --out     where the charts go (default docs/charts; DATA/charts with --quick)
#   --llmkv   the llmkv binary (default $LLMKV, else build/tools/llmkv/llmkv)
#   --model   default $LLMKV_MODEL, else models/SmolLM2-135M-Instruct.Q4_1.gguf
#   -t        worker threads of every bench (default 2)
# Environment: PYTHON (a python3 with matplotlib; default: the first of python3,
#   /usr/bin/python3 that imports matplotlib), POOL_MIB (the KV pool of the capacity panel,
#   default 256), NOTE (a line under every chart's caption, e.g. "shared machine: numbers noisy").
# Exit status: 0 done, 1 a bench or the plot failed, 2 bad usage, 3 no python3 with matplotlib.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
QUICK=0
DATA="$ROOT/build/charts-data"
OUT=""
LLMKV="${LLMKV:-$ROOT/build/tools/llmkv/llmkv}"
MODEL="${LLMKV_MODEL:-$ROOT/models/SmolLM2-135M-Instruct.Q4_1.gguf}"
THREADS=2
while [[ $# -gt 0 ]]; do
    case "$1" in
        --quick) QUICK=1 ;;
        --data) DATA="$2"; shift ;;
        --out) OUT="$2"; shift ;;
        --llmkv) LLMKV="$2"; shift ;;
        --model) MODEL="$2"; shift ;;
        -t|--threads) THREADS="$2"; shift ;;
        -h|--help) sed -n '2,18p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "charts.sh: unknown argument '$1' (see --help)" >&2; exit 2 ;;
    esac
    shift
done
if [[ -z "$OUT" ]]; then
    if [[ $QUICK == 1 ]]; then OUT="$DATA/charts"; else OUT="$ROOT/docs/charts"; fi
fi
[[ -x "$LLMKV" ]] || { echo "charts.sh: no llmkv binary at $LLMKV (build it, or --llmkv BIN)" >&2; exit 2; }
[[ -f "$MODEL" ]] || { echo "charts.sh: no model at $MODEL (--model, \$LLMKV_MODEL or scripts/fetch_model.sh)" >&2; exit 2; }
if [[ -z "${PYTHON:-}" ]]; then
    for candidate in python3 /usr/bin/python3; do
        if command -v "$candidate" >/dev/null && "$candidate" -c 'import matplotlib' 2>/dev/null; then
            PYTHON="$candidate"
            break
        fi
    done
fi
if [[ -z "${PYTHON:-}" ]] || ! "$PYTHON" -c 'import matplotlib' 2>/dev/null; then
    echo "charts.sh: no python3 with matplotlib (Debian: apt-get install python3-matplotlib)" >&2
    exit 3
fi
mkdir -p "$DATA" "$OUT"

if [[ $QUICK == 1 ]]; then
    BENCH=(--kv-dtypes f16,int8 --contexts 64,128 --prompt-tokens 16 --gen-tokens 4 --reps 1)
    BATCH=(--decode-only --batch-sizes 1,2 --kv-dtypes f16,int8 --decode-tokens 4)
    PREFIX=(--prefix-lengths 32,64 --sessions 2 --decode-tokens 4)
else
    BENCH=(--kv-dtypes f16,bf16,fp8,int8,int4 --contexts 128,512,2048 --prompt-tokens 64 --gen-tokens 16 --reps 1)
    BATCH=(--decode-only --batch-sizes 1,4,16,64 --kv-dtypes f16,int8,int4 --decode-tokens 8)
    PREFIX=(--prefix-lengths 128,512,1024,2048 --sessions 16 --decode-tokens 16)
fi

run() {  # NAME ARGS...: one bench, its stdout kept beside its JSON report
    local name="$1"
    shift
    echo "charts.sh: $LLMKV $* --json $DATA/$name.json" >&2
    local start=$SECONDS
    "$LLMKV" "$@" --json "$DATA/$name.json" > "$DATA/$name.txt"
    echo "charts.sh: $name done in $((SECONDS - start)) s" >&2
}
rm -f "$DATA"/bench_*.json "$DATA"/bench_*.txt
run bench_decode bench -m "$MODEL" -t "$THREADS" "${BENCH[@]}"
run bench_batch bench batch -m "$MODEL" -t "$THREADS" "${BATCH[@]}"
run bench_prefix bench prefix -m "$MODEL" -t "$THREADS" "${PREFIX[@]}"

# Every report parses and is a complete llmkv bench report.
"$PYTHON" - "$DATA"/bench_*.json <<'EOF'
import json, sys
for path in sys.argv[1:]:
    with open(path, encoding="utf-8") as f:
        doc = json.load(f)
    for key in ("schema", "bench", "command_line", "date", "exit_status", "machine", "model", "params", "records"):
        assert key in doc, f"{path}: no '{key}'"
    assert doc["schema"] == "llmkv-bench/1" and doc["exit_status"] == 0, path
    assert doc["records"], f"{path}: no records"
print(f"charts.sh: {len(sys.argv) - 1} reports parse", file=sys.stderr)
EOF

rm -f "$OUT"/decode_vs_batch.* "$OUT"/kv_footprint.* "$OUT"/ttft_vs_prefix.* "$OUT"/decode_vs_context.*
"$PYTHON" "$ROOT/scripts/plot_bench.py" --out "$OUT" --pool-mib "${POOL_MIB:-256}" --note "${NOTE:-}" "$DATA"/bench_*.json
for chart in decode_vs_batch kv_footprint ttft_vs_prefix decode_vs_context; do
    [[ -s "$OUT/$chart.svg" ]] || { echo "charts.sh: $OUT/$chart.svg was not written" >&2; exit 1; }
done
echo "charts.sh: charts in $OUT, reports in $DATA" >&2
