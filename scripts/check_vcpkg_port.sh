#!/usr/bin/env bash
# Staging test of the vcpkg port (packaging/vcpkg/ports/llmkv) without vcpkg:
#   1. vcpkg.json: valid JSON, name/version/features (cuda, tools), dependencies named as the
#      vcpkg registry names its ports, version equal to project(VERSION);
#   2. runs the real portfile.cmake with stand-ins for the vcpkg helpers
#      (packaging/vcpkg/test/run_portfile.cmake): configure with the port's options, build,
#      install, config fixup to share/llmkv, pkg-config fixup, tools to tools/llmkv;
#   3. checks the installed tree (files, no absolute staging path in the CMake package or .pc);
#   4. moves the tree elsewhere (as vcpkg copies packages/ into installed/) and builds and runs
#      both consumers from there: CMake find_package(llmkv) + llmkv::llmkv, and pkg-config.
# Usage: scripts/check_vcpkg_port.sh [WORK_DIR] [MODEL]      (MODEL defaults to $LLMKV_MODEL)
# Environment: FEATURES (default "tools"), JOBS (default nproc), TRIPLET (x64-linux, the
# default, or x64-mingw-dynamic: cross-built with MinGW-w64, the dependencies staged by
# scripts/stage_windows_deps.sh standing in for vcpkg's ports, and the consumer run under
# Wine). Uses ccache when present.
# A full library build: minutes (see docs/PACKAGING.md for the measured time).
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
WORK="${1:-$ROOT/build-vcpkg-port}"
MODEL="${2:-${LLMKV_MODEL:-}}"
FEATURES="${FEATURES:-tools}"
TRIPLET="${TRIPLET:-x64-linux}"
JOBS="${JOBS:-$(nproc)}"
PORT="$ROOT/packaging/vcpkg/ports/llmkv"
T0=$SECONDS
lap() { echo "== [$((SECONDS - T0)) s] $*" >&2; }

lap "vcpkg.json"
python3 - "$PORT/vcpkg.json" "$ROOT/CMakeLists.txt" <<'EOF'
import json, re, sys
m = json.load(open(sys.argv[1]))
errors = []
want = re.search(r"project\(llmkv VERSION (\d+\.\d+\.\d+)", open(sys.argv[2]).read()).group(1)
if m.get("name") != "llmkv": errors.append("name must be llmkv")
if m.get("version") != want: errors.append(f"version {m.get('version')} != project version {want}")
for f in ("cuda", "tools"):
    if f not in m.get("features", {}): errors.append(f"feature {f} missing")
# Ports of the vcpkg registry this port may depend on (test-only dependencies - gtest,
# cmocka, benchmark - and mimalloc, which libllmkv dlopens as the system's libmimalloc.so.2
# rather than links, are deliberately absent).
known = {"flatbuffers", "nlohmann-json", "pkgconf", "utf8proc", "xxhash", "vcpkg-cmake",
         "vcpkg-cmake-config", "cli11", "cuda"}
def names(deps):
    return [d if isinstance(d, str) else d["name"] for d in deps]
deps = names(m.get("dependencies", []))
for f in m.get("features", {}).values():
    deps += names(f.get("dependencies", []))
for d in deps:
    if d not in known: errors.append(f"dependency {d} is not one of the mapped vcpkg ports")
for d in ("gtest", "cmocka", "benchmark"):
    if d in deps: errors.append(f"test-only dependency {d} must not be a port dependency")
if errors:
    sys.exit("vcpkg.json: " + "; ".join(errors))
print(f"vcpkg.json: llmkv {m['version']}, dependencies {sorted(set(deps))}")
EOF

lap "portfile.cmake (features: $FEATURES)"
rm -rf "$WORK"; mkdir -p "$WORK"
EXTRA=""
if command -v ccache >/dev/null; then
    EXTRA="-DCMAKE_CXX_COMPILER_LAUNCHER=ccache;-DCMAKE_C_COMPILER_LAUNCHER=ccache"
fi
TRIPLET_ARGS=(-DTARGET_TRIPLET="$TRIPLET")
if [[ "$TRIPLET" == x64-mingw-dynamic ]]; then
    "$ROOT/scripts/stage_windows_deps.sh" "$WORK/deps"
    EXTRA="${EXTRA:+$EXTRA;}-DCMAKE_TOOLCHAIN_FILE=$ROOT/cmake/mingw-w64-x86_64.cmake;-DLLMKV_WIN_DEPS_DIR=$WORK/deps"
    TRIPLET_ARGS+=(-DMIMALLOC_SOURCE_DIR="$WORK/deps/mimalloc")
fi
cmake -DSOURCE_DIR="$ROOT" -DPORT_DIR="$PORT" -DWORK_DIR="$WORK" -DFEATURES="$FEATURES" -DJOBS="$JOBS" \
      "${TRIPLET_ARGS[@]}" -DEXTRA_CONFIGURE_ARGS="$EXTRA" -P "$ROOT/packaging/vcpkg/test/run_portfile.cmake"
