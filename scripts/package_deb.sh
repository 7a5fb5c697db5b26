#!/usr/bin/env bash
# Builds the Debian packages from an already-built tree (configured with
# -DCMAKE_INSTALL_PREFIX=/usr, which scripts/package_deb.sh checks), runs lintian on each and
# checks their versions. The CUDA package is built when the tree has the CUDA module.
# Usage: scripts/package_deb.sh BUILD_DIR [OUT_DIR]     (OUT_DIR defaults to BUILD_DIR/debs)
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="$(cd "${1:?usage: package_deb.sh BUILD_DIR [OUT_DIR]}" && pwd)"
OUT="${2:-$BUILD/debs}"
prefix="$(sed -nE 's/^CMAKE_INSTALL_PREFIX:PATH=//p' "$BUILD/CMakeCache.txt")"
if [[ "$prefix" != /usr ]]; then
    echo "package_deb: $BUILD is configured with CMAKE_INSTALL_PREFIX=$prefix; packages need /usr" >&2
    echo "             (cmake -S . -B $BUILD -DCMAKE_INSTALL_PREFIX=/usr, then build)" >&2
    exit 1
fi
for t in dpkg-shlibdeps lintian; do
    command -v "$t" >/dev/null || { echo "package_deb: $t missing (apt-get install dpkg-dev lintian)" >&2; exit 1; }
done
# Make sure what is packaged is built (a no-op on a built tree).
targets=(llmkv llmkv_static)
grep -q '^LLMKV_BUILD_TOOLS:BOOL=ON' "$BUILD/CMakeCache.txt" && targets+=(llmkv_cli)
cmake --build "$BUILD" --target "${targets[@]}" >&2
mkdir -p "$OUT"; rm -f "$OUT"/*.deb
t0=$SECONDS
(cd "$BUILD" && cpack -G DEB -B "$OUT" --config CPackConfig.cmake) >&2
rm -rf "$OUT/_CPack_Packages"
echo "package_deb: built in $((SECONDS - t0)) s:" >&2
for deb in "$OUT"/*.deb; do
    echo "== $(basename "$deb")" >&2
    dpkg-deb -f "$deb" Package Version Architecture Depends Recommends Section >&2
done
t0=$SECONDS
# --fail-on error: warnings are listed (docs/PACKAGING.md says why each stays), errors fail.
lintian --fail-on error --no-tag-display-limit "$OUT"/*.deb >&2
echo "package_deb: lintian clean of errors in $((SECONDS - t0)) s" >&2
"$ROOT/scripts/check_version.sh" "$BUILD" "$OUT" >&2

# The symbols file gives a dependant the version constraint of the newest symbol it uses:
# dpkg-shlibdeps on a program calling only llmkv_version, and on the consumer (which calls
# llmkv_engine_create), against libllmkv0 as a package being built.
t0=$SECONDS
T="$(mktemp -d)"; trap 'rm -rf "$T"' EXIT
mkdir -p "$T/debian/libllmkv0"
dpkg-deb -x "$OUT"/libllmkv0_*.deb "$T/debian/libllmkv0"
dpkg-deb -e "$OUT"/libllmkv0_*.deb "$T/debian/libllmkv0/DEBIAN"
printf 'Source: probe\n\nPackage: probe\nArchitecture: any\n' > "$T/debian/control"
printf '#include <llmkv.h>\nint main(void) { return llmkv_version() > 0 ? 0 : 1; }\n' > "$T/old.c"
cc "$T/old.c" -I "$ROOT/include" -L "$BUILD" -lllmkv -o "$T/probe_old"
cc "$ROOT/packaging/consumers/consumer.c" -I "$ROOT/include" -L "$BUILD" -lllmkv -o "$T/probe_new"
sym_ver() { awk -v s="$1" '$1 == s {print $2}' "$ROOT/packaging/abi/symbols.txt"; }
for probe in "old llmkv_version" "new llmkv_engine_create"; do
    set -- $probe
    got="$(cd "$T" && dpkg-shlibdeps -O -e "probe_$1" 2>/dev/null | grep -o 'libllmkv0 ([^)]*)')"
    want="libllmkv0 (>= $(sym_ver "$2"))"
    if [[ "$got" != "$want" ]]; then
        echo "package_deb: a program using $2 gets '$got' from dpkg-shlibdeps, expected '$want'" >&2; exit 1
    fi
    echo "package_deb: dpkg-shlibdeps, program using up to $2: $got" >&2
done
echo "package_deb: shlibdeps checks in $((SECONDS - t0)) s" >&2
ls "$OUT"/*.deb
