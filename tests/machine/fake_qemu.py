#!/usr/bin/python3
"""A stand-in for qemu-system-x86_64 that plays a scripted guest, for the machine layer's
tests: it takes QEMU's arguments as scripts/hvmachine gives them, serves QMP on the
monitor's socket (as qemu.machine passes it: -chardev socket,id=mon,fd=N), writes the
console to the console's socket and the kmsg, heartbeat and results chardevs to their files.

The script is a JSON list of steps in the file $HVSTOR_FAKE_QEMU_SCRIPT:
    ["console", TEXT]          a console line
    ["console-raw", TEXT, N]   TEXT N times (default once) on the console as it is, each
                               character one byte (\u0000-\u00ff: any byte), no newline
    ["kmsg", TEXT]             a kernel message on the kmsg channel (level 4)
    ["kmsg-raw", TEXT]         a line on the kmsg channel as it is
    ["beat"]                   one heartbeat byte
    ["beat-forever"]           a heartbeat byte every 0.1 s, for ever (a stuck guest)
    ["hang"]                   nothing more, for ever (a guest that stopped)
    ["wait-qmp", COMMAND]      until QMP has received COMMAND (each wait takes one)
    ["wait-file", PATH]        until PATH exists (the test's go-ahead)
    ["event", NAME, DATA]      a QMP event
    ["results", {NAME: TEXT}, KEEP]  a tar archive of these files on the results channel
                               (its first KEEP bytes only, when KEEP is given); TEXT, or
                               {"hex": HEX} for bytes
    ["stderr", TEXT]           a line on QEMU's own output
    ["stderr-raw", TEXT]       bytes (one a character, as console-raw) on QEMU's output
    ["sleep", S]               nothing for S seconds (QEMU busy with its own work)
    ["exit", CODE]             QEMU exits with CODE
Steps that may lead the list, before QMP's greeting:
    ["no-qmp"]                 no greeting at all (a QEMU that refused its arguments, or one
                               stuck before its monitor runs, with ["hang"] after it)
    ["pidfile", PATH]          QEMU's pid written to PATH
    ["drop-qmp-on", COMMAND]   when COMMAND comes, the QMP connection is closed unanswered
    ["mute-qmp-on", COMMAND]   from COMMAND on, no QMP command is answered
    ["migrate-fails", DESC]    query-migrate says failed, with error-desc DESC
    ["load-fails"]             a migrate-incoming ends QEMU (status 1), as a state it cannot load does
The steps start once the QMP client has negotiated capabilities and asked query-status (as
the machine layer does once QEMU is up: a boot is never faster), unless the list starts
with ["no-qmp"]. Every QMP command is answered {"return": {}} (query-status: running; paused
from a stop to the next cont; after a migrate-incoming, inmigrate twice, then paused;
query-migrate: completed; a migrate to file:PATH writes PATH), and appended as a JSON line
to $HVSTOR_FAKE_QEMU_LOG when it is set. A step list that ends without "exit" exits 0.
A file chardev without append=on starts empty, as QEMU truncates it.
"""

from __future__ import annotations

import io
import json
import os
import socket
import sys
import tarfile
import threading
import time
from typing import Any, Dict, List, Optional


