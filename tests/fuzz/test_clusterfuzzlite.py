"""ClusterFuzzLite's build of the fuzz targets (.clusterfuzzlite/build.sh), run as OSS-Fuzz's
`compile` runs it, without Docker: `bash -eux $SRC/build.sh` in the source folder, with the
variables base-clang and base-builder set for libFuzzer and ASan (CC=clang, CXX=clang++,
CFLAGS and CXXFLAGS with -O1 -fno-omit-frame-pointer -gline-tables-only, the sanitizer flags
and -fsanitize=fuzzer-no-link, LIB_FUZZING_ENGINE=-fsanitize=fuzzer, SANITIZER=address,
FUZZING_ENGINE=libfuzzer) and SRC, WORK and OUT in a temporary folder, which is removed
afterwards (the build's log tail is in the failure message when build.sh fails).

Checked: $OUT holds each target tests/fuzz/meson.build declares, and nothing needs a shared
library that the runner image lacks (libaio, say); every compile command carries the
builder's flags; each target's seed corpus zip holds exactly its checked-in seeds, and its
options file is libFuzzer's; each target runs over its unzipped seeds (`-runs=0`) and exits
0, having read every seed. Also the image's files: project.yaml's language, the Dockerfile's
base image and build.sh's place, and that a sanitizer or engine the build does not make is
refused at once.

OSS-Fuzz's CXXFLAGS also have -stdlib=libc++, with a libFuzzer built against its own libc++;
Debian's libFuzzer is built against libstdc++, so here C++ stays on libstdc++. A -Wno-error=
flag of base-clang that this clang does not know (clang 14 has no vla-cxx-extension) is left
out: meson's compile checks make an unknown warning option an error. The build takes about
1.5 minutes on 2 cores (the whole project, instrumented).
"""

from __future__ import annotations

import configparser
import functools
import json
import os
import re
import shutil
import subprocess
import tempfile
import zipfile
from pathlib import Path
from typing import Iterator, NamedTuple

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
CFL = ROOT / ".clusterfuzzlite"
CORPUS = ROOT / "tests" / "fuzz" / "corpus"
# base-clang's CFLAGS, then base-builder's SANITIZER_FLAGS_address and COVERAGE_FLAGS.
CFLAGS = ("-O1 -fno-omit-frame-pointer -gline-tables-only -Wno-error=incompatible-function-pointer-types "
          "-Wno-error=int-conversion -Wno-error=deprecated-declarations -Wno-error=implicit-function-declaration "
          "-Wno-error=implicit-int -Wno-error=unknown-warning-option -Wno-error=vla-cxx-extension "
          "-DFUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION "
          "-fsanitize=address -fsanitize-address-use-after-scope -fsanitize=fuzzer-no-link")
# What the runner image has: a target must need no other shared library.
RUNNER_LIBS = re.compile(r"^(linux-vdso|libc|libm|libdl|libpthread|librt|libgcc_s|libstdc\+\+|libc\+\+|"
                         r"libc\+\+abi|ld-linux-x86-64)\.so")
RUN_GUARD_S = 600


def declared_targets() -> list[str]:
    """The targets of tests/fuzz/meson.build's fuzz_targets dictionary."""
    text = (ROOT / "tests" / "fuzz" / "meson.build").read_text(encoding="utf-8")
    body = re.search(r"fuzz_targets\s*=\s*\{(.*?)\n\}", text, re.S)
    assert body, "tests/fuzz/meson.build has no fuzz_targets = {...}"
    return sorted(re.findall(r"^\s*'([A-Za-z0-9_]+)'\s*:", body.group(1), re.M))


TARGETS = declared_targets()


class Built(NamedTuple):
    out: Path
    work: Path
    log: str


def clang_knows(flag: str) -> bool:
    r = subprocess.run(["clang++", "-Werror=unknown-warning-option", flag, "-fsyntax-only", "-x", "c++", "-"],
                       input="", capture_output=True, text=True, check=False)
    return r.returncode == 0


@functools.lru_cache(maxsize=None)
def cflags() -> str:
    """CFLAGS without the warning options this clang does not know."""
    return " ".join(f for f in CFLAGS.split() if not f.startswith("-W") or clang_knows(f))


