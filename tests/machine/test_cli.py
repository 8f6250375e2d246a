"""./hvstor boot as a user meets it: --help builds nothing, QEMU= is the QEMU it boots, the
command's output comes as the guest prints it, and bad arguments are refused before any
boot. The QEMU is tests/machine/fake_qemu.py playing a scripted guest."""

from __future__ import annotations

import json
import os
import signal
import subprocess
from typing import Any, List

import pytest
from conftest import FAKE_QEMU, READY, ROOT, qemu_python_or_skip

HVSTOR = os.path.join(ROOT, "hvstor")


def test_help_builds_nothing(tmp_path: Any) -> None:
    """Before, ./hvstor boot started the QEMU build (10-15 minutes) before reading its
    options, even for --help."""
    cache = tmp_path / "cache"
    env = dict(os.environ, HVSTOR_CACHE=str(cache))
    env.pop("QEMU", None)
    for args in (["boot", "--help"], ["help"], ["run", "--help"], ["test", "--help"]):
        r = subprocess.run([HVSTOR, *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, check=False)
        assert r.returncode == 0, (args, r.stdout)
        assert "usage" in r.stdout.lower(), (args, r.stdout)
    built = sorted(os.listdir(cache)) if cache.exists() else []
    assert not [d for d in built if d.startswith(("qemu", "build", "guest"))], built


def test_help_names_every_boot_option() -> None:
    """./hvstor help lists the options of ./hvstor boot that the docs use."""
    r = subprocess.run([HVSTOR, "help"], stdout=subprocess.PIPE, text=True, check=True)
    for opt in ("--kernel", "--modules", "--ko", "--vcpus", "--mem", "--controllers", "--disk", "--cmd",
                "--append", "--timeout", "--silence", "--log", "--results", "--qmp"):
        assert opt in r.stdout, opt


def test_bad_arguments_are_refused_before_a_boot(tmp_path: Any) -> None:
    env = dict(os.environ, QEMU="/nonexistent/qemu")
    for args, want in ((["--vcpus", "0"], "positive number"), (["--disk", "nokey"], "key=value"),
                       (["--disk", "file=/no/such/image"], "no such file"),
                       (["--kernel", "/no/bzImage"], "neither debian-6.1 nor debian-6.12 nor a file"),
                       (["--results", str(tmp_path)], "--results goes with --cmd"),
                       (["--disk", "backend=null,size=1G,controller=3"], "controller 3 does not exist")):
        r = subprocess.run([HVSTOR, "boot", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, check=False)
        assert r.returncode == 2 and want in r.stdout, (args, r.stdout)


def boot_with_fake(tmp_path: Any, steps: List[Any], *args: str) -> "subprocess.Popen[str]":
    qemu_python_or_skip()
    script = tmp_path / "script.json"
    script.write_text(json.dumps(steps))
    env = dict(os.environ, QEMU=FAKE_QEMU, HVSTOR_FAKE_QEMU_SCRIPT=str(script))
    return subprocess.Popen([HVSTOR, "boot", *args], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_qemu_from_the_environment_and_streamed_output(tmp_path: Any) -> None:
    """QEMU= is the QEMU that boots, and each line of the command's output is printed when
    the guest prints it: here the guest goes on only once the test has read its first line
    (before, the output came through a buffered pipe, at the end)."""
    go = tmp_path / "go"
    p = boot_with_fake(tmp_path, READY + [["console", "FIRST"], ["wait-file", str(go)], ["console", "SECOND"],
                                          ["console", "HVSTOR-EXIT-STATUS=7"], ["exit", 0]],
                       "--cmd", "echo FIRST; wait; echo SECOND; exit 7")
    assert p.stdout is not None and p.stderr is not None
    assert p.stdout.readline() == "FIRST\n"
    go.touch()
    rest = p.stdout.read()
    err = p.stderr.read()
    assert p.wait() == 7, err
    assert rest == "SECOND\n"
    assert "command exited with status 7" in err


def test_a_kernel_report_is_exit_125_with_its_lines(tmp_path: Any) -> None:
    p = boot_with_fake(tmp_path, READY + [["kmsg", "BUG: kernel NULL pointer dereference, address: 0"],
                                          ["kmsg", "RIP: 0010:storvsc_probe+0x2a/0x5e0 [hv_storvsc]"],
                                          ["kmsg", "---[ end trace 0000000000000000 ]---"], ["beat-forever"]],
                       "--cmd", "true")
    _, err = p.communicate()
    assert p.returncode == 125
    assert "the guest kernel reported a BUG: BUG: kernel NULL pointer dereference" in err
    assert "storvsc_probe+0x2a" in err


@pytest.mark.parametrize("opt", ["--timeout", "--silence"])
def test_clock_options_want_seconds(opt: str) -> None:
    r = subprocess.run([HVSTOR, "boot", opt, "soon"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                       text=True, check=False)
    assert r.returncode == 2 and "positive number of seconds" in r.stdout


def test_paths_that_cannot_be_used_are_refused_before_a_boot(tmp_path: Any) -> None:
    """--results naming a file, or --log a folder, failed with a traceback once the whole
    boot had run (exit status 1, the boot's temporary folder left behind)."""
    env = dict(os.environ, QEMU="/nonexistent/qemu")
    afile = tmp_path / "afile"
    afile.write_text("mine")
    for args, want in ((["--cmd", "true", "--results", str(afile)], "--results: "),
                       (["--cmd", "true", "--log", str(tmp_path)], "--log: ")):
        r = subprocess.run([HVSTOR, "boot", *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           text=True, check=False)
        assert r.returncode == 2 and want in r.stdout, (args, r.stdout)
    assert afile.read_text() == "mine"


def test_sigterm_ends_qemu_too(tmp_path: Any) -> None:
    """SIGTERM to ./hvstor boot (a CI job cancelled, kill PID) ended Python at once and left
    QEMU running, guest and all, for ever: now it ends the boot as Ctrl-C does (exit 143)."""
    pid = tmp_path / "qemu.pid"
    p = boot_with_fake(tmp_path, [["pidfile", str(pid)]] + READY + [["console", "RUNNING"], ["beat-forever"]],
                       "--cmd", "sleep 1000")
    assert p.stdout is not None and p.stdout.readline() == "RUNNING\n"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate()
    qemu = int(pid.read_text())
    gone = False
    try:
        os.kill(qemu, 0)
    except ProcessLookupError:
        gone = True
    if not gone:
        os.kill(qemu, signal.SIGKILL)
    assert gone and p.returncode == 143, err
