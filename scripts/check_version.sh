#!/usr/bin/env bash
# One version number: project(VERSION) in CMakeLists.txt. Checks that everything carrying it
# agrees: include/llmkv.h's LLMKV_VERSION_*, packaging/debian/changelog, the vcpkg port's
# vcpkg.json; and, from a configured/built tree, llmkv.pc, llmkvConfigVersion.cmake
# (SameMajorVersion), CPack's Debian version, libllmkv.so's SONAME and file name; and the .debs
# when a folder of them is given.
# Usage: scripts/check_version.sh [BUILD_DIR [DEB_DIR]]
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-}"
DEBS="${2:-}"
bad=0
say() { printf '%-44s %s\n' "$1" "$2"; }
check() {  # check WHAT FOUND EXPECTED
    if [[ "$2" == "$3" ]]; then say "$1" "$2"; else say "$1" "$2  MISMATCH (expected $3)"; bad=1; fi
}

V="$(sed -nE 's/^project\(llmkv VERSION ([0-9]+\.[0-9]+\.[0-9]+).*/\1/p' "$ROOT/CMakeLists.txt")"
[[ -n "$V" ]] || { echo "check_version: no project(llmkv VERSION x.y.z) in CMakeLists.txt" >&2; exit 1; }
MAJOR="${V%%.*}"
say "CMakeLists.txt project(VERSION)" "$V"

H="$ROOT/include/llmkv.h"
hv="$(for k in MAJOR MINOR PATCH; do sed -nE "s/^#define LLMKV_VERSION_$k ([0-9]+).*/\1/p" "$H"; done | paste -sd.)"
check "include/llmkv.h LLMKV_VERSION_*" "$hv" "$V"

cl="$(sed -nE '1s/^llmkv \(([^)]+)\).*/\1/p' "$ROOT/packaging/debian/changelog")"
check "packaging/debian/changelog (upstream part)" "${cl%-*}" "$V"

vj="$(python3 -c 'import json,sys; print(json.load(open(sys.argv[1]))["version"])' \
      "$ROOT/packaging/vcpkg/ports/llmkv/vcpkg.json")"
check "packaging/vcpkg/ports/llmkv/vcpkg.json" "$vj" "$V"

# The newest version in the ABI symbol list cannot be later than the project's.
newest="$(grep -E '^llmkv_' "$ROOT/packaging/abi/symbols.txt" | awk '{print $2}' | sort -V | tail -1)"
first="$(printf '%s\n%s\n' "$newest" "$V" | sort -V | tail -1)"
check "packaging/abi/symbols.txt newest version <= project" "$first" "$V"

if [[ -n "$BUILD" ]]; then
    pcv="$(sed -nE 's/^Version: *//p' "$BUILD/llmkv.pc")"
    check "$BUILD/llmkv.pc Version" "$pcv" "$V"
    cv="$(sed -nE 's/^set\(PACKAGE_VERSION "([^"]+)"\).*/\1/p' "$BUILD/llmkvConfigVersion.cmake")"
    check "llmkvConfigVersion.cmake PACKAGE_VERSION" "$cv" "$V"
    # SameMajorVersion: a request for MAJOR.0.0 is compatible; a later minor or another major not.
    compat() {
        local f; f="$(mktemp --suffix=.cmake)"
        printf 'set(PACKAGE_FIND_VERSION "%s")\nset(PACKAGE_FIND_VERSION_MAJOR "%s")\ninclude("%s")\nmessage("${PACKAGE_VERSION_COMPATIBLE}")\n' \
            "$1" "${1%%.*}" "$BUILD/llmkvConfigVersion.cmake" > "$f"
        cmake -P "$f" 2>&1; rm -f "$f"
    }
    check "llmkvConfigVersion.cmake: $MAJOR.0.0 compatible" "$(compat "$MAJOR.0.0")" "TRUE"
    check "llmkvConfigVersion.cmake: $MAJOR.99.0 compatible" "$(compat "$MAJOR.99.0")" "FALSE"
    check "llmkvConfigVersion.cmake: $((MAJOR + 1)).0.0 compatible" "$(compat "$((MAJOR + 1)).0.0")" "FALSE"
    cpv="$(sed -nE 's/^set\(CPACK_DEBIAN_PACKAGE_VERSION "([^"]+)"\).*/\1/p' "$BUILD/CPackConfig.cmake")"
    check "CPackConfig.cmake Debian version" "$cpv" "$V"
    so="$(readelf -d "$BUILD/libllmkv.so" | sed -nE 's/.*\(SONAME\).*\[(.*)\]/\1/p')"
    check "libllmkv.so SONAME" "$so" "libllmkv.so.$MAJOR"
    check "libllmkv.so.0 resolves to" "$(basename "$(readlink -f "$BUILD/libllmkv.so")")" "libllmkv.so.$V"
fi

if [[ -n "$DEBS" ]]; then
    n=0
    for deb in "$DEBS"/*.deb; do
        [[ -e "$deb" ]] || continue
        n=$((n + 1))
        dv="$(dpkg-deb -f "$deb" Version)"
        check "$(basename "$deb") Version (upstream part)" "${dv%-*}" "$V"
        check "$(basename "$deb") matches changelog" "$dv" "$cl"
    done
    [[ $n -gt 0 ]] || { echo "check_version: no .deb in $DEBS" >&2; bad=1; }
fi

if [[ $bad -ne 0 ]]; then
    echo "check_version: versions disagree; project(VERSION) in CMakeLists.txt is the one to follow" >&2
    exit 1
fi
echo "check_version: all agree on $V"
