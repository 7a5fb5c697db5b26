#!/usr/bin/env bash
# Fails when a C/C++/CUDA file of the project differs from what clang-format (Debian's, with
# the root .clang-format) makes of it. With --fix, formats those files in place instead.
# The files: every tracked .c/.h/.cpp/.cu/.cuh under src/, kernels/, loader/, tools/, bench/,
# fuzz/, tests/ and examples/ (not fixtures or fuzz corpora). Not include/: the public headers
# are the C API contract, laid out by hand, and read line by line by the ABI checker
# (packaging/) and the bindings' generators, which expect each #define on one line.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
CF="${CLANG_FORMAT:-clang-format}"
command -v "$CF" >/dev/null || { echo "check_format: $CF not found (Debian package clang-format)" >&2; exit 1; }
mapfile -t files < <(git ls-files -- src kernels loader tools bench fuzz tests examples |
    grep -E '\.(c|h|cpp|cu|cuh)$' | grep -v -E '^(tests/fixtures|fuzz/corpus)/')
if [[ "${1:-}" == "--fix" ]]; then
    "$CF" -i "${files[@]}"
    exit 0
fi
bad=()
for f in "${files[@]}"; do
    if ! "$CF" --dry-run -Werror "$f" >/dev/null 2>&1; then bad+=("$f"); fi
done
if [[ ${#bad[@]} -gt 0 ]]; then
    echo "check_format: ${#bad[@]} of ${#files[@]} files differ from clang-format ($("$CF" --version)):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    echo "check_format: scripts/check_format.sh --fix formats them" >&2
    exit 1
fi
echo "check_format: ${#files[@]} files match clang-format ($("$CF" --version))"
