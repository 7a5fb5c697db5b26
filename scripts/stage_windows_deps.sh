#!/usr/bin/env bash
# Installs the MinGW-w64 cross compiler and Wine (Debian packages), and stages the
# dependencies of a Windows build in DEPS_DIR for cmake/windows-deps.cmake. Debian has no
# Windows builds of them: the header-only ones are copied from this machine's packages, and
# utf8proc, cmocka and mimalloc come from the source tarballs of Debian's own packages
# (checksums from their .dsc, cached in ~/.cache/llmkv).
#
#   scripts/stage_windows_deps.sh DEPS_DIR
# Used by scripts/build_windows.sh and scripts/check_vcpkg_port.sh (TRIPLET=x64-mingw-dynamic).
set -euo pipefail
DEPS="${1:?usage: stage_windows_deps.sh DEPS_DIR}"
# The cross compiler and Wine (with its recommended packages: the configuration tested here).
missing=()
for p in g++-mingw-w64-x86-64-posix wine wine64; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [[ ${#missing[@]} -gt 0 ]]; then
    SUDO=""
    [[ $(id -u) -ne 0 ]] && SUDO="sudo"
    echo "stage_windows_deps: installing ${missing[*]}" >&2
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >&2
fi

mkdir -p "$DEPS/include" "$DEPS/utf8proc"
# Header-only dependencies: the Debian packages the Linux build uses.
cp -pf /usr/include/xxhash.h "$DEPS/include/"  # -p: unchanged headers rebuild nothing
for d in flatbuffers nlohmann CLI; do
    rm -rf "${DEPS:?}/include/$d"
    cp -rp "/usr/include/$d" "$DEPS/include/$d"
done

# Sources of Debian bookworm's packages, cached across builds and checked against the
# sha256 of their .dsc: fetch_debian_source POOL_DIR TARBALL SHA256 -> path of the tarball.
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/llmkv"
mkdir -p "$CACHE"
fetch_debian_source() {
    local dir="$1" file="$2" sum="$3"
    if ! echo "$sum  $CACHE/$file" | sha256sum -c --status 2>/dev/null; then
        echo "stage_windows_deps: fetching $file from deb.debian.org" >&2
        curl -sSfL --retry 3 -o "$CACHE/$file.part" "http://deb.debian.org/debian/pool/main/$dir/$file"
        mv "$CACHE/$file.part" "$CACHE/$file"
        echo "$sum  $CACHE/$file" | sha256sum -c --status ||
            { echo "stage_windows_deps: $file checksum mismatch" >&2; exit 1; }
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
# mimalloc 2.0.9+ds-2 (the host tier's allocator, built into mimalloc.dll: the version the
# Linux build loads as libmimalloc.so.2).
mkdir -p "$DEPS/mimalloc"
tar -xJf "$(fetch_debian_source m/mimalloc mimalloc_2.0.9+ds.orig.tar.xz \
        cbc9d207ff105ad1f0cb739c378076143a6452b8d0624309cea0abfb040e972b)" \
    -C "$DEPS/mimalloc" --strip-components=1 --wildcards '*/src/*' '*/include/*' '*/LICENSE'
# cmocka.h checks print_message formats against GCC's "printf" archetype, which MinGW maps to
# msvcrt's (no %zu); the build uses MinGW's C99 stdio, so the staged copy says gnu_printf.
sed -i 's/__format__ (__printf__, a, b)/__format__ (__gnu_printf__, a, b)/' "$DEPS/cmocka/include/cmocka.h"

