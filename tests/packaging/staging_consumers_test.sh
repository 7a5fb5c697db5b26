#!/usr/bin/env bash
# Installs the runtime and dev components of a built tree into a temporary prefix
# (cmake --install --component) and builds and runs both consumers against it: pkg-config
# (prefix redefined to the staging folder) and CMake find_package(llmkv) + llmkv::llmkv.
# Exit 77 (skip) without a model. The clean-system test of the .debs is
# scripts/package_install_test.sh; this is its quick form on the build machine.
# Usage: staging_consumers_test.sh SOURCE_DIR BUILD_DIR [MODEL]
set -euo pipefail
SRC="$1"; BUILD="$2"; MODEL="${3:-${LLMKV_MODEL:-}}"
if [[ -z "$MODEL" && -f "$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf" ]]; then
    MODEL="$SRC/models/SmolLM2-135M-Instruct.Q4_1.gguf"
fi
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
STAGE="$TMP/prefix"
for c in runtime dev; do cmake --install "$BUILD" --prefix "$STAGE" --component "$c" >/dev/null; done
libdir="$(dirname "$(find "$STAGE" -name 'libllmkv.so.*' -type f | head -1)")"
pc="$(find "$STAGE" -name llmkv.pc | head -1)"
[[ -n "$pc" && -n "$libdir" ]] || { echo "staging install has no llmkv.pc or libllmkv.so.*" >&2; exit 1; }
rc=0
PKG_CONFIG="pkg-config --define-variable=prefix=$STAGE" PKG_CONFIG_PATH="$(dirname "$pc")" \
    LD_LIBRARY_PATH="$libdir" sh "$SRC/packaging/consumers/pkgconfig/build.sh" "$TMP/pc" ${MODEL:+"$MODEL"} || rc=$?
[[ $rc -eq 0 || $rc -eq 77 ]] || exit 1
rc2=0
cmake -S "$SRC/packaging/consumers/cmake" -B "$TMP/cm" -DCMAKE_PREFIX_PATH="$STAGE" >/dev/null
cmake --build "$TMP/cm" >/dev/null
"$TMP/cm/consumer-cmake" ${MODEL:+"$MODEL"} || rc2=$?
[[ $rc2 -eq 0 || $rc2 -eq 77 ]] || exit 1
[[ $rc -eq 77 || $rc2 -eq 77 ]] && exit 77
exit 0