def builder_env(tmp: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CFLAGS", "CXXFLAGS", "LDFLAGS"))}
    flags = cflags()
    env.update(CC="clang", CXX="clang++", CCC="clang++", CFLAGS=flags, CXXFLAGS=flags,
               LIB_FUZZING_ENGINE="-fsanitize=fuzzer", SANITIZER="address", FUZZING_ENGINE="libfuzzer",
               ARCHITECTURE="x86_64", FUZZING_LANGUAGE="c++",
               SRC=str(tmp / "src"), WORK=str(tmp / "work"), OUT=str(tmp / "out"))
    return env


def need_libfuzzer(tmp: Path) -> None:
    """Skip unless clang links a libFuzzer target here (./hvstor setup installs it)."""
    if not shutil.which("clang++") or not shutil.which("meson") or not shutil.which("zip"):
        pytest.skip("clang++, meson or zip missing: run ./hvstor setup")
    src = tmp / "probe.cc"
    src.write_text('#include <cstddef>\n#include <cstdint>\n'
                   'extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t) { return 0; }\n')
    r = subprocess.run(["clang++", "-fsanitize=fuzzer,address", str(src), "-o", str(tmp / "probe")],
                       capture_output=True, text=True, check=False)
    if r.returncode != 0:
        pytest.skip(f"clang cannot link a libFuzzer target (libclang-rt-dev): {r.stderr[-300:]}")


@pytest.fixture(scope="module")
def built() -> Iterator[Built]:
    """build.sh run once, as compile runs it: copied to $SRC, started in the source folder.
    Its folder (the meson build, $OUT) is removed when the module's tests are done."""
    tmp = Path(tempfile.mkdtemp(prefix="hvstor-cflite."))
    try:
        need_libfuzzer(tmp)
        for d in ("src", "work", "out"):
            (tmp / d).mkdir()
        shutil.copy(CFL / "build.sh", tmp / "src" / "build.sh")
        r = subprocess.run(["bash", "-eux", str(tmp / "src" / "build.sh")], cwd=ROOT, env=builder_env(tmp),
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=3000, check=False)
        assert r.returncode == 0, f"build.sh failed (exit {r.returncode}):\n{r.stdout[-6000:]}"
        yield Built(tmp / "out", tmp / "work", r.stdout)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def test_image_files() -> None:
    project = yaml.safe_load((CFL / "project.yaml").read_text(encoding="utf-8"))
    assert project.get("language") == "c++"
    docker = (CFL / "Dockerfile").read_text(encoding="utf-8")
    assert re.search(r"^FROM gcr\.io/oss-fuzz-base/base-builder(:\S+)?\s*$", docker, re.M), docker
    assert re.search(r"^COPY \.clusterfuzzlite/build\.sh \$SRC/\s*$", docker, re.M), docker
    assert re.search(r"^WORKDIR \$SRC/hv-storvsc\s*$", docker, re.M), docker


@pytest.mark.parametrize("env", [{"SANITIZER": "undefined"}, {"SANITIZER": "memory"},
                                 {"FUZZING_ENGINE": "afl", "LIB_FUZZING_ENGINE": "/usr/lib/libFuzzingEngine.a"}],
                         ids=lambda e: "-".join(f"{k}={v}" for k, v in e.items()))
def test_refuses_what_it_does_not_build(env: dict[str, str]) -> None:
    with tempfile.TemporaryDirectory(prefix="hvstor-cflite.") as t:
        tmp = Path(t)
        for d in ("src", "work", "out"):
            (tmp / d).mkdir()
        r = subprocess.run(["bash", str(CFL / "build.sh")], cwd=ROOT, env={**builder_env(tmp), **env},
                           capture_output=True, text=True, timeout=60, check=False)
        assert r.returncode != 0 and "build.sh: " in r.stderr, r.stderr
        assert not list((tmp / "work").iterdir()), "it configured a build before refusing"


def test_every_target_built(built: Built) -> None:
    made = sorted(p.name for p in built.out.iterdir() if p.is_file() and os.access(p, os.X_OK))
    assert made == TARGETS, f"$OUT has {made}, tests/fuzz/meson.build declares {TARGETS}"


def test_builder_flags_in_every_compile(built: Built) -> None:
    dbs = list(built.work.glob("*/compile_commands.json"))
    assert len(dbs) == 1, f"one meson build folder under $WORK, found {dbs}"
    commands = json.loads(dbs[0].read_text(encoding="utf-8"))
    assert commands
    for c in commands:
        missing = [f for f in cflags().split() if f not in c["command"].split()]
        assert not missing, f"{c['file']}: compiled without {missing}"


@pytest.mark.parametrize("target", TARGETS)
def test_needs_only_the_runners_libraries(built: Built, target: str) -> None:
    r = subprocess.run(["ldd", str(built.out / target)], capture_output=True, text=True, check=True)
    libs = [ln.split()[0] for ln in r.stdout.splitlines() if ln.strip()]
    extra = [lib for lib in libs if not RUNNER_LIBS.match(os.path.basename(lib))]
    assert not extra, f"{target} needs {extra}, which the runner image does not have (link them statically)"
    syms = subprocess.run(["nm", str(built.out / target)], capture_output=True, text=True, check=True).stdout
    assert "__asan_init" in syms and "LLVMFuzzerRunDriver" in syms, f"{target}: no ASan or no libFuzzer in it"


@pytest.mark.parametrize("target", TARGETS)
def test_seed_corpus_and_options(built: Built, target: str) -> None:
    seeds = sorted(p for p in (CORPUS / target).iterdir() if p.is_file())
    with zipfile.ZipFile(built.out / f"{target}_seed_corpus.zip") as z:
        assert sorted(z.namelist()) == [p.name for p in seeds]
        for p in seeds:
            assert z.read(p.name) == p.read_bytes(), f"{target}_seed_corpus.zip: {p.name} differs from its seed"
    opts = configparser.ConfigParser()
    opts.read(built.out / f"{target}.options")
    assert opts.sections() == ["libfuzzer"], f"{target}.options: {opts.sections()}"
    assert all(re.fullmatch(r"[0-9]+", v) for v in opts["libfuzzer"].values())


@pytest.mark.parametrize("target", TARGETS)
def test_target_runs_over_its_seeds(built: Built, target: str) -> None:
    corpus = built.out.parent / "corpora" / target
    with zipfile.ZipFile(built.out / f"{target}_seed_corpus.zip") as z:
        z.extractall(corpus)
        n = len(z.namelist())
    r = subprocess.run([str(built.out / target), "-runs=0", str(corpus)], stdout=subprocess.PIPE,
                       stderr=subprocess.STDOUT, text=True, timeout=RUN_GUARD_S, check=False)
    assert r.returncode == 0, f"{target} over its seeds: exit {r.returncode}\n{r.stdout[-4000:]}"
    found = re.search(r"INFO:\s+([0-9]+) files found in", r.stdout)
    assert found and int(found.group(1)) == n, f"{target} read {found and found.group(1)} of {n} seeds\n{r.stdout}"
    assert "INITED" in r.stdout, r.stdout
