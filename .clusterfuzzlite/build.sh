#!/bin/bash -eu
# ClusterFuzzLite (and OSS-Fuzz) build script: every libFuzzer target of tests/fuzz, built
# with the compiler and flags the builder passes ($CC, $CXX, $CFLAGS, $CXXFLAGS,
# $LIB_FUZZING_ENGINE), into $OUT, each with its checked-in seeds as
# $OUT/TARGET_seed_corpus.zip and its libFuzzer options as $OUT/TARGET.options.
#
# Runs in the project's source folder (the image's WORKDIR, $SRC/hv-storvsc); the meson
# build folder goes to $WORK. The targets are built the way ./hvstor fuzz builds them
# (meson.build's -Dfuzz=true path: libFuzzer's coverage instrumentation in every layer,
# tests/fuzz/meson.build's targets), with the builder's flags in place of the project's own
# optimisation and debug settings (--buildtype=plain), warnings not fatal (a newer clang
# warns about more), and ASan only: the builder's checks refuse a second sanitizer in an
# address build (./hvstor fuzz and ./hvstor test add UBSan). Only libFuzzer with ASan:
# tests/fuzz/meson.build links each target with -fsanitize=fuzzer.
# tests/fuzz/test_clusterfuzzlite.py runs this script as the builder does; docs/fuzzing.md.
set -euo pipefail

die() { echo "build.sh: $*" >&2; exit 1; }

: "${SRC:?}" "${WORK:?}" "${OUT:?}" "${CC:?}" "${CXX:?}" "${LIB_FUZZING_ENGINE:?}"
[ "${SANITIZER:-address}" = address ] ||
  die "SANITIZER=$SANITIZER: only address is built (-Dfuzz=true needs ASan in every layer)"
[ "${FUZZING_ENGINE:-libfuzzer}" = libfuzzer ] && [ "$LIB_FUZZING_ENGINE" = -fsanitize=fuzzer ] ||
  die "FUZZING_ENGINE=${FUZZING_ENGINE:-} LIB_FUZZING_ENGINE=$LIB_FUZZING_ENGINE: only libFuzzer (-fsanitize=fuzzer)"
[ -f meson.build ] && grep -q "^project('hv-storvsc'" meson.build ||
  die "run me in hv-storvsc's source folder (the image's WORKDIR), not $PWD"

BUILD=$WORK/hv-storvsc-fuzz
rm -rf "$BUILD"
# Meson takes CC, CXX, CFLAGS and CXXFLAGS from the environment (the flags for linking too).
meson setup "$BUILD" . --buildtype=plain -Dwerror=false -Dtests=false -Dfuzz=true \
  -Db_sanitize=address -Db_lundef=false

# The targets are the executables tests/fuzz/meson.build declares.
targets=$(ninja -C "$BUILD" -t targets all | sed -n 's#^tests/fuzz/\([A-Za-z0-9_]*\): cpp_LINKER.*#\1#p' | sort -u)
[ -n "$targets" ] || die "no fuzz target in $BUILD (tests/fuzz/meson.build)"
# shellcheck disable=SC2086  # one word per target
ninja -C "$BUILD" $(printf 'tests/fuzz/%s ' $targets)

for t in $targets; do
  cp "$BUILD/tests/fuzz/$t" "$OUT/$t"
  rm -f "$OUT/${t}_seed_corpus.zip"
  if [ -d "tests/fuzz/corpus/$t" ]; then
    zip -q -j "$OUT/${t}_seed_corpus.zip" "tests/fuzz/corpus/$t"/*
  fi
  # What ./hvstor fuzz gives each target (tests/fuzz/fuzz.py): a minute per input (the
  # threaded targets wait for their workers), 2 GB.
  printf '[libfuzzer]\ntimeout = 60\nrss_limit_mb = 2048\n' > "$OUT/$t.options"
  echo "built $OUT/$t"
done
