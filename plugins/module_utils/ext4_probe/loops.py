# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Loop devices and mounts: attaching a scratch image with autoclear, mounting it, finding and
releasing what a killed run left, and which of the host's options this kernel takes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import fcntl
import os
import struct
import time

from ..ext4_parsers.mounts import parse_mountinfo
from .base import ProbeError, mount, umount


# linux/loop.h
LOOP_SET_FD, LOOP_CLR_FD, LOOP_SET_STATUS64, LOOP_CONFIGURE = 0x4C00, 0x4C01, 0x4C04, 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_AUTOCLEAR = 4
LOOP_INFO64 = struct.Struct("=5Q4I64s64s32s2Q")


def loop_attach(image):
    """Attach image to a free loop device with autoclear; returns (device path, open fd).
    The caller mounts, then closes the fd: from then on the mount holds the device, and the
    kernel detaches it at umount, or when a killed process's fd is closed."""
    ctl = os.open("/dev/loop-control", os.O_RDWR | os.O_CLOEXEC)
    img = os.open(image, os.O_RDWR | os.O_CLOEXEC)
    try:
        for _unused in range(64):
            number = fcntl.ioctl(ctl, LOOP_CTL_GET_FREE)
            device = "/dev/loop%d" % number
            for _unused in range(50):  # udev (where there is one) may create the node a moment later
                if os.path.exists(device):
                    break
                time.sleep(0.01)
            fd = os.open(device, os.O_RDWR | os.O_CLOEXEC)
            info = LOOP_INFO64.pack(0, 0, 0, 0, 0, 0, 0, 0, LO_FLAGS_AUTOCLEAR,
                                    os.path.basename(image).encode()[:63], b"", b"", 0, 0)
            try:
                try:
                    fcntl.ioctl(fd, LOOP_CONFIGURE, struct.pack("=II", img, 0) + info + bytes(64))
                except OSError as exc:
                    if exc.errno not in (errno.EINVAL, errno.ENOTTY):  # EINVAL/ENOTTY: kernel < 5.8
                        raise
                    fcntl.ioctl(fd, LOOP_SET_FD, img)
                    fcntl.ioctl(fd, LOOP_SET_STATUS64, info)
                return device, fd
            except OSError as exc:
                os.close(fd)
                if exc.errno != errno.EBUSY:  # EBUSY: another process took it first
                    raise
        raise ProbeError("no free loop device after 64 attempts")
    finally:
        os.close(img)
        os.close(ctl)


def own_loop_devices(root):
    """Loop devices whose backing file is inside root (the only ones the probe may release)."""
    found = []
    for entry in sorted(os.listdir("/sys/block")):
        try:
            with open("/sys/block/%s/loop/backing_file" % entry) as handle:
                backing = handle.read().rstrip("\n")
        except OSError:
            continue
        if backing.endswith(" (deleted)"):
            backing = backing[:-len(" (deleted)")]
        if backing.startswith(root + "/"):
            found.append("/dev/" + entry)
    return found


def own_mounts(root):
    # newline="": a name with \r in it is not a line break (only \n is, and the kernel escapes it)
    with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape", newline="") as handle:
        mounts = parse_mountinfo(handle.read())
    inside = [m["mountpoint"] for m in mounts if m["mountpoint"].startswith(root + "/")]
    return sorted(inside, key=len, reverse=True)  # deepest first


def release_stale(scratch):
    """Unmount, detach and delete what a killed run of ours left in the scratch directory.
    mountinfo and sysfs name them by the directory's real path; they are released through the
    probe's own descriptor path (Scratch.path), so a renamed or swapped path cannot redirect it."""
    root = scratch.real_path()
    released = []
    for target in own_mounts(root):
        inside = scratch.path(target[len(root) + 1:])
        try:
            umount(inside)
        except OSError:
            umount(inside, lazy=True)
        released.append("mount " + target)
    for device in own_loop_devices(root):
        try:
            fd = os.open(device, os.O_RDONLY | os.O_CLOEXEC)
            try:
                fcntl.ioctl(fd, LOOP_CLR_FD)
            finally:
                os.close(fd)
            released.append("loop " + device)
        except OSError as exc:
            if exc.errno != errno.ENXIO:  # ENXIO: autoclear got there first
                raise
    return released


class Mounted:
    """A scratch image attached to a loop device and mounted under the scratch directory."""

    def __init__(self, image, target, options):
        self.image, self.target, self.options = image, target, options

    def __enter__(self):
        os.makedirs(self.target, exist_ok=True)
        device, fd = loop_attach(self.image)
        try:
            mount(device, self.target, ",".join(self.options))
        finally:
            os.close(fd)  # autoclear: the mount now holds the device
        return self

    def __exit__(self, *exc):
        umount(self.target)


def mountable_options(image, target, options):
    """The host's options that this kernel accepts on the scratch image, and those dropped.
    Tries them all at once first; only on EINVAL does it test them one by one."""
    try:
        with Mounted(image, target, options):
            return options, []
    except OSError as exc:
        if exc.errno != errno.EINVAL:
            raise
    kept, dropped = [], []
    for option in options:
        try:
            with Mounted(image, target, kept + [option]):
                kept.append(option)
        except OSError as exc:
            if exc.errno != errno.EINVAL:
                raise
            dropped.append(option)
    with Mounted(image, target, kept):  # the combination must mount too
        pass
    return kept, dropped
