#!/usr/bin/env bash
# ptxas resource table of the CUDA kernels, per kernel and architecture: registers, spill
# stores/loads, static shared memory, stack frame, constant bank 0, barriers. Needs nvcc,
# no GPU, and no rebuild flags: it reruns the kernels' nvcc commands of an existing build
# (BUILD_DIR/compile_commands.json, written for llmkv_cuda_kernels by kernels/CMakeLists.txt)
# device-only (-fatbin into a temporary folder) with ptxas -v; the build is not touched.
#
#   tools/cuda-resources.sh [BUILD_DIR]     default BUILD_DIR: build
#
# Writes BUILD_DIR/cuda-resources.md (a markdown table) and prints it. Exits 1 when a hot
# kernel (HOT_KERNELS, an extended regex on the demangled name) spills registers (spill
# stores or loads > 0), 2 on a usage or compile error, 0 otherwise; exits 0 with a message
# when BUILD_DIR has no CUDA module (a CPU-only build).
#
# Environment: JOBS (parallel nvcc runs, default nproc), CUDA_RESOURCE_ARCHS (e.g. "80 90":
# real architectures to compile for instead of the build's own list), HOT_KERNELS.
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
BUILD="${1:-build}"
[[ $BUILD = /* ]] || BUILD="$PWD/$BUILD"
JOBS="${JOBS:-$(nproc)}"
# The kernels of every forward step (kernels/README.md). The GEMMs are cuBLAS (gemm.cu has
# no kernel of ours); per-element kernels (add, swiglu, conversions) are listed but not gated.
HOT_KERNELS="${HOT_KERNELS:-attention_partition_kernel|attention_merge_kernel|rms_norm_kernel|rope_kernel|seal_kernel|dequant_f16_kernel|matvec_q_kernel}"

if [[ ! -f $BUILD/CMakeCache.txt ]]; then
  echo "cuda-resources: $BUILD is not a CMake build directory" >&2
  exit 2
fi
WORK="$(mktemp -d)"
trap 'rm -rf "$WORK"' EXIT

# One "directory<TAB>command" line per kernel source (kernels/*.cu).
if [[ -f $BUILD/compile_commands.json ]] && command -v python3 >/dev/null; then
  python3 - "$BUILD/compile_commands.json" "$ROOT/kernels" >"$WORK/commands" <<'EOF'
import json, os, sys
kernels = os.path.realpath(sys.argv[2])
for e in json.load(open(sys.argv[1])):
    f = os.path.realpath(os.path.join(e["directory"], e["file"]))
    if os.path.dirname(f) == kernels and f.endswith(".cu"):
        cmd = e.get("command") or " ".join(e["arguments"])
        print(e["directory"] + "\t" + cmd)
EOF
elif [[ -f $BUILD/build.ninja ]] && command -v ninja >/dev/null; then
  ninja -C "$BUILD" -t commands llmkv_cuda_kernels 2>/dev/null | grep -E 'nvcc .* -c [^ ]*/kernels/[^ /]+\.cu( |$)' |
    sed "s|^|$BUILD\t|" >"$WORK/commands" || true
else
  : >"$WORK/commands"
fi
if [[ ! -s $WORK/commands ]]; then
  if grep -qs 'llmkv_cuda_kernels' "$BUILD/build.ninja" "$BUILD/Makefile"; then
    echo "cuda-resources: $BUILD builds the CUDA module but no kernel compile command was found" \
         "(reconfigure it: kernels/CMakeLists.txt exports them to compile_commands.json)" >&2
    exit 2
  fi
  echo "cuda-resources: no CUDA module in $BUILD (CPU-only build): skipped"
  exit 0
fi

# Rewrite each command: device code only, into $WORK, with ptxas -v; optionally other archs.
ARCH_FLAGS=""
for a in ${CUDA_RESOURCE_ARCHS:-}; do ARCH_FLAGS+=" --generate-code=arch=compute_$a,code=[sm_$a]"; done
i=0
while IFS=$'\t' read -r dir cmd; do
  i=$((i + 1))
  src=$(grep -oE '[^ ]+\.cu( |$)' <<<"$cmd" | tail -1 | tr -d ' ')
  cmd=$(sed -E -e 's/ -o [^ ]+/ /; s/ -c / /; s/ -M[DT] [^ ]+| -MD( |$)| -MF [^ ]+/ /g' <<<"$cmd")
  if [[ -n $ARCH_FLAGS ]]; then
    cmd=$(sed -E -e 's/ --generate-code(=| )[^ ]+/ /g; s/ -gencode(=| )[^ ]+/ /g; s/ -arch(=| )[^ ]+/ /g' <<<"$cmd")
    cmd+="$ARCH_FLAGS"
  fi
  printf '%s\t%s\t%s\n' "$dir" "$(basename "$src" .cu)" \
    "$cmd -fatbin -Xptxas=-v -o $WORK/$i.fatbin" >>"$WORK/jobs"
done <"$WORK/commands"

echo "cuda-resources: ptxas -v on $(wc -l <"$WORK/jobs") kernel sources (-j$JOBS)${CUDA_RESOURCE_ARCHS:+, archs $CUDA_RESOURCE_ARCHS}" >&2
run_one() {  # dir name command: the ptxas log of one source in $WORK/name.log
  local dir=$1 name=$2 cmd=$3
  set -f  # code=[sm_90] is not a glob
  if ! (cd "$dir" && eval "$cmd") >"$WORK/$name.log" 2>&1; then
    echo "cuda-resources: compiling $name.cu FAILED:" >&2
    tail -20 "$WORK/$name.log" >&2
    return 1
  fi
}
export -f run_one
export WORK
if ! tr '\t\n' '\0\0' <"$WORK/jobs" | xargs -0 -n 3 -P "$JOBS" bash -c 'run_one "$@"' _; then
  exit 2
fi

# ptxas -v, per entry function:
#   ptxas info    : Compiling entry function '<mangled>' for 'sm_90'
#   ptxas info    : Function properties for <mangled>
#       8 bytes stack frame, 4 bytes spill stores, 4 bytes spill loads
#   ptxas info    : Used 128 registers, used 1 barriers, 8 bytes cumulative stack size, 1024 bytes smem, 400 bytes cmem[0]
# (fields that are zero may be left out; "Function properties" also appear for called
# non-inlined device functions and are then ignored).
for f in "$WORK"/*.log; do
  awk -v src="$(basename "$f" .log).cu" '
    /Compiling entry function/ {
      match($0, /function .[^'\'']+/); entry = substr($0, RSTART + 10, RLENGTH - 10)
      match($0, /for .sm_[0-9a-z]+/); arch = substr($0, RSTART + 5, RLENGTH - 5)
      stack = 0; ss = 0; sl = 0; props = ""; next }
    /Function properties for/ { props = $NF; next }
    /bytes stack frame/ {
      if (props == entry) { stack = $1; ss = $5; sl = $9 }
      next }
    /Used [0-9]+ registers/ && entry != "" {
      regs = 0; bars = 0; smem = 0; cmem = "-"
      n = split($0, part, ",")
      for (k = 1; k <= n; ++k) {
        if (part[k] ~ /registers/) { match(part[k], /[0-9]+/); regs = substr(part[k], RSTART, RLENGTH) }
        else if (part[k] ~ /barriers/) { match(part[k], /[0-9]+/); bars = substr(part[k], RSTART, RLENGTH) }
        else if (part[k] ~ /bytes smem/) { match(part[k], /[0-9]+/); smem = substr(part[k], RSTART, RLENGTH) }
        else if (part[k] ~ /cmem\[0\]/) { match(part[k], /[0-9]+/); cmem = substr(part[k], RSTART, RLENGTH) }
      }
      print src "\t" arch "\t" entry "\t" regs "\t" ss "\t" sl "\t" smem "\t" stack "\t" cmem "\t" bars
      entry = "" }' "$f"
done >"$WORK/rows"
if [[ ! -s $WORK/rows ]]; then
  echo "cuda-resources: ptxas reported no kernel (only virtual architectures in the build?)" >&2
  exit 2
fi

FILT=c++filt
command -v cu++filt >/dev/null && FILT=cu++filt
# Readable names: demangled, without the namespaces and the parameter list.
cut -f3 "$WORK/rows" | "$FILT" |
  sed -E -e 's/^void //; s/llmkv::cuda:://g; s/\(anonymous namespace\):://g; s/\(.*\)$//; s/([0-9]+)u\b/\1/g' \
  >"$WORK/names"
paste "$WORK/rows" "$WORK/names" | sort -t$'\t' -k1,1 -k11,11 -k2,2 >"$WORK/table"

OUTFILE="$BUILD/cuda-resources.md"
NVCC_VERSION=$(grep -oE 'release [0-9.]+' <<<"$(/usr/local/cuda/bin/nvcc --version 2>/dev/null || nvcc --version 2>/dev/null || true)" | head -1)
SPILLERS=0
{
  echo "| source | kernel | arch | regs | spill st/ld (B) | smem static (B) | stack (B) | cmem[0] (B) | barriers | hot |"
  echo "| --- | --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- |"
  while IFS=$'\t' read -r src arch _ regs ss sl smem stack cmem bars name; do
    hot=""
    if grep -qE "$HOT_KERNELS" <<<"$name"; then
      hot="yes"
      if (( ss > 0 || sl > 0 )); then hot="**SPILLS**"; SPILLERS=$((SPILLERS + 1)); fi
    fi
    echo "| $src | \`$name\` | $arch | $regs | $ss / $sl | $smem | $stack | $cmem | $bars | $hot |"
  done <"$WORK/table"
} >"$OUTFILE"
cat "$OUTFILE"
echo
echo "cuda-resources: $(wc -l <"$WORK/table") kernel builds, nvcc ${NVCC_VERSION#release }, table in $OUTFILE"
total_spill=$(awk -F'\t' '$5 > 0 || $6 > 0' "$WORK/table" | wc -l)
echo "cuda-resources: kernels with spills: $total_spill (hot: $SPILLERS; hot = /$HOT_KERNELS/)"
if (( SPILLERS > 0 )); then
  echo "cuda-resources: FAILED: a hot kernel spills registers" >&2
  exit 1
fi
