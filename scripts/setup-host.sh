#!/usr/bin/env bash
# Installs the Debian packages hvstor needs. Idempotent: does nothing when all are present.
# Trixie (Debian 13) is added at low priority for meson >= 1.5 (QEMU 10), QEMU's source
# package and the trixie guest kernel; nothing else moves to trixie.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

# Build tools for our own code and for QEMU, guest tooling, firmware.
PKGS=(
  build-essential g++ pkg-config ninja-build python3 python3-venv git
  libgtest-dev libgmock-dev libaio-dev libbenchmark-dev
  libglib2.0-dev libpixman-1-dev libslirp-dev zlib1g-dev libfdt-dev
  flex bison python3-tomli
  # the Python tooling's tests (pytest) and its type checker (tests/lint/typecheck.py)
  python3-pytest mypy
  # the CI recipes' YAML test (tests/docs) and its stubs for mypy; zip for the seed corpora
  # of ClusterFuzzLite's build.sh (tests/fuzz/test_clusterfuzzlite.py)
  python3-yaml python3-typeshed zip
  seabios qemu-system-data ipxe-qemu
  busybox-static cpio zstd xz-utils kmod dpkg-dev
  gnuplot-nox
  # qemu-img, for the qcow2 images of the boot tests (tests/functional/test_drive.py)
  qemu-utils
  # tests/fuzz: clang, its sanitizer and libFuzzer runtimes (libclang-rt-dev pulls in
  # libclang-rt-14-dev, which ships libclang_rt.fuzzer-x86_64.a for bookworm's clang 14),
  # and llvm-profdata/llvm-cov for ./hvstor fuzz --coverage.
  clang libclang-rt-dev llvm
)

apt_sources_ready() {
  [ -f /etc/apt/sources.list.d/hvstor-trixie.sources ] && [ -f /etc/apt/preferences.d/hvstor-trixie ]
}

add_trixie_sources() {
  # Derive the mirror from the machine's own apt configuration: never name a host here.
  local src uris keyring
  src=$(ls /etc/apt/sources.list.d/*.sources 2>/dev/null | head -n 1 || true)
  if [ -n "$src" ]; then
    uris=$(awk '/^URIs:/ {print $2; exit}' "$src")
    keyring=$(awk '/^Signed-By:/ {print $2; exit}' "$src")
  else
    uris=$(awk '$1=="deb" && $0 !~ /security/ {for(i=2;i<=NF;i++) if ($i ~ /^[a-z]+:\/\//) {print $i; exit}}' /etc/apt/sources.list)
  fi
  [ -n "$uris" ] || die "cannot find a Debian mirror in the apt configuration"
  keyring=${keyring:-/usr/share/keyrings/debian-archive-keyring.gpg}
  log "adding trixie (binary + source) from the configured mirror, pinned low"
  cat > /etc/apt/sources.list.d/hvstor-trixie.sources <<EOS
# Added by hv-storvsc: QEMU 10 source, meson >= 1.5, trixie guest kernel.
Types: deb deb-src
URIs: $uris
Suites: trixie
Components: main
Signed-By: $keyring
EOS
  cat > /etc/apt/preferences.d/hvstor-trixie <<'EOS'
Package: *
Pin: release n=trixie
Pin-Priority: 100
EOS
  rm -f "$HVSTOR_CACHE/.apt-updated"
}

missing_pkgs() {
  local p
  for p in "${PKGS[@]}"; do
    dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' || echo "$p"
  done
}

meson_ok() {
  command -v meson >/dev/null && dpkg --compare-versions "$(meson --version)" ge 1.5
}

main() {
  apt_sources_ready || { need_root; add_trixie_sources; }
  local miss
  miss=$(missing_pkgs | tr '\n' ' ')
  if [ -n "${miss// }" ] || ! meson_ok; then
    need_root
    export DEBIAN_FRONTEND=noninteractive
    if [ ! -f "$HVSTOR_CACHE/.apt-updated" ]; then
      run_logged "apt-get update" "$HVSTOR_CACHE/apt-update.log" apt-get update
      touch "$HVSTOR_CACHE/.apt-updated"
    fi
    [ -z "${miss// }" ] || run_logged "installing: $miss" "$HVSTOR_CACHE/apt-install.log" \
      apt-get install -y --no-install-recommends $miss
    meson_ok || run_logged "installing meson from trixie" "$HVSTOR_CACHE/apt-meson.log" \
      apt-get install -y --no-install-recommends -t trixie meson
  fi
  meson_ok || die "meson >= 1.5 is required (have $(meson --version 2>/dev/null || echo none))"
}
main "$@"
