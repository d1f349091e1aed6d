# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The scratch directory: the probe's own or nothing, held by descriptor from start to end.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import ctypes
import errno
import fcntl
import os
import stat
import time

from .base import DIRECTORY, MiB, ProbeError, Refused, ScratchFull, _libc, now
from .loops import release_stale


MARKER = ".ext4-audit-probe"  # a scratch directory without it is not ours: refuse to touch it


# The scratch directory sits in a directory others can write (/dev/shm by default), so the probe
# trusts no path there: every directory is opened by descriptor, one component at a time, without
# following a symlink, and everything after that goes through the descriptors it holds.
RENAME_NOREPLACE = 1  # linux/fs.h: renameat2 fails with EEXIST instead of replacing (an empty directory)


def check_trusted(st, path):
    """A directory on the way to the scratch directory: only root may change what it names.
    Writable by others only with the sticky bit (as /dev/shm and /tmp: then nobody else can
    rename or remove what root made in it)."""
    if st.st_uid != 0:
        raise Refused("%s is owned by uid %d, not root: that user could swap what it holds" % (path, st.st_uid))
    if st.st_mode & 0o022 and not st.st_mode & stat.S_ISVTX:
        raise Refused("%s can be written by other users (mode %04o) and is not sticky"
                      % (path, stat.S_IMODE(st.st_mode)))


def open_directory(dir_fd, name, path):
    """dir_fd/name opened as a directory without following a symlink (FileNotFoundError if
    there is nothing); Refused says what is there instead of a directory."""
    try:
        return os.open(name, DIRECTORY, dir_fd=dir_fd)
    except NotADirectoryError:  # O_NOFOLLOW | O_DIRECTORY on a symlink: ENOTDIR
        pass
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise Refused("%s is a symbolic link (to %s, owned by uid %d); the probe never follows one in its "
                      "scratch path" % (path, os.readlink(name, dir_fd=dir_fd), st.st_uid))
    raise Refused("%s is not a directory" % path)


def open_parent(path):
    """The scratch directory's parent, opened from / one checked component at a time."""
    fd = os.open("/", DIRECTORY)
    where = "/"
    try:
        check_trusted(os.fstat(fd), where)
        for name in filter(None, path.split("/")):
            where = os.path.join(where, name)
            try:
                child = open_directory(fd, name, where)
            except FileNotFoundError:
                raise Refused("scratch parent directory %s does not exist" % where)
            os.close(fd)
            fd = child
            check_trusted(os.fstat(fd), where)
        return fd
    except BaseException:
        os.close(fd)
        raise


