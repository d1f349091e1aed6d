# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""A command run through AnsibleModule.run_command with a cap on the output it keeps and a time
limit: what ext4_image_facts needs for every command on an untrusted image, and what
ext4_probe_run needs for the probe's errors.

run_command alone keeps all output and has no timeout, but it hands the process to a callback before
it reads: run_capped reads the pipes there, keeping at most the caps and stopping at the deadline, and
kills the command's whole process group (the command runs in a session of its own, so any child it
started goes too). run_command then finds both pipes at their end. Python >= 3.8 standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import selectors
import signal
import subprocess  # its Popen and TimeoutExpired types: run_command starts the command
import sys
import time
from typing import Any, Optional

# Run by the module's own Python between run_command's fork and the command, then replaced by the
# command (exec: the same process): stdin from /dev/null, so that nothing waits on the module's
# stdin; with "session", a session of its own, so that its process group can be killed at the
# timeout. A command that cannot be started exits 127 with the reason, as a shell's would.
START = (
    "import os, sys\n"
    "os.dup2(os.open(os.devnull, os.O_RDONLY), 0)\n"
    "if sys.argv[1] == 'session':\n"
    "    os.setsid()\n"
    "try:\n"
    "    os.execvp(sys.argv[2], sys.argv[2:])\n"
    "except OSError as exc:\n"
    "    sys.stderr.write('cannot run %s: %s\\n' % (sys.argv[2], exc))\n"
    "    sys.exit(127)\n"
)
READ_SIZE = 65536


class CommandTimeout(Exception):
    """The command was still running at its timeout; it has been killed."""


class _Capped:
    """The callback run_command calls with the command's process before it reads its pipes."""

    def __init__(self, limit, stderr_limit, timeout, drain, stderr_tail, own_session):
        # type: (int, int, Optional[float], bool, bool, bool) -> None
        self.limit, self.stderr_limit, self.drain, self.stderr_tail = limit, stderr_limit, drain, stderr_tail
        self.own_session = own_session
        self.deadline = None if timeout is None else time.monotonic() + timeout
        self.out, self.err = bytearray(), bytearray()
        self.over = self.timed_out = self.stopped_reading = False

    def left(self):
        # type: () -> Optional[float]
        """Seconds to the deadline (None: no deadline)."""
        return None if self.deadline is None else max(self.deadline - time.monotonic(), 0)

    def __call__(self, proc):
        # type: (subprocess.Popen) -> None
        try:
            self.read(proc)
            if not self.stopped_reading:
                try:
                    proc.wait(self.left())
                except subprocess.TimeoutExpired:  # it closed its pipes but runs on
                    self.timed_out = True
        finally:  # also when reading failed: nothing is left running
            running = proc.poll() is None
            if running:
                self.kill(proc)
            if running or self.stopped_reading:
                self.hand_back_ended(proc)

    def read(self, proc):
        # type: (subprocess.Popen) -> None
        """Reads both pipes to their end, or until the deadline, or (unless drain) until the output
        is over its cap; stopped_reading says it stopped before their end."""
        with selectors.DefaultSelector() as selector:
            if proc.stdout is None or proc.stderr is None:  # run_command makes both pipes
                raise ValueError("the command's output is not a pipe")
            selector.register(proc.stdout, selectors.EVENT_READ)
            selector.register(proc.stderr, selectors.EVENT_READ)
            while selector.get_map() and not (self.over and not self.drain):
                ready = selector.select(self.left())
                if not ready:
                    self.timed_out = True
                    break
                for key, _unused in ready:
                    data = os.read(key.fd, READ_SIZE)
                    if not data:
                        selector.unregister(key.fileobj)
                    elif key.fileobj is proc.stdout:
                        self.over = keep(self.out, data, self.limit, tail=False) or self.over
                    else:
                        keep(self.err, data, self.stderr_limit, tail=self.stderr_tail)
            self.stopped_reading = bool(selector.get_map())

    def kill(self, proc):
        # type: (subprocess.Popen) -> None
        """Kills the command: its whole process group when it has a session of its own."""
        try:
            if self.own_session:
                os.killpg(proc.pid, signal.SIGKILL)
            else:
                proc.kill()
        except ProcessLookupError:  # killed before its start made its session: no group yet, nor children
            proc.kill()
        proc.wait()

    @staticmethod
    def hand_back_ended(proc):
        # type: (subprocess.Popen) -> None
        """run_command reads the pipes to their end once the callback returns: what is left in them
        is not wanted, and a process that left the killed group could hold them open, so it is given
        pipes at their end instead."""
        for name in ("stdout", "stderr"):
            getattr(proc, name).close()
            setattr(proc, name, open(os.devnull, "rb"))


def keep(kept, data, room, tail):
    # type: (bytearray, bytes, int, bool) -> bool
    """Adds data to what is kept of one pipe, at most room bytes (the last ones with tail); True when
    some of it is not kept."""
    kept += data
    dropped = len(kept) > room
    if dropped:
        if tail:
            del kept[:len(kept) - room]
        else:
            del kept[room:]
    return dropped


def run_capped(module, argv, limit, stderr_limit, timeout, drain=False, environ_update=None, stderr_tail=False,
               own_session=True):
    # type: (Any, list, int, int, Optional[float], bool, Optional[dict], bool, bool) -> tuple
    """Run argv (a list, never a shell; nothing in it expanded) with module.run_command, for at most
    `timeout` seconds (None: no limit), keeping at most `limit` bytes of its output and `stderr_limit`
    of its errors (the last ones with stderr_tail). Returns (rc, out, err, over): over is True when
    it printed more; it is then killed (rc None) unless drain, which reads the rest and throws it
    away to learn its exit code. Raises CommandTimeout at the timeout. own_session: the command and
    its children are killed together at the timeout; without it the command stays in the module's
    process group (an async job's timeout kills that group, the command with it)."""
    capped = _Capped(limit, stderr_limit, timeout, drain, stderr_tail, own_session)
    rc, _out, _err = module.run_command(
        [sys.executable, "-I", "-S", "-c", START, "session" if own_session else "group"] + list(argv),
        environ_update=environ_update, expand_user_and_vars=False, encoding=None, handle_exceptions=False,
        before_communicate_callback=capped)
    if capped.timed_out:
        raise CommandTimeout()
    err = capped.err.decode("utf-8", "replace")
    return None if capped.over and not capped.drain else rc, bytes(capped.out), err, capped.over
