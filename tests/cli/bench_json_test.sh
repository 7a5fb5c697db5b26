#!/usr/bin/env bash
# `--json FILE` on the bench subcommands that scripts/charts.sh does not run (offload,
# quality, grammar, window), on tiny sizes: each writes a complete report whose records
# match what it printed; the printed tables have the same shape with and without --json;
# an unwritable --json path is refused (exit 2) before the bench runs. Nothing about speed
# is asserted. Exits 77 (skipped) with a reason when the model or python3 is absent;
# `bench window` runs when $LLMKV_GEMMA3_MODEL names the Gemma 3 model (it needs
# sliding-window layers), else that part is skipped with a note.
set -euo pipefail
LLMKV="$1"
MODEL="${LLMKV_MODEL:-$2}"
if [[ ! -f "$MODEL" ]]; then
    echo "SKIP: model not found at $MODEL (set LLMKV_MODEL or run scripts/fetch_model.sh)"
    exit 77
fi
command -v python3 >/dev/null || { echo "SKIP: no python3"; exit 77; }
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT

# A bad path fails at once, with exit status 2 and no bench output.
set +e
"$LLMKV" bench grammar -m "$MODEL" -t 2 --batch 1 -n 4 --json "$DIR/no/such/dir/g.json" > "$DIR/bad.out" 2> "$DIR/bad.err"
rc=$?
set -e
[[ $rc == 2 ]] || { echo "unwritable --json: exit $rc, expected 2"; cat "$DIR/bad.err"; exit 1; }
grep -q -- "--json" "$DIR/bad.err" || { echo "no message naming --json"; cat "$DIR/bad.err"; exit 1; }
[[ ! -s "$DIR/bad.out" ]] || { echo "the bench ran despite the bad path"; exit 1; }

# grammar: the table's shape (numbers blanked) is the same with and without --json.
"$LLMKV" bench grammar -m "$MODEL" -t 2 --batch 1,2 -n 6 > "$DIR/grammar_plain.txt"
"$LLMKV" bench grammar -m "$MODEL" -t 2 --batch 1,2 -n 6 --json "$DIR/grammar.json" > "$DIR/grammar.txt"
shape() { sed -E 's/[0-9]+(\.[0-9]+)?/N/g; s/ +/ /g' "$1"; }
diff <(shape "$DIR/grammar_plain.txt") <(shape "$DIR/grammar.txt") || { echo "--json changed the printed output"; exit 1; }

# offload at a short --context: its last part (one session 4x longer than a quarter-size
# device pool) may be refused by the engine (exit 1, "raise --context"); the report is
# written either way, with that exit status and the records of the parts that ran.
set +e
"$LLMKV" bench offload -m "$MODEL" -t 2 --context 256 --sessions 2 --json "$DIR/offload.json" > "$DIR/offload.txt" 2>/dev/null
OFFLOAD_RC=$?
set -e
[[ $OFFLOAD_RC == 0 || $OFFLOAD_RC == 1 ]] || { echo "bench offload: exit $OFFLOAD_RC"; exit 1; }
"$LLMKV" bench quality -m "$MODEL" -t 2 --tokens 256 --contexts 64,128 --no-passkey --csv "$DIR/q.csv" \
    --json "$DIR/quality.json" > "$DIR/quality.txt"
GEMMA="${LLMKV_GEMMA3_MODEL:-}"
if [[ -n "$GEMMA" && -f "$GEMMA" ]]; then
    "$LLMKV" bench window -m "$GEMMA" -t 2 --context 64 --context 4096 --measure 64 --decode 2 --kv int8/int8 \
        --json "$DIR/window.json" > "$DIR/window.txt"
else
    echo "note: bench window not run (set LLMKV_GEMMA3_MODEL to the Gemma 3 model)"
fi

python3 - "$DIR" "$OFFLOAD_RC" <<'EOF'
import json, numbers, os, sys
d, offload_rc = sys.argv[1], int(sys.argv[2])

def load(name):
    with open(os.path.join(d, name), encoding="utf-8") as f:
        return json.load(f)

