#!/usr/bin/env bash
# Clean-system install test of the llmkv Debian packages.
#
# Creates a minimal Debian root (debootstrap --variant=minbase, the suite and mirror this
# machine's apt uses), serves the .debs to it as a local apt repository, installs a compiler,
# CMake and pkg-config there, records every file, then `apt-get install libllmkv-dev
# llmkv-tools` (apt resolves libllmkv0, libutf8proc-dev, libxxhash-dev, ...), and inside it:
#   - checks what each package holds (libllmkv0: the SONAME link and the library only);
#   - builds packaging/consumers/consumer.c with `pkg-config --cflags --libs llmkv` and with
#     CMake find_package(llmkv) + llmkv::llmkv, and runs both on the real model (they print the
#     generated text); runs `llmkv run` from llmkv-tools;
#   - `apt-get purge --autoremove` the packages and checks that the file list is the one
#     recorded before the install (nothing left behind) and dpkg knows no llmkv package.
#
# Usage: scripts/package_install_test.sh DEB_DIR [MODEL]
#   MODEL defaults to $LLMKV_MODEL; without one the consumers report SKIP (exit 77) and the
#   test still checks install and removal, then exits 77.
# Environment: LLMKV_CHROOT_CACHE=FILE.tar  reuse (or create) a tarball of the bootstrapped
#   root with the toolchain installed (saves the debootstrap and toolchain download);
#   LLMKV_CHROOT_SUITE / LLMKV_CHROOT_MIRROR override the suite and mirror.
# Needs root, debootstrap, dpkg-dev (dpkg-scanpackages) and the network to the Debian mirror.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
DEBS="$(cd "${1:?usage: package_install_test.sh DEB_DIR [MODEL]}" && pwd)"
MODEL="${2:-${LLMKV_MODEL:-}}"
[[ $(id -u) -eq 0 ]] || { echo "package_install_test: needs root (debootstrap, chroot)" >&2; exit 1; }
for t in debootstrap dpkg-scanpackages chroot mount; do
    command -v "$t" >/dev/null || { echo "package_install_test: $t missing" >&2; exit 1; }
done

# The suite and mirror this machine's apt uses (deb822 or one-line sources).
src_suite="" src_mirror=""
if [[ -f /etc/apt/sources.list.d/debian.sources ]]; then
    src_mirror="$(awk '/^URIs:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
    src_suite="$(awk '/^Suites:/{print $2; exit}' /etc/apt/sources.list.d/debian.sources)"
elif [[ -f /etc/apt/sources.list ]]; then
    read -r _ src_mirror src_suite _ < <(grep -m1 '^deb ' /etc/apt/sources.list) || true
fi
SUITE="${LLMKV_CHROOT_SUITE:-${src_suite:-bookworm}}"
MIRROR="${LLMKV_CHROOT_MIRROR:-${src_mirror:-http://deb.debian.org/debian}}"
TOOLCHAIN=(gcc libc6-dev make cmake pkgconf)
PKGS=(libllmkv-dev llmkv-tools)