def remove_tree(dir_fd, name):
    """Remove dir_fd/name and everything below it by descriptor: no symlink followed, no path
    that could be swapped, no crossing into a mount still there (its rmdir fails instead)."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if not stat.S_ISDIR(st.st_mode):
        os.unlink(name, dir_fd=dir_fd)
        return
    fd = os.open(name, DIRECTORY, dir_fd=dir_fd)
    try:
        if os.fstat(fd).st_dev == os.fstat(dir_fd).st_dev:
            for entry in os.listdir(fd):
                remove_tree(fd, entry)
    finally:
        os.close(fd)
    os.rmdir(name, dir_fd=dir_fd)


class Scratch:
    """The probe's own directory, held by descriptor from start to end: trust checks, the lock,
    the stale sweep, space accounting and the final cleanup.

    The probe works only in a directory it made itself (in this run or an earlier one): owned
    by root, mode 0700, holding the marker (a regular file owned by root), in a parent only root
    can change (check_trusted). A new one is made under a temporary name, given its marker, then
    renamed into place without replacing anything, so the scratch path never names a directory
    of the probe's without its marker. Anything else there is refused, untouched.

    The marker is also the lock: flock on it for the whole run, the holder's pid in it. A second
    probe waits up to lock_wait_s for it, then is refused with that pid."""

    def __init__(self, root, cap_bytes, keep_cache=False, lock_wait_s=0):
        self.root = os.path.normpath(root)
        self.cap, self.keep_cache, self.lock_wait_s = cap_bytes, keep_cache, lock_wait_s
        self.parent_fd = self.fd = self.lock_fd = None
        self.peak = 0
        self.released = []

    def __enter__(self):
        if not os.path.isabs(self.root) or self.root == "/":
            raise Refused("scratch directory %s is not an absolute path below /" % self.root)
        parent, self.name = os.path.split(self.root)
        self.parent_fd = open_parent(parent)
        try:
            preflight(self.parent_fd, parent, self.cap)
            deadline = now() + self.lock_wait_s
            while not self._open_and_lock(deadline):  # the holder we waited for removed it: again
                pass
            # mount(2), losetup and mke2fs take paths: the probe gives them this one, the magic
            # link to the directory it holds, which no rename or symlink elsewhere can redirect
            # (what is below it is the probe's own: root-only, mode 0700). /proc/<pid>, not
            # /proc/self, so child processes (mke2fs) resolve it to the same directory.
            self.fd_path = "/proc/%d/fd/%d" % (os.getpid(), self.fd)
            self.released = release_stale(self)
            for name in ("runs", "mnt"):
                remove_tree(self.fd, name)
                os.mkdir(name, 0o700, dir_fd=self.fd)
            if "cache" not in os.listdir(self.fd):
                os.mkdir("cache", 0o700, dir_fd=self.fd)
        except BaseException:
            self._close()
            raise
        return self

    def _open_and_lock(self, deadline):
        """Open (or make) the directory, check it is the probe's and lock it; False when the
        previous holder removed it meanwhile."""
        try:
            self.fd = open_directory(self.parent_fd, self.name, self.root)
        except FileNotFoundError:
            self.fd = self._create()
            if self.fd is None:
                return False
        st = os.fstat(self.fd)
        if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o700:
            raise Refused("%s is not the probe's scratch directory: owned by uid %d with mode %04o (the probe "
                          "makes its own as root with mode 0700); choose another scratch path"
                          % (self.root, st.st_uid, stat.S_IMODE(st.st_mode)))
        try:
            self.lock_fd = os.open(MARKER, os.O_RDWR | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.fd)
        except OSError as exc:
            raise Refused("%s is not the probe's scratch directory (%s: %s); choose another scratch path"
                          % (self.root, MARKER, exc.strerror))
        marker = os.fstat(self.lock_fd)
        if not stat.S_ISREG(marker.st_mode) or marker.st_uid != 0:
            raise Refused("%s is not the probe's scratch directory: its %s is not a regular file owned by root"
                          % (self.root, MARKER))
        while True:
            try:
                fcntl.flock(self.lock_fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if now() >= deadline:
                    holder = os.pread(self.lock_fd, 16, 0).decode("ascii", "replace").strip() or "unknown"
                    raise Refused("another probe is running on this host (pid %s); it holds %s"
                                  % (holder, self.root))
                time.sleep(0.1)
        if os.fstat(self.lock_fd).st_nlink == 0:
            self._close(keep_parent=True)
            return False
        os.ftruncate(self.lock_fd, 0)
        os.pwrite(self.lock_fd, b"%d\n" % os.getpid(), 0)
        return True

    def _create(self):
        """A new scratch directory with its marker, renamed into place; None when another probe
        put one there first."""
        renameat2 = getattr(_libc, "renameat2", None)
        if renameat2 is None:
            raise ProbeError("this host's C library has no renameat2 (glibc 2.28 or later), which the probe "
                             "needs to put a new scratch directory in place")
        temp = "%s.new-%s" % (self.name, os.urandom(8).hex())
        os.mkdir(temp, 0o700, dir_fd=self.parent_fd)
        fd = os.open(temp, DIRECTORY, dir_fd=self.parent_fd)
        os.fchmod(fd, 0o700)  # whatever the umask
        os.close(os.open(MARKER, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600, dir_fd=fd))
        if renameat2(self.parent_fd, os.fsencode(temp), self.parent_fd, os.fsencode(self.name), RENAME_NOREPLACE) == 0:
            return fd
        err = ctypes.get_errno()
        os.unlink(MARKER, dir_fd=fd)
        os.close(fd)
        os.rmdir(temp, dir_fd=self.parent_fd)
        if err == errno.EEXIST:
            return None
        raise OSError(err, "rename into %s: %s" % (self.root, os.strerror(err)))

    def _close(self, keep_parent=False):
        for fd in (self.lock_fd, self.fd) + (() if keep_parent else (self.parent_fd,)):
            if fd is not None:
                os.close(fd)
        self.lock_fd = self.fd = None
        if not keep_parent:
            self.parent_fd = None

    def __exit__(self, *exc):
        try:
            try:
                release_stale(self)
            finally:
                for name in os.listdir(self.fd):
                    if name != MARKER and not (self.keep_cache and name == "cache"):
                        remove_tree(self.fd, name)
            replaced = self.replaced()
            if replaced:
                raise Refused("%s was replaced during the run (%s); the probe emptied its own directory (now %s) "
                              "through its descriptor and left that path alone" % (self.root, replaced, self.real_path()))
            if not self.keep_cache:
                os.unlink(MARKER, dir_fd=self.fd)
                os.rmdir(self.name, dir_fd=self.parent_fd)
        finally:
            self._close()

    def replaced(self):
        """What the scratch path names now if it is no longer the directory held, else None."""
        try:
            st = os.stat(self.name, dir_fd=self.parent_fd, follow_symlinks=False)
        except FileNotFoundError:
            return "nothing is there now"
        held = os.fstat(self.fd)
        if (st.st_dev, st.st_ino) == (held.st_dev, held.st_ino):
            return None
        return "it is now a symbolic link" if stat.S_ISLNK(st.st_mode) else "it is now another file"

    def real_path(self):
        """Where the held directory is now (mountinfo and sysfs name its mounts and loops so)."""
        return os.readlink("/proc/self/fd/%d" % self.fd)

    def path(self, *parts):
        return os.path.join(self.fd_path, *parts)

    def used(self):
        """Bytes allocated to files in the directory. The runs' mounted filesystems are not
        walked: their files live inside run images already counted."""
        total = 0
        own_device = os.fstat(self.fd).st_dev
        for _unused, dirs, files, dir_fd in os.fwalk(dir_fd=self.fd):
            dirs[:] = [d for d in dirs if os.stat(d, dir_fd=dir_fd, follow_symlinks=False).st_dev == own_device]
            for name in files:
                try:
                    total += os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_blocks * 512
                except FileNotFoundError:
                    pass
        self.peak = max(self.peak, total)
        return total

    def check_cap(self):
        used = self.used()
        if used > self.cap:
            raise ScratchFull("scratch space cap reached: %d MiB used of %d MiB" % (used // MiB, self.cap // MiB))

    def full(self, exc):
        """exc as a ScratchFull when the scratch filesystem ran out of space, else exc itself.
        ENOSPC says so directly; a tool (mke2fs) or a scratch mount (a loop write failing with
        EIO) only shows it by the filesystem having (almost) nothing left."""
        if isinstance(exc, ScratchFull):
            return exc
        try:
            vfs = os.statvfs(self.fd)
        except OSError:
            return exc
        free = vfs.f_bavail * vfs.f_frsize
        if getattr(exc, "errno", None) == errno.ENOSPC or free < MiB:
            return ScratchFull("no space left on the scratch filesystem (%d KiB free under %s): %s"
                               % (free // 1024, self.root, exc), what="scratch full")
        return exc


def preflight(parent_fd, parent, cap_bytes):
    """Enough free memory and space for the cap, before anything is made."""
    vfs = os.statvfs(parent_fd)
    free = vfs.f_bavail * vfs.f_frsize
    if free < cap_bytes:
        raise ProbeError("not enough free space in %s: %d MiB free, the cap is %d MiB"
                         % (parent, free // MiB, cap_bytes // MiB))
    with open("/proc/meminfo") as handle:
        meminfo = dict(line.split(":", 1) for line in handle if ":" in line)
    available = int(meminfo.get("MemAvailable", "0 kB").split()[0]) * 1024
    if available < 2 * cap_bytes:  # scratch on tmpfs is memory; keep the host a margin
        raise ProbeError("not enough available memory: %d MiB, need twice the cap (%d MiB)"
                         % (available // MiB, 2 * cap_bytes // MiB))
