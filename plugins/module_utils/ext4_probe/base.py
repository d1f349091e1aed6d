# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""What every part of the probe uses: sizes, the fixed bytes it writes, its errors, and the libc
calls it makes through ctypes (mount, umount, unshare, syncfs, fallocate).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import os
import time


MiB = 1 << 20
KiB = 1 << 10
PAYLOAD = memoryview(b"\xa5" * MiB)  # fixed bytes: deterministic images, no leaked memory (Chopper wrote malloc garbage)

# linux/falloc.h, linux/mount.h
FALLOC_PUNCH = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
MNT_DETACH = 2

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]

# The probe trusts no path in its scratch directory's parent: every directory is opened by
# descriptor without following a symlink (scratch_dir.py), and so are the mounts it plays on.
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class ProbeError(Exception):
    """A condition the probe cannot work under; the message says what and what to do."""


class Refused(ProbeError):
    """The probe will not run: its scratch path is not one it can trust, or another probe holds
    it. Nothing of anyone else's was touched; the result's status is `refused` (exit REFUSED_EXIT)."""


class Interrupted(BaseException):
    """SIGTERM/SIGINT/SIGHUP: unwind through every `finally`."""


class ScratchFull(ProbeError):
    """The scratch directory holds more than its cap ("scratch cap"), or its filesystem has no
    space left ("scratch full"); `what` says which (the sweep's stopped_by)."""

    def __init__(self, message, what="scratch cap"):
        ProbeError.__init__(self, message)
        self.what = what


def _check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, "%s: %s" % (what, os.strerror(err)))


def mount(device, target, options):
    _check(_libc.mount(device.encode(), target.encode(), b"ext4", 0, options.encode()),
           "mount %s with %s" % (device, options or "(no options)"))


# sched.h and mount.h: a mount namespace of the probe's own, whose mounts no other namespace sees
CLONE_NEWNS = 0x00020000
MS_REC, MS_PRIVATE = 0x4000, 1 << 18


def private_mounts():
    """Move this process into a mount namespace of its own, with every mount private (nothing it
    mounts propagates back to the host's namespace). When the probe dies, even by SIGKILL, the
    kernel drops the namespace and unmounts what it mounted there; its loop devices (autoclear)
    then detach with their last user. Called before any thread is started (unshare needs that) and
    before the scratch directory is opened."""
    _check(_libc.unshare(CLONE_NEWNS), "unshare a private mount namespace")
    _check(_libc.mount(b"none", b"/", None, MS_REC | MS_PRIVATE, None), "make the probe's mounts private")


def umount(target, lazy=False):
    _check(_libc.umount2(target.encode(), MNT_DETACH if lazy else 0), "umount %s" % target)


def syncfs(fd):
    _check(_libc.syncfs(fd), "syncfs")


def punch_hole(fd, offset, length):
    _check(_libc.fallocate(fd, FALLOC_PUNCH, offset, length), "punch hole")


def now():
    return time.monotonic()
