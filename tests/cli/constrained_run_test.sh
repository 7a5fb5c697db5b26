#!/usr/bin/env bash
# `llmkv run` with constraints on the real model: --json-schema output parses and has the
# required keys, --grammar output matches its language, --stop cuts the text before the stop
# string, and bad grammars / bias specs fail with a message (status 1 / 2).
# Needs the real model: exits 77 (skipped) with a reason when it is absent.
set -euo pipefail
LLMKV="$1"
MODEL="${LLMKV_MODEL:-$2}"
if [[ ! -f "$MODEL" ]]; then
    echo "SKIP: model not found at $MODEL (set LLMKV_MODEL or run scripts/fetch_model.sh)"
    exit 77
fi
DIR="$(mktemp -d)"
trap 'rm -rf "$DIR"' EXIT
cat > "$DIR/npc.json" <<'JSON'
{"type": "object",
 "properties": {"say": {"type": "string", "maxLength": 60},
                "action": {"enum": ["wave", "trade", "flee"]},
                "gold": {"type": "integer"}},
 "required": ["say", "action", "gold"]}
JSON
"$LLMKV" run -m "$MODEL" -t 2 --chat -p "You are a merchant. Greet me as JSON." -n 120 --temp 0.8 --seed 3 \
    --json-schema "$DIR/npc.json" > "$DIR/json.txt" 2> "$DIR/json.err"
python3 - "$DIR/json.txt" <<'PY'
import json, sys
obj = json.loads(open(sys.argv[1]).read().strip())
assert set(obj) == {"say", "action", "gold"}, obj
assert isinstance(obj["say"], str) and len(obj["say"]) <= 60, obj
assert obj["action"] in ("wave", "trade", "flee"), obj
assert isinstance(obj["gold"], int) and not isinstance(obj["gold"], bool), obj
print("json ok:", obj)
PY
printf 'root ::= ("yes" | "no") ", " [a-z ]{2,30} "."\n' > "$DIR/yn.gbnf"
"$LLMKV" run -m "$MODEL" -t 2 --chat -p "Is water wet?" -n 40 --grammar "$DIR/yn.gbnf" > "$DIR/yn.txt" 2>/dev/null
grep -Eqx '(yes|no), [a-z ]{2,30}\.' <(head -c -1 "$DIR/yn.txt" | tr -d '\n'; echo) \
    || { echo "grammar output outside its language:"; cat "$DIR/yn.txt"; exit 1; }
# --stop: the same greedy run, cut where the stop string starts.
"$LLMKV" run -m "$MODEL" -t 2 --chat -p "Count from 1 to 10, comma separated." -n 40 > "$DIR/full.txt" 2>/dev/null
"$LLMKV" run -m "$MODEL" -t 2 --chat -p "Count from 1 to 10, comma separated." -n 40 --stop ", 5" \
    > "$DIR/cut.txt" 2> "$DIR/cut.err"
grep -q "finish: stop" "$DIR/cut.err" || { echo "no stop finish"; cat "$DIR/cut.err"; exit 1; }
full="$(cat "$DIR/full.txt")"
cut="$(cat "$DIR/cut.txt")"
[[ "$full" == *", 5"* ]] || { echo "the free run has no ', 5': $full"; exit 1; }
[[ "$cut" == "${full%%, 5*}" ]] || { echo "cut output '$cut' is not the free run before ', 5'"; exit 1; }
# Errors.
printf 'root ::= "a" (\n' > "$DIR/bad.gbnf"
if "$LLMKV" run -m "$MODEL" -p x --grammar "$DIR/bad.gbnf" > /dev/null 2> "$DIR/bad.err"; then
    echo "a bad grammar was accepted"; exit 1
fi
grep -q "line 1, column" "$DIR/bad.err" || { echo "no position in: $(cat "$DIR/bad.err")"; exit 1; }
set +e
"$LLMKV" run -m "$MODEL" -p x --logit-bias 12 > /dev/null 2> "$DIR/bias.err"
rc=$?
set -e
[[ $rc -eq 2 ]] && grep -q "TOKEN=BIAS" "$DIR/bias.err" || { echo "bad --logit-bias: rc $rc, $(cat "$DIR/bias.err")"; exit 1; }
echo "ok"