T0=$SECONDS
lap() { echo "== [$((SECONDS - T0)) s] $*" >&2; }
R="$(mktemp -d /var/tmp/llmkv-chroot.XXXXXX)"
mounted=()
cleanup() {
    local i
    for ((i = ${#mounted[@]} - 1; i >= 0; i--)); do umount -l "${mounted[$i]}" 2>/dev/null || true; done
    rm -rf --one-file-system "$R"
}
trap cleanup EXIT
in_root() { chroot "$R" /usr/bin/env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root LANG=C.UTF-8 \
    DEBIAN_FRONTEND=noninteractive "$@"; }

if [[ -n "${LLMKV_CHROOT_CACHE:-}" && -f "$LLMKV_CHROOT_CACHE" ]]; then
    lap "unpacking the cached root $LLMKV_CHROOT_CACHE"
    tar -xf "$LLMKV_CHROOT_CACHE" -C "$R"
else
    lap "debootstrap --variant=minbase $SUITE $MIRROR"
    debootstrap --variant=minbase "$SUITE" "$R" "$MIRROR" > "$R.debootstrap.log" 2>&1 \
        || { tail -20 "$R.debootstrap.log" >&2; exit 1; }
    rm -f "$R.debootstrap.log"
fi
mount -t proc proc "$R/proc"; mounted+=("$R/proc")
mkdir -p "$R/dev/pts"; mount -t devpts devpts "$R/dev/pts"; mounted+=("$R/dev/pts")
cp /etc/resolv.conf "$R/etc/resolv.conf" 2>/dev/null || true
if [[ ! -f "$R/.llmkv-toolchain" ]]; then
    lap "apt-get install ${TOOLCHAIN[*]} (the consumers' build tools)"
    in_root apt-get update -qq
    in_root apt-get install -y -qq --no-install-recommends "${TOOLCHAIN[@]}" > /dev/null
    in_root apt-get clean
    touch "$R/.llmkv-toolchain"
    if [[ -n "${LLMKV_CHROOT_CACHE:-}" ]]; then
        tar -cf "$LLMKV_CHROOT_CACHE" -C "$R" --one-file-system . && lap "saved the root to $LLMKV_CHROOT_CACHE"
    fi
fi

# The local repository: the .debs (not the CUDA module's: its CUDA dependencies live in
# NVIDIA's repository, which this root does not have) and a Packages index.
mkdir -p "$R/srv/llmkv"
for deb in "$DEBS"/*.deb; do
    case "$(basename "$deb")" in libllmkv-cuda*) continue ;; esac
    cp "$deb" "$R/srv/llmkv/"
done
(cd "$R/srv/llmkv" && dpkg-scanpackages --multiversion . /dev/null > Packages 2>/dev/null)
echo "deb [trusted=yes] file:/srv/llmkv ./" > "$R/etc/apt/sources.list.d/llmkv.list"
in_root apt-get update -qq

# The file list before (what must come back after the purge).
snapshot() {
    in_root find / -xdev \( -path /proc -o -path /srv -o -path /tmp -o -path /root -o -path /var/cache \
        -o -path /var/lib/apt -o -path /var/lib/dpkg -o -path /var/log -o -path /etc/ld.so.cache \) -prune \
        -o -print | LC_ALL=C sort
}
snapshot > "$R/srv/before.txt"

lap "apt-get install ${PKGS[*]}"
in_root apt-get install -y --no-install-recommends "${PKGS[@]}" 2>&1 | grep -E '^(Setting up|E:)' >&2
for p in libllmkv0 libllmkv-dev llmkv-tools; do
    in_root dpkg-query -W -f='${Package} ${Version} ${Status}\n' "$p" >&2
done
# libllmkv0 holds the library under its SONAME and nothing else (besides its docs).
so_files="$(in_root dpkg -L libllmkv0 | grep -v '^/usr/share/doc' | while read -r f; do
    [[ -d "$R$f" ]] || echo "$f"; done | LC_ALL=C sort | xargs -n1 basename | paste -sd' ')"
want="libllmkv.so.0 libllmkv.so.$(dpkg-deb -f "$(ls "$DEBS"/libllmkv0_*.deb | head -1)" Version | cut -d- -f1)"
if [[ "$so_files" != "$want" ]]; then
    echo "package_install_test: libllmkv0 holds '$so_files', expected '$want'" >&2; exit 1
fi
echo "libllmkv0 files: $so_files" >&2

# The consumers and the command line, on the real model.
mkdir -p "$R/tmp/consumers"
cp -r "$ROOT/packaging/consumers/." "$R/tmp/consumers/"
MODEL_IN=""
if [[ -n "$MODEL" && -f "$MODEL" ]]; then
    touch "$R/tmp/model.gguf"
    mount --bind -o ro "$MODEL" "$R/tmp/model.gguf"; mounted+=("$R/tmp/model.gguf")
    MODEL_IN=/tmp/model.gguf
fi
rc_all=0
run_consumer() {  # run_consumer NAME COMMAND...
    local rc=0
    lap "$1"
    in_root "${@:2}" || rc=$?
    if [[ $rc -eq 77 ]]; then echo "$1: skipped (no model)" >&2; rc_all=77
    elif [[ $rc -ne 0 ]]; then echo "$1: FAILED ($rc)" >&2; exit 1; fi
}
run_consumer "consumer (pkg-config --cflags --libs llmkv)" \
    sh /tmp/consumers/pkgconfig/build.sh /tmp/consumers/out-pc $MODEL_IN
run_consumer "consumer (CMake find_package(llmkv), llmkv::llmkv)" sh -c \
    "cmake -S /tmp/consumers/cmake -B /tmp/consumers/out-cmake >/dev/null && cmake --build /tmp/consumers/out-cmake >/dev/null && /tmp/consumers/out-cmake/consumer-cmake $MODEL_IN"
if [[ -n "$MODEL_IN" ]]; then
    run_consumer "llmkv run (llmkv-tools)" llmkv run -m "$MODEL_IN" -p "The capital of France is" -n 12 -t 2
fi
in_root llmkv --help > /dev/null
in_root man -w llmkv > /dev/null 2>&1 || test -f "$R/usr/share/man/man1/llmkv.1.gz"
# Remove the consumers' outputs before comparing; the mount point of the model too.
if [[ -n "$MODEL_IN" ]]; then umount "$R/tmp/model.gguf"; unset 'mounted[-1]'; fi
rm -rf "$R/tmp/consumers" "$R/tmp/model.gguf"

lap "apt-get purge --autoremove ${PKGS[*]} libllmkv0"
in_root apt-get purge -y --autoremove "${PKGS[@]}" libllmkv0 2>&1 | grep -E '^(Removing|Purging|E:)' >&2
snapshot > "$R/srv/after.txt"
left="$(in_root dpkg-query -W -f='${Package} ${Status}\n' 2>/dev/null | grep -i llmkv || true)"
if [[ -n "$left" ]]; then echo "package_install_test: dpkg still knows: $left" >&2; exit 1; fi
if ! diff -u "$R/srv/before.txt" "$R/srv/after.txt" >&2; then
    echo "package_install_test: files differ after the purge (above)" >&2; exit 1
fi
lap "clean install, both consumers, removal: passed ($(wc -l < "$R/srv/before.txt") paths compared)"
exit $rc_all
