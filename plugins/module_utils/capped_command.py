# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""A command run with a cap on the output it keeps and a kill of its whole process group at its
timeout: what ext4_image_facts needs for every command on an untrusted image, and what
AnsibleModule.run_command cannot give (it keeps all output and kills only the child). Here, not in
the module, because a module's own subprocess.Popen is refused by ansible-test (and ansible-lint
allows no ignore for that). Python >= 3.8 standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import selectors
import signal
import subprocess
import time
from typing import Any, Dict


class CommandTimeout(Exception):
    """The command was still running at its timeout; it has been killed."""


def run_capped(argv, env, limit, stderr_limit, timeout, drain=False):
    # type: (list, dict, int, int, float, bool) -> tuple
    """Run argv (a list, never a shell) with env for at most `timeout` seconds, keeping at most
    `limit` bytes of its output and `stderr_limit` of its errors. Returns (rc, out, err, over):
    over is True when it printed more; it is then killed (rc None) unless drain, which reads the
    rest and throws it away to learn its exit code. Raises CommandTimeout at the timeout."""
    proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=env, start_new_session=True)  # its own group: killed with any child
    kept = {proc.stdout: bytearray(), proc.stderr: bytearray()}  # type: Dict[Any, bytearray]
    room = {proc.stdout: limit, proc.stderr: stderr_limit}  # type: Dict[Any, int]
    over, deadline = False, time.monotonic() + timeout
    try:
        with selectors.DefaultSelector() as selector:
            for pipe in kept:
                selector.register(pipe, selectors.EVENT_READ)
            while selector.get_map() and not (over and not drain):
                ready = selector.select(deadline - time.monotonic())
                if not ready:
                    raise CommandTimeout()
                for key, _unused in ready:
                    data = os.read(key.fd, 65536)
                    if not data:
                        selector.unregister(key.fileobj)
                        continue
                    space = room[key.fileobj] - len(kept[key.fileobj])
                    kept[key.fileobj] += data[:max(space, 0)]
                    over = over or (key.fileobj is proc.stdout and len(data) > space)
        if over and not drain:
            return None, bytes(kept[proc.stdout]), kept[proc.stderr].decode("utf-8", "replace"), True
        try:
            rc = proc.wait(max(deadline - time.monotonic(), 0))
        except subprocess.TimeoutExpired:
            raise CommandTimeout() from None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        proc.stdout.close()  # type: ignore[union-attr]  # PIPE: never None
        proc.stderr.close()  # type: ignore[union-attr]
    return rc, bytes(kept[proc.stdout]), kept[proc.stderr].decode("utf-8", "replace"), over
