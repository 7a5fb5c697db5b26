#!/usr/bin/env bash
# scripts/check_version.sh fails when any carrier of the version disagrees with
# project(VERSION): each mutation below, made in a copy of the files it reads, must fail it;
# the unmodified copy must pass.
# Usage: version_mismatch_test.sh SOURCE_DIR BUILD_DIR
set -euo pipefail
SRC="$1"; BUILD="$2"
TMP="$(mktemp -d)"; trap 'rm -rf "$TMP"' EXIT
FILES=(CMakeLists.txt include/llmkv.h packaging/debian/changelog packaging/vcpkg/ports/llmkv/vcpkg.json
       packaging/abi/symbols.txt scripts/check_version.sh)
BFILES=(llmkv.pc llmkvConfigVersion.cmake CPackConfig.cmake)
fresh() {
    rm -rf "$TMP/src" "$TMP/build"
    for f in "${FILES[@]}"; do mkdir -p "$TMP/src/$(dirname "$f")"; cp "$SRC/$f" "$TMP/src/$f"; done
    mkdir -p "$TMP/build"
    for f in "${BFILES[@]}"; do cp "$BUILD/$f" "$TMP/build/$f"; done
    cp -P "$BUILD"/libllmkv.so* "$TMP/build/"
}
fail=0
expect() {  # expect pass|fail NAME FILE SED_SCRIPT
    fresh
    [[ -z "$4" ]] || sed -i -e "$4" "$TMP/$3"
    if bash "$TMP/src/scripts/check_version.sh" "$TMP/build" >"$TMP/out" 2>&1; then got=pass; else got=fail; fi
    if [[ $got == "$1" ]]; then echo "ok   $2: $1 $(grep -m1 MISMATCH "$TMP/out" || true)"
    else echo "FAIL $2: expected $1, got $got"; cat "$TMP/out"; fail=1; fi
}
expect pass unmodified       src/CMakeLists.txt ""
expect fail header_minor     src/include/llmkv.h 's/^#define LLMKV_VERSION_MINOR [0-9]*/#define LLMKV_VERSION_MINOR 99/'
expect fail header_patch     src/include/llmkv.h 's/^#define LLMKV_VERSION_PATCH [0-9]*/#define LLMKV_VERSION_PATCH 99/'
expect fail cmake_version    src/CMakeLists.txt '2s/VERSION [0-9.]*/VERSION 9.9.9/'
expect fail deb_changelog    src/packaging/debian/changelog '1s/(\([0-9.]*\)-/(9.9.9-/'
expect fail vcpkg_json       src/packaging/vcpkg/ports/llmkv/vcpkg.json 's/"version": "[^"]*"/"version": "9.9.9"/'
expect fail symbols_future   src/packaging/abi/symbols.txt 's/^\(llmkv_version  *\)[0-9.]*/\19.9.9/'
expect fail pc_file          build/llmkv.pc 's/^Version: .*/Version: 9.9.9/'
expect fail cmake_config_ver build/llmkvConfigVersion.cmake 's/^set(PACKAGE_VERSION "[^"]*")/set(PACKAGE_VERSION "9.9.9")/'
expect fail cpack_deb_ver    build/CPackConfig.cmake 's/^set(CPACK_DEBIAN_PACKAGE_VERSION "[^"]*")/set(CPACK_DEBIAN_PACKAGE_VERSION "9.9.9")/'
exit $fail