PKG="$WORK/packages/llmkv_$TRIPLET"

lap "the installed tree"
bad=0
need=(include/llmkv.h lib/libllmkv.a lib/pkgconfig/llmkv.pc
      share/llmkv/llmkvConfig.cmake share/llmkv/llmkvConfigVersion.cmake share/llmkv/llmkvTargets.cmake
      share/llmkv/usage share/llmkv/copyright)
gone=(lib/cmake debug/include debug/share share/doc share/man share/lintian)
if [[ "$TRIPLET" == x64-mingw-dynamic ]]; then
    need+=(bin/llmkv.dll bin/mimalloc.dll lib/llmkv.dll.a share/llmkv/mimalloc-LICENSE)
    [[ " $FEATURES " == *" tools "* ]] && need+=(tools/llmkv/llmkv.exe tools/llmkv/mimalloc.dll)
else
    need+=(lib/libllmkv.so)
    [[ " $FEATURES " == *" tools "* ]] && need+=(tools/llmkv/llmkv)
    gone+=(bin)
fi
for f in "${need[@]}"; do
    [[ -e "$PKG/$f" ]] || { echo "missing: $f" >&2; bad=1; }
done
# share/doc, share/man, share/lintian: the Debian-only files must stay out of a prefix install.
for d in "${gone[@]}"; do
    [[ ! -e "$PKG/$d" ]] || { echo "left behind: $d" >&2; bad=1; }
done
if grep -rl "$WORK" "$PKG/share/llmkv" "$PKG/lib/pkgconfig"; then
    echo "absolute staging paths in the files above (not relocatable)" >&2; bad=1
fi
(cd "$PKG" && find . -type f -o -type l | LC_ALL=C sort | sed 's|^\./|  |') >&2
[[ $bad -eq 0 ]] || exit 1

lap "consumers from the relocated tree"
INST="$WORK/relocated/installed/$TRIPLET"
mkdir -p "$(dirname "$INST")"
rm -rf "$INST"
mv "$PKG" "$INST"
if [[ "$TRIPLET" == x64-mingw-dynamic ]]; then
    # A C host linked against the import library, with the DLLs copied beside it (how a
    # Windows application ships them), under a private Wine prefix. The CMake consumer needs
    # MinGW builds of utf8proc and xxhash for llmkvConfig.cmake (vcpkg's ports), which the
    # staged dependencies do not include: not run here.
    OUT="$WORK/consumer-mingw"
    mkdir -p "$OUT"
    x86_64-w64-mingw32-gcc-posix -std=c99 -Wall -Werror -DCONSUMER_NAME='"consumer-mingw"' \
        "$ROOT/packaging/consumers/consumer.c" -I"$INST/include" -L"$INST/lib" -lllmkv \
        -o "$OUT/consumer-mingw.exe"
    cp "$INST/bin/"*.dll "$OUT/"
    export WINEPREFIX="$WORK/wineprefix" WINEDEBUG=-all
    [[ -n "$MODEL" ]] && MODEL="$(cd "$(dirname "$MODEL")" && pwd)/$(basename "$MODEL")"
    rc=0
    wine "$OUT/consumer-mingw.exe" ${MODEL:+"$MODEL"} || rc=$?
    [[ $rc -eq 0 || $rc -eq 77 ]] || { echo "consumer-mingw failed ($rc)" >&2; exit 1; }
    if [[ -e "$INST/tools/llmkv/llmkv.exe" ]]; then wine "$INST/tools/llmkv/llmkv.exe" --help >/dev/null; fi
    lap "vcpkg port staging test ($TRIPLET) passed"
    exit $rc
fi
rc=0
cmake -S "$ROOT/packaging/consumers/cmake" -B "$WORK/consumer-cmake" -DCMAKE_PREFIX_PATH="$INST" >/dev/null
cmake --build "$WORK/consumer-cmake" >/dev/null
"$WORK/consumer-cmake/consumer-cmake" ${MODEL:+"$MODEL"} || rc=$?
[[ $rc -eq 0 || $rc -eq 77 ]] || { echo "consumer-cmake failed ($rc)" >&2; exit 1; }
rc2=0
PKG_CONFIG_PATH="$INST/lib/pkgconfig" LD_LIBRARY_PATH="$INST/lib" \
    sh "$ROOT/packaging/consumers/pkgconfig/build.sh" "$WORK/consumer-pc" ${MODEL:+"$MODEL"} || rc2=$?
[[ $rc2 -eq 0 || $rc2 -eq 77 ]] || { echo "consumer-pkgconfig failed ($rc2)" >&2; exit 1; }
if [[ -x "$INST/tools/llmkv/llmkv" ]]; then "$INST/tools/llmkv/llmkv" --help >/dev/null; fi
lap "vcpkg port staging test passed"
[[ $rc -eq 77 || $rc2 -eq 77 ]] && exit 77
exit 0