class Fake:
    def __init__(self, argv: List[str]) -> None:
        self.chardevs: Dict[str, Dict[str, str]] = {}
        for i, a in enumerate(argv):
            if a == "-chardev":
                kind, _, rest = argv[i + 1].partition(",")
                opts = dict(kv.partition("=")[::2] for kv in rest.split(","))
                opts["kind"] = kind
                self.chardevs[opts["id"]] = opts
        self.qmp = self._sock("mon")
        self.console = self._sock("console")
        self.received: List[str] = []
        self.cond = threading.Condition()
        self.seq = 0
        self.lock = threading.Lock()
        self.drop_on: Optional[str] = None
        self.mute_on: Optional[str] = None
        self.muted = False
        self.run_state = "running"
        self.inmigrate = 0               # query-status answers left that say inmigrate
        self.migrate_error: Optional[str] = None
        self.load_fails = False
        for c in self.chardevs.values():
            if c["kind"] == "file" and c.get("append") != "on":
                open(c["path"], "wb").close()

    def _sock(self, cid: str) -> Optional[socket.socket]:
        c = self.chardevs.get(cid)
        return socket.socket(fileno=int(c["fd"])) if c and "fd" in c else None

    def _file(self, cid: str) -> Optional[str]:
        c = self.chardevs.get(cid)
        return c["path"] if c else None

    def send(self, msg: Dict[str, Any]) -> None:
        assert self.qmp is not None
        with self.lock:
            self.qmp.sendall(json.dumps(msg).encode() + b"\r\n")

    def serve_qmp(self) -> None:
        self.send({"QMP": {"version": {"qemu": {"micro": 0, "minor": 0, "major": 10},
                                       "package": ""}, "capabilities": []}})
        assert self.qmp is not None
        # QMP is a stream of JSON values, not of lines (qemu.qmp sends no newline).
        decoder, buf = json.JSONDecoder(), ""
        while True:
            data = self.qmp.recv(65536)
            if not data:
                return
            buf += data.decode()
            while buf.strip():
                try:
                    msg, end = decoder.raw_decode(buf.lstrip())
                except ValueError:
                    break
                buf = buf.lstrip()[end:]
                self.answer(msg)

    def answer(self, msg: Dict[str, Any]) -> None:
        cmd = msg.get("execute", "")
        log = os.environ.get("HVSTOR_FAKE_QEMU_LOG")
        if log:
            with open(log, "a", encoding="utf-8") as f:
                f.write(json.dumps(msg) + "\n")
        if cmd == "migrate-incoming" and self.load_fails:
            sys.stderr.write("qemu-system-x86_64: load of migration failed: Invalid argument\n")
            sys.stderr.flush()
            os._exit(1)
        self.run_state = {"stop": "paused", "migrate-incoming": "paused", "cont": "running"}.get(cmd, self.run_state)
        self.inmigrate = 2 if cmd == "migrate-incoming" else self.inmigrate
        ret: Any = {"status": self.run_state, "running": self.run_state == "running"} if cmd == "query-status" else {}
        if cmd == "query-status" and self.inmigrate:
            self.inmigrate -= 1
            ret = {"status": "inmigrate", "running": False}
        if cmd == "query-migrate":
            ret = {"status": "failed", "error-desc": self.migrate_error} if self.migrate_error \
                else {"status": "completed", "total-time": 1}
        uri = str(msg.get("arguments", {}).get("uri", ""))
        if cmd == "migrate" and uri.startswith("file:"):
            with open(uri[len("file:"):], "wb") as f:
                f.write(b"fake state")
        reply: Dict[str, Any] = {"return": ret}
        if "id" in msg:
            reply["id"] = msg["id"]
        self.muted = self.muted or cmd == self.mute_on
        if cmd == self.drop_on:
            assert self.qmp is not None
            self.qmp.shutdown(socket.SHUT_RDWR)
        elif not self.muted:
            self.send(reply)
        if cmd == "quit":
            os._exit(0)
        with self.cond:
            self.received.append(cmd)
            self.cond.notify_all()

    def write_file(self, cid: str, data: bytes) -> None:
        path = self._file(cid)
        if path:
            with open(path, "ab") as f:
                f.write(data)

    def step(self, s: List[Any]) -> None:
        what = s[0]
        if what == "console":
            assert self.console is not None
            self.console.sendall(s[1].encode() + b"\r\n")
        elif what == "console-raw":
            assert self.console is not None
            self.console.sendall(s[1].encode("latin-1") * (s[2] if len(s) > 2 else 1))
        elif what == "kmsg":
            self.write_file("hvkmsg", f"4,{self.seq},{self.seq * 1000},-;{s[1]}\n".encode())
            self.seq += 1
        elif what == "kmsg-raw":
            self.write_file("hvkmsg", s[1].encode() + b"\n")
        elif what == "beat":
            self.write_file("hvhb", b".")
        elif what == "beat-forever":
            while True:
                self.write_file("hvhb", b".")
                time.sleep(0.1)
        elif what == "hang":
            threading.Event().wait()
        elif what == "wait-qmp":
            with self.cond:
                while s[1] not in self.received:
                    self.cond.wait()
                self.received.remove(s[1])
        elif what == "wait-file":
            while not os.path.exists(s[1]):
                time.sleep(0.05)
        elif what == "event":
            self.send({"event": s[1], "data": s[2],
                       "timestamp": {"seconds": int(time.time()), "microseconds": 0}})
        else:
            self.step_io(s)

    def step_io(self, s: List[Any]) -> None:
        if s[0] == "results":
            buf = io.BytesIO()
            with tarfile.open(fileobj=buf, mode="w") as t:
                for name, text in s[1].items():
                    data = bytes.fromhex(text["hex"]) if isinstance(text, dict) else text.encode()
                    info = tarfile.TarInfo(name)
                    info.size = len(data)
                    t.addfile(info, io.BytesIO(data))
            data = buf.getvalue()
            self.write_file("hvres", data[:s[2]] if len(s) > 2 else data)
        elif s[0] == "stderr":
            print(s[1], file=sys.stderr, flush=True)
        elif s[0] == "stderr-raw":
            sys.stderr.buffer.write(s[1].encode("latin-1"))
            sys.stderr.flush()
        elif s[0] == "sleep":
            time.sleep(s[1])
        elif s[0] == "exit":
            sys.stdout.flush()
            os._exit(int(s[1]))
        else:
            raise SystemExit(f"fake_qemu: unknown step {s!r}")


def main() -> None:
    fake = Fake(sys.argv[1:])
    with open(os.environ["HVSTOR_FAKE_QEMU_SCRIPT"], encoding="utf-8") as f:
        steps = json.load(f)
    greet = True
    while steps and steps[0][0] in ("no-qmp", "pidfile", "drop-qmp-on", "mute-qmp-on", "migrate-fails", "load-fails"):
        s = steps.pop(0)
        if s[0] == "no-qmp":
            greet = False
        elif s[0] == "pidfile":
            with open(s[1], "w", encoding="utf-8") as f:
                f.write(f"{os.getpid()}\n")
        elif s[0] == "drop-qmp-on":
            fake.drop_on = s[1]
        elif s[0] == "migrate-fails":
            fake.migrate_error = s[1]
        elif s[0] == "load-fails":
            fake.load_fails = True
        else:
            fake.mute_on = s[1]
    if greet and fake.qmp is not None:
        threading.Thread(target=fake.serve_qmp, daemon=True).start()
        fake.step(["wait-qmp", "qmp_capabilities"])
        fake.step(["wait-qmp", "query-status"])
    for s in steps:
        fake.step(s)
    os._exit(0)


if __name__ == "__main__":
    main()
