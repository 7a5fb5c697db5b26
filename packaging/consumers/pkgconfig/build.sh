#!/bin/sh
# Builds the pkg-config consumer against the installed llmkv (packages, or a prefix in
# PKG_CONFIG_PATH) and runs it: build.sh OUT_DIR [MODEL]. Exit status: the consumer's.
# PKG_CONFIG may carry options, e.g. "pkg-config --define-variable=prefix=/staging".
set -eu
HERE="$(cd "$(dirname "$0")" && pwd)"
OUT="${1:?usage: build.sh OUT_DIR [MODEL]}"
mkdir -p "$OUT"
echo "${PKG_CONFIG:-pkg-config} --cflags --libs llmkv: $(${PKG_CONFIG:-pkg-config} --cflags --libs llmkv)"
# shellcheck disable=SC2046
${CC:-cc} -std=c99 -Wall -Werror -DCONSUMER_NAME='"consumer-pkgconfig"' "$HERE/../consumer.c" \
    -o "$OUT/consumer-pkgconfig" $(${PKG_CONFIG:-pkg-config} --cflags --libs llmkv)
exec "$OUT/consumer-pkgconfig" ${2:+"$2"}
