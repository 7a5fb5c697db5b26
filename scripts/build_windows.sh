#!/usr/bin/env bash
# Cross-builds llmkv for 64-bit Windows with MinGW-w64 (Debian's g++-mingw-w64-x86-64-posix)
# from the same CMake as the Linux build: llmkv.dll (+ llmkv.dll.a, llmkv.def), llmkv.exe
# and the Windows tests. scripts/test_windows.sh runs them under Wine.
#
#   scripts/build_windows.sh [BUILD_DIR] [more cmake -D options]     (default: build-win)
#
# Debian has no Windows builds of the dependencies, so they are staged in BUILD_DIR/deps
# (cmake/windows-deps.cmake): the header-only ones from this machine's packages, and
# utf8proc from the source tarball of Debian's own utf8proc package (checksum from its .dsc).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-$ROOT/build-win}"
[[ $# -gt 0 ]] && shift
"$ROOT/scripts/install_deps.sh"
# The cross compiler and Wine (with its recommended packages: the configuration tested here).
missing=()
for p in g++-mingw-w64-x86-64-posix wine wine64; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    echo "build_windows: installing ${missing[*]}" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi

DEPS="$BUILD/deps"
mkdir -p "$DEPS/include" "$DEPS/utf8proc"
# Header-only dependencies: the Debian packages the Linux build uses.
cp -f /usr/include/xxhash.h "$DEPS/include/"
for d in flatbuffers nlohmann CLI; do
    rm -rf "${DEPS:?}/include/$d"
    cp -r "/usr/include/$d" "$DEPS/include/$d"
done

# Sources of Debian bookworm's packages, cached across builds and checked against the
# sha256 of their .dsc: fetch_debian_source POOL_DIR TARBALL SHA256 -> path of the tarball.
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llmkv"
mkdir -p "$CACHE"
fetch_debian_source() {
    local dir="$1" file="$2" sum="$3"
    if ! echo "$sum  $CACHE/$file" | sha256sum -c --status 2>/dev/null; then
        echo "build_windows: fetching $file from deb.debian.org" >&2
        curl -sSfL --retry 3 -o "$CACHE/$file.part" "http://deb.debian.org/debian/pool/main/$dir/$file"
        mv "$CACHE/$file.part" "$CACHE/$file"
        echo "$sum  $CACHE/$file" | sha256sum -c --status ||
            { echo "build_windows: $file checksum mismatch" >&2; exit 1; }
    fi
    builtin echo "$CACHE/$file"
}
# utf8proc 2.8.0-1 (the tokenizer's Unicode tables).
tar -xzf "$(fetch_debian_source u/utf8proc utf8proc_2.8.0.orig.tar.gz \
        a0a60a79fe6f6d54e7d411facbfcc867a6e198608f2cd992490e46f04b1bcecc)" \
    -C "$DEPS/utf8proc" --strip-components=1 \
    --wildcards '*/utf8proc.c' '*/utf8proc.h' '*/utf8proc_data.c' '*/LICENSE.md'
# cmocka 1.1.5-2.1 (the C API tests).
mkdir -p "$DEPS/cmocka"
tar -xJf "$(fetch_debian_source c/cmocka cmocka_1.1.5.orig.tar.xz \
        f0ccd8242d55e2fd74b16ba518359151f6f8383ff8aef4976e48393f77bba8b6)" \
    -C "$DEPS/cmocka" --strip-components=1 --wildcards '*/src/cmocka.c' '*/include/*.h' '*/COPYING'
# cmocka.h checks print_message formats against GCC's "printf" archetype, which MinGW maps to
# msvcrt's (no %zu); the build uses MinGW's C99 stdio, so the staged copy says gnu_printf.
sed -i 's/__format__ (__printf__, a, b)/__format__ (__gnu_printf__, a, b)/' "$DEPS/cmocka/include/cmocka.h"

GEN=()
command -v ninja >/dev/null && GEN=(-G Ninja)
cmake -S "$ROOT" -B "$BUILD" "${GEN[@]}" -DCMAKE_BUILD_TYPE=Release \
    -DCMAKE_TOOLCHAIN_FILE="$ROOT/cmake/mingw-w64-x86_64.cmake" -DLLMKV_WIN_DEPS_DIR="$DEPS" \
    -DLLMKV_CUDA=OFF -DLLMKV_BUILD_BENCH=OFF "$@" >&2
cmake --build "$BUILD" -j "$(nproc)" >&2
