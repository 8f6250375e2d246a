#!/usr/bin/env python3
"""A small QMP client (standard library only) for the boot tests.

    q = Qmp.connect('/tmp/x/qmp.sock', alive=lambda: qemu_is_running)
    q.command('device_add', driver='hv-disk', id='d1', bus='scsi0.0', ...)
    q.device_del('d1')  # device_del, then waits for its DEVICE_DELETED

Nothing here gives up on a clock: every wait ends when what it waits for arrives or when
QEMU goes away (the socket closes, or alive() turns false), so the only time limit is
the boot's own timeout, which ends QEMU.
"""
import json
import os
import socket
import sys
import time


class QmpError(Exception):
    """QEMU answered a command with an error, or went away."""


class Qmp:
    POLL = 0.2  # seconds between looks while waiting; never a limit

    def __init__(self, sock):
        self.sock = sock
        self.buf = b''
        self.events = []

    @classmethod
    def connect(cls, path, alive=lambda: True):
        """Waits for QEMU to listen on path, then negotiates capabilities."""
        while True:
            if os.path.exists(path):
                s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
                try:
                    s.connect(path)
                    break
                except OSError:
                    s.close()
            if not alive():
                raise QmpError('QEMU ended before its QMP socket ' + path + ' accepted a client')
            time.sleep(cls.POLL)
        q = cls(s)
        greeting = q._read()
        if 'QMP' not in greeting:
            raise QmpError('no QMP greeting: %r' % greeting)
        q.command('qmp_capabilities')
        return q

    def _read(self, timeout=None):
        """The next message; None when nothing arrived within timeout (None: wait)."""
        while b'\n' not in self.buf:
            self.sock.settimeout(timeout)
            try:
                chunk = self.sock.recv(65536)
            except socket.timeout:
                return None
            if not chunk:
                raise QmpError('QEMU closed the QMP connection')
            self.buf += chunk
        line, self.buf = self.buf.split(b'\n', 1)
        return json.loads(line)

    def command(self, name, **args):
        """Runs a command; its 'return' value, or QmpError with QEMU's message."""
        msg = {'execute': name}
        if args:
            msg['arguments'] = args
        self.sock.sendall(json.dumps(msg).encode() + b'\n')
        while True:
            r = self._read()
            if 'event' in r:
                self.events.append(r)
            elif 'error' in r:
                raise QmpError('%s: %s' % (name, r['error'].get('desc', r['error'])))
            elif 'return' in r:
                return r['return']

    def wait_event(self, name, match=lambda e: True):
        """The first event called name (seen before or arriving now) that match() accepts."""
        while True:
            for i, e in enumerate(self.events):
                if e['event'] == name and match(e):
                    return self.events.pop(i)
            r = self._read()
            if 'event' in r:
                self.events.append(r)

    def device_del(self, dev_id):
        """device_del of dev_id; returns once QEMU sent its DEVICE_DELETED."""
        self.command('device_del', id=dev_id)
        self.wait_event('DEVICE_DELETED', lambda e: e['data'].get('device') == dev_id)

    def wait_until(self, ready, alive=lambda: True):
        """Returns once ready() is true, reading events meanwhile; QmpError when QEMU ends."""
        while not ready():
            if not alive():
                raise QmpError('QEMU ended while waiting')
            r = self._read(timeout=self.POLL)
            if r is not None and 'event' in r:
                self.events.append(r)

    def close(self):
        self.sock.close()


# Helpers for the host side of the boot tests.

def host_side():
    """The arguments tests/boot-lib.sh boot_with_host_side gives a host-side program:
    (QMP socket, console log, boot script's pid, alive, extra arguments), alive() telling
    whether that boot still runs."""
    sock, console, pid = sys.argv[2], sys.argv[3], int(sys.argv[4])
    return sock, console, pid, (lambda: process_alive(pid)), sys.argv[5:]


def say(*words):
    """A line of the host side's output, at once (it interleaves with the guest's)."""
    print(*words, flush=True)


def process_alive(pid):
    """Whether process `pid` (the boot script, say) still runs."""
    try:
        os.kill(pid, 0)
        return True
    except OSError:
        return False


def console_has(path, marker):
    """Whether the console log at `path` holds `marker` (text) anywhere yet."""
    try:
        with open(path, 'rb') as f:
            return marker.encode() in f.read()
    except FileNotFoundError:
        return False


def qemu_pid(needle):
    """The pid of the qemu-system-x86_64 whose command line has an argument containing
    `needle` (this boot's QMP socket or disk image), or None."""
    for entry in os.listdir('/proc'):
        if not entry.isdigit():
            continue
        try:
            with open('/proc/%s/cmdline' % entry, 'rb') as f:
                args = f.read().split(b'\0')
        except OSError:
            continue
        if args and args[0].endswith(b'qemu-system-x86_64') and any(needle.encode() in a for a in args):
            return int(entry)
    return None
