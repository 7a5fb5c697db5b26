#!/usr/bin/env bash
# scripts/charts.sh --quick on the real model: the benches' --json reports hold the machine,
# the model, the parameters and one record per point of each sweep (fields present and
# numeric, counts equal to the sweep), and scripts/plot_bench.py draws the four charts.
# Nothing about speed is asserted. Exits 77 (skipped) with a reason when the model or a
# python3 with matplotlib is absent.
set -euo pipefail
LLMKV="$1"
MODEL="${LLMKV_MODEL:-$2}"
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)"
if [[ ! -f "$MODEL" ]]; then
    echo "SKIP: model not found at $MODEL (set LLMKV_MODEL or run scripts/fetch_model.sh)"
    exit 77
fi
PYTHON=""
for candidate in python3 /usr/bin/python3; do
    if command -v "$candidate" >/dev/null && "$candidate" -c 'import matplotlib' 2>/dev/null; then
        PYTHON="$candidate"
        break
    fi
done
if [[ -z "$PYTHON" ]]; then
    echo "SKIP: no python3 with matplotlib (Debian: python3-matplotlib)"
    exit 77
fi
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
PYTHON="$PYTHON" "$ROOT/scripts/charts.sh" --quick --llmkv "$LLMKV" --model "$MODEL" --data "$DIR/data" -t 2

"$PYTHON" - "$DIR/data" "$LLMKV" <<'EOF'
import json, numbers, os, sys
data, llmkv = sys.argv[1], sys.argv[2]

def load(name):
    with open(os.path.join(data, name), encoding="utf-8") as f:
        return json.load(f)

def number(x, what):
    assert isinstance(x, numbers.Number) and not isinstance(x, bool), f"{what}: {x!r} is not a number"
    return x

def check_common(doc, bench, args):
    assert doc["schema"] == "llmkv-bench/1", doc["schema"]
    assert doc["bench"] == bench, doc["bench"]
    assert doc["exit_status"] == 0
    cl = doc["command_line"]
    assert cl[0] == llmkv and cl[1:1 + len(bench.split())] == bench.split(), cl
    for a in args:
        assert a in cl, f"{a} not in the command line {cl}"
    assert cl[-2] == "--json", cl
    assert len(doc["date"]) == 20 and doc["date"].endswith("Z"), doc["date"]
    m = doc["machine"]
    assert isinstance(m["cpu_model"], str) and m["cpu_model"], m
    assert number(m["logical_cpus"], "logical_cpus") >= 1
    assert m["kernel_family"] in ("avx512", "avx2", "portable"), m
    assert m["threads_used"] == [2], m
    assert isinstance(m["llmkv_version"], str) and m["llmkv_version"], m
    assert isinstance(m["os"], str) and m["os"], m
    mo = doc["model"]
    assert mo["file"] == os.path.basename(mo["path"]) and mo["file"].endswith(".gguf"), mo
    assert isinstance(mo["architecture"], str) and mo["architecture"], mo
    assert number(mo["n_params"], "n_params") > 0 and number(mo["n_layers"], "n_layers") > 0, mo
    for r in doc["records"]:
        assert isinstance(r["bench"], str)

def recs(doc, kind, **match):
    return [r for r in doc["records"] if r["bench"] == kind and all(r.get(k) == v for k, v in match.items())]

# llmkv bench --kv-dtypes f16,int8 --contexts 64,128 --prompt-tokens 16 -t 2
d = load("bench_decode.json")
check_common(d, "bench", ["--kv-dtypes", "f16,int8", "--contexts", "64,128"])
assert d["params"]["contexts"] == [64, 128] and d["params"]["kv_dtypes"] == ["f16", "int8"], d["params"]
assert d["params"]["threads"] == [2] and d["params"]["prompt_tokens"] == 16, d["params"]
assert len(recs(d, "read_bandwidth")) == 1 and number(recs(d, "read_bandwidth")[0]["gb_s"], "gb_s") > 0
for kv in ("f16", "int8"):
    long = recs(d, "decode", kv=kv, run="long")
    assert sorted(r["context"] for r in long) == [64, 128], long
    assert len(recs(d, "decode", kv=kv, run="short")) == 1
    assert len(recs(d, "prefill", kv=kv)) == 1 and len(recs(d, "roofline", kv=kv)) == 1
    for r in recs(d, "decode", kv=kv) + recs(d, "prefill", kv=kv):
        assert r["threads"] == 2 and number(r["tok_s"], "tok_s") > 0, r
    fp = recs(d, "kv_footprint", kv=kv)
    assert sorted(r["context"] for r in fp) == [16, 64, 128], fp
    for r in fp:
        assert number(r["session_kv_bytes"], "session_kv_bytes") > 0
        assert number(r["bytes_per_token"], "bytes_per_token") > 0
        assert r["kv_tokens"] in (r["context"] - 1, r["context"]), r
# int8 KV takes fewer sealed bytes per token than f16 (the codec formula, not a timing).
assert recs(d, "kv_footprint", kv="int8")[0]["sealed_bytes_per_token"] < recs(d, "kv_footprint", kv="f16")[0]["sealed_bytes_per_token"]
assert len(d["records"]) == 1 + 2 * (1 + 1 + 2 + 1 + 3), len(d["records"])

# llmkv bench batch --decode-only --batch-sizes 1,2 --kv-dtypes f16,int8
b = load("bench_batch.json")
check_common(b, "bench batch", ["--decode-only", "--batch-sizes", "1,2"])
assert b["params"]["batch_sizes"] == [1, 2] and b["params"]["decode_only"] is True, b["params"]
db = recs(b, "decode_batch")
assert sorted((r["kv"], r["batch"]) for r in db) == [("f16", 1), ("f16", 2), ("int8", 1), ("int8", 2)], db
for r in db:
    assert number(r["tok_s"], "tok_s") > 0 and number(r["per_session_tok_s"], "per_session_tok_s") > 0
assert len(b["records"]) == 4, "the decode sweep only"

# llmkv bench prefix --prefix-lengths 32,64 --sessions 2
p = load("bench_prefix.json")
check_common(p, "bench prefix", ["--prefix-lengths", "32,64"])
assert p["params"]["prefix_lengths"] == [32, 64], p["params"]
t = recs(p, "ttft")
assert sorted((r["how"], r["prefix_tokens"]) for r in t) == sorted(
    (h, n) for h in ("computed", "prefix_handle", "prefix_cache", "snapshot_loaded") for n in (32, 64)), t
for r in t:
    assert number(r["ms"], "ms") > 0 and r["question_tokens"] == 20
assert len(recs(p, "prefix_snapshot")) == 2 and len(recs(p, "decode_prefix_cache")) == 1
mem = recs(p, "shared_prefix_memory")
assert len(mem) == 1 and mem[0]["sessions"] == 2 and number(mem[0]["kv_bytes_used"], "kv_bytes_used") > 0, mem
print("reports: fields present, counts match the sweeps")
EOF

for chart in decode_vs_batch kv_footprint ttft_vs_prefix decode_vs_context; do
    head -c 200 "$DIR/data/charts/$chart.svg" | grep -q "<svg" || { echo "$chart.svg is not an SVG"; exit 1; }
    [[ -s "$DIR/data/charts/$chart.png" ]] || { echo "$chart.png missing"; exit 1; }
done
echo "charts: 4 SVG + 4 PNG written"