def num(x):
    return isinstance(x, numbers.Number) and not isinstance(x, bool)

def common(doc, bench, rc=0):
    assert doc["schema"] == "llmkv-bench/1" and doc["bench"] == bench and doc["exit_status"] == rc, doc["bench"]
    assert doc["command_line"][1:1 + len(bench.split())] == bench.split()
    m = doc["machine"]
    assert m["cpu_model"] and num(m["logical_cpus"]) and m["kernel_family"] in ("avx512", "avx2", "portable")
    assert m["threads_used"] == [2] and m["llmkv_version"], m
    assert doc["model"]["architecture"] and num(doc["model"]["n_params"]) and doc["model"]["n_params"] > 0
    assert doc["records"], "no records"

def recs(doc, kind):
    return [r for r in doc["records"] if r["bench"] == kind]

g = load("grammar.json")
common(g, "bench grammar")
gd = recs(g, "grammar_decode")
assert sorted((r["batch"], r["grammar"]) for r in gd) == sorted(
    (b, k) for b in (1, 2) for k in ("none", "json-cold", "json-warm")), gd
for r in gd:
    assert num(r["tok_s"]) and num(r["mask_us_per_token"]) and num(r["tokens"]) and r["tokens"] > 0, r
    assert (r["completed"] is None) == (r["grammar"] == "none"), r
# One printed row per record.
rows = [l for l in open(os.path.join(d, "grammar.txt")) if l.split() and l.split()[0].isdigit()]
assert len(rows) == len(gd), (rows, gd)

o = load("offload.json")
common(o, "bench offload", offload_rc)
assert o["params"]["context"] == 256 and o["params"]["sessions"] == 2
pr = recs(o, "park_resume")
assert len(pr) == 1 and all(num(pr[0][k]) for k in ("recompute_ms", "park_call_ms", "resume_ms")), pr
assert len(recs(o, "copy_bandwidth")) == 1 and num(recs(o, "copy_bandwidth")[0]["copy_gb_s"])
qp = recs(o, "quarter_pool")
assert sorted(r["host_tier"] for r in qp) == [False, True] and all(num(r["seconds"]) for r in qp), qp
assert recs(o, "quarter_pool_summary")[0]["identical_tokens"] is True
ls = recs(o, "long_session")
if offload_rc == 0:
    assert sorted(r["device_limit"] for r in ls) == [False, True] and all(r["context"] == 1024 for r in ls), ls
    assert recs(o, "long_session_summary")[0]["identical_tokens"] is True
else:
    assert not ls, "a refused long session has no timing records"

q = load("quality.json")
common(q, "bench quality")
kq = recs(q, "kv_quality")
pairs = sorted({r["kv"] for r in kq})
assert "f16/f16" in pairs and "int8/int8" in pairs, pairs
assert len(kq) == 2 * len(pairs) and sorted({r["context"] for r in kq}) == [64, 128], kq
for r in kq:
    assert all(num(r[k]) for k in ("perplexity", "mean_kl", "top1_agreement", "bytes_per_token")), r
    assert "passkey_hits" not in r, "--no-passkey: no passkey fields"
f16 = [r for r in kq if r["kv"] == "f16/f16"]
assert all(r["mean_kl"] == 0 and r["top1_agreement"] == 1 for r in f16), f16
# The CSV has one row per record.
assert len(open(os.path.join(d, "q.csv")).read().splitlines()) == 1 + len(kq)

if os.path.exists(os.path.join(d, "window.json")):
    w = load("window.json")
    common(w, "bench window")
    wk = recs(w, "window_kv")
    assert sorted((r["context"], r["how"]) for r in wk) == [(64, "measured"), (4096, "computed")], wk
    for r in wk:
        assert num(r["kv_bytes_released"]) and num(r["kv_bytes_kept"]) and r["kv"] == "int8/int8", r
        assert ("decode_tok_s_released" in r) == (r["how"] == "measured"), r
    assert w["model"]["kv_window"] > 0
print("bench --json reports: complete, counts match what was printed")
EOF
