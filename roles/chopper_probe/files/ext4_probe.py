# -*- coding: utf-8 -*-
"""The ext4 probe: short Chopper-style sweeps (He et al., FAST '15), a diagnosis of the four
allocator issues Chopper found, and confirmation probes, on scratch loop devices, on this host's
own kernel. Standard library only, Python >= 3.8.

    ext4_probe.py run JOB.json OUT.json     run a job (plan + filesystem facts), write results
    ext4_probe.py sweep-stale SCRATCH_DIR   remove what a killed run left behind, then exit

Exit codes: 0 ok or partial, 1 error, 2 the job cannot be read, 3 stopped by a signal,
4 refused (the scratch path is not the probe's own, or another probe holds it); OUT.json says
which and why for 0, 1 and 4.

Safety, in the order the code enforces it:
- the scratch directory is the probe's own or nothing: reached from / by descriptor without
  following a symlink, through directories only root can change; made by the probe as root
  with mode 0700 and its marker, or refused untouched (Scratch); every later path goes through
  the descriptor it holds, and cleanup removes by descriptor only what is inside it;
- everything lives under the scratch directory: image files, mount points, and loop devices
  attached by this process to those files (with autoclear, so a killed run frees them on the
  last close); no other block device is ever opened for writing;
- the marker in it is the lock (flock, held for the whole run): one probe per directory at a
  time, a second one waits a bounded time and is then refused;
- at start, after taking the lock, stale mounts under the directory and loop devices backed by
  files in it are released (a SIGKILLed run cannot clean up after itself);
- cleanup runs in `finally`, and SIGTERM/SIGINT/SIGHUP are turned into an exception so it runs;
- a time budget, a cap on scratch bytes, and a memory/space check before anything is made.

Differences from Chopper, on purpose: `Sync` is syncfs(2) on the scratch filesystem, not a
global sync(2); CPUCount pins the player with sched_setaffinity instead of CPU hotplug; extents
come from the FIEMAP ioctl; hole sizes keep the byte mass of buckets too large for the disk
(Chopper's int() truncation made layout 5 identical to layout 6 on small disks).
"""

import concurrent.futures
import ctypes
import errno
import fcntl
import hashlib
import json
import math
import os
import random
import signal
import stat
import struct
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE]  # deployed beside it; in the collection a link to plugins/module_utils
import ext4_parsers  # noqa: E402  (shipped beside this file)

RESULT_SCHEMA = ext4_parsers.PROBE_RESULT_SCHEMA
JOB_SCHEMA = "ext4-fleet-audit/probe-job/v1"
CONFIRM_SCOPES = ext4_parsers.CONFIRM_SCOPES
MARKER = ".ext4-audit-probe"  # a scratch directory without it is not ours: refuse to touch it
EXIT_CODES = {"ok": 0, "partial": 0, "error": 1, "refused": 4}  # by result status; 2: bad job, 3: signal
REFUSED_EXIT = EXIT_CODES["refused"]
MiB = 1 << 20
PAYLOAD = memoryview(b"\xa5" * MiB)  # fixed bytes: deterministic images, no leaked memory (Chopper wrote malloc garbage)

# linux/loop.h, linux/fs.h, linux/fiemap.h, linux/falloc.h
LOOP_SET_FD, LOOP_CLR_FD, LOOP_SET_STATUS64, LOOP_CONFIGURE = 0x4C00, 0x4C01, 0x4C04, 0x4C0A
LOOP_CTL_GET_FREE = 0x4C82
LO_FLAGS_AUTOCLEAR = 4
LOOP_INFO64 = struct.Struct("=5Q4I64s64s32s2Q")
FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 1
FIEMAP_EXTENT_LAST = 1
FIEMAP_HEADER = struct.Struct("=QQIIII")
FIEMAP_EXTENT = struct.Struct("=QQQQQI12x")
FALLOC_PUNCH = 0x01 | 0x02  # FALLOC_FL_KEEP_SIZE | FALLOC_FL_PUNCH_HOLE
MNT_DETACH = 2

# Options that cannot or must not be replayed on a scratch mount (read-only recovery modes,
# external journals, quota files, DAX); everything else the host has in effect is replayed.
NOT_REPLAYED = ("ro", "rw", "norecovery", "noload", "dax", "journal_dev", "journal_path",
                "usrjquota", "grpjquota", "jqfmt", "test_dummy_encryption", "resuid", "resgid")
# Chopper's lognormal parameters per FreeSpaceLayout: (meanlog, sdlog) of log2(hole blocks).
LAYOUTS = {1: (0.693, 1.0), 2: (1.910, 0.775), 3: (2.442, 0.55), 4: (2.788, 0.325), 5: (3.045, 0.1)}

_libc = ctypes.CDLL(None, use_errno=True)
_libc.fallocate.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int64, ctypes.c_int64]


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


# ------------------------------------------------------------------ loop devices
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
        mounts = ext4_parsers.parse_mountinfo(handle.read())
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


# ------------------------------------------------------------------ scratch directory
# The scratch directory sits in a directory others can write (/dev/shm by default), so the probe
# trusts no path there: every directory is opened by descriptor, one component at a time, without
# following a symlink, and everything after that goes through the descriptors it holds.
DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
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


# ------------------------------------------------------------------ the replica filesystem
def replica(filesystem):
    """mke2fs arguments and mount options that replicate the audited filesystem.

    Returns (mkfs dict, mount option list, adjustments): what could not be replicated is
    said in adjustments, never silently changed."""
    sb = filesystem.get("superblock") or {}
    options = list(filesystem.get("options") or [])
    adjustments = []
    block_size = sb.get("block_size")
    if not block_size:
        try:
            block_size = os.statvfs(filesystem["mountpoint"]).f_bsize
        except (OSError, KeyError):
            block_size = 4096
        adjustments.append("superblock facts unavailable: block size %d from statvfs; inode size, "
                           "journal size and features are mke2fs defaults" % block_size)
    journal = any(o.startswith("data=") for o in options) if not sb else "has_journal" in sb.get("features", [])
    mkfs = {"block_size": block_size, "inode_size": sb.get("inode_size"),
            "journal_bytes": sb.get("journal_bytes") if journal else 0,
            "features": [f for f in sb.get("features", []) if f != "needs_recovery"]}
    if not journal:
        mkfs["journal_bytes"] = 0
        if not sb:
            adjustments.append("no data= option in effect: the filesystem has no journal")
    replayed = [o for o in options if o.split("=", 1)[0] not in NOT_REPLAYED]
    return mkfs, replayed, adjustments


def mkfs_argv(mkfs, disk_size, image):
    argv = ["mke2fs", "-q", "-F", "-t", "ext4", "-b", str(mkfs["block_size"])]
    if mkfs.get("inode_size"):
        argv += ["-I", str(mkfs["inode_size"])]
    features = list(mkfs.get("features") or [])
    journal = mkfs.get("journal_bytes")
    if journal == 0:
        features = [f for f in features if f != "has_journal"] + ["^has_journal"]
    if features:
        argv += ["-O", ",".join(features)]
    if journal:
        # a journal is at most half the disk; the sweep's small disks cannot hold a big one
        argv += ["-J", "size=%d" % max(1, min(journal, disk_size // 8) // MiB)]
    # lazy init: nothing but metadata is written, so a sparse image stays small in tmpfs
    argv += ["-E", "lazy_itable_init=1,lazy_journal_init=1,nodiscard", image, str(disk_size // 1024) + "k"]
    return argv


def run_tool(argv, what):
    env = dict(os.environ, LC_ALL="C")
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                          universal_newlines=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise ProbeError("%s failed (exit %d): %s" % (what, proc.returncode, proc.stdout.strip()[-500:]))


def data_segments(fd, size):
    """(start, end) of each data segment of a sparse file (SEEK_DATA/SEEK_HOLE)."""
    offset = 0
    while offset < size:
        try:
            data = os.lseek(fd, offset, os.SEEK_DATA)
        except OSError as exc:
            if exc.errno == errno.ENXIO:  # no more data
                return
            raise
        offset = os.lseek(fd, data, os.SEEK_HOLE)
        yield data, offset


def copy_sparse(source, target):
    """Copy only the data segments: a fresh sparse copy in milliseconds."""
    with open(source, "rb") as src, open(target, "wb") as dst:
        size = os.fstat(src.fileno()).st_size
        os.ftruncate(dst.fileno(), size)
        for start, end in data_segments(src.fileno(), size):
            todo, pos = end - start, start
            while todo:
                done = os.copy_file_range(src.fileno(), dst.fileno(), todo, pos, pos)
                if done == 0:
                    raise ProbeError("short copy of %s" % source)
                todo, pos = todo - done, pos + done


def content_digest(fd):
    """sha256 of a sparse file: its size, and each data segment's place and bytes."""
    digest = hashlib.sha256()
    size = os.fstat(fd).st_size
    digest.update(b"%d\n" % size)
    for start, end in data_segments(fd, size):
        digest.update(b"%d-%d\n" % (start, end))
        while start < end:
            chunk = os.pread(fd, min(4 * MiB, end - start), start)
            if not chunk:
                raise ProbeError("short read of a cached image")
            digest.update(chunk)
            start += len(chunk)
    return digest.hexdigest()


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


# ------------------------------------------------------------------ free-space layouts
def lognormal_cdf(x, meanlog, sdlog):
    return 0.0 if x <= 0 else 0.5 * math.erfc(-(math.log(x) - meanlog) / (sdlog * math.sqrt(2)))


def hole_sizes(free_blocks, layout):
    """Hole sizes (blocks) for a FreeSpaceLayout, Chopper's distribution: log2 of a hole's size
    is lognormal, and bucket a's probability is the share of punched *bytes* in 2^a-block holes.
    Each hole is followed by one allocated separator block. Buckets larger than the disk give
    their mass to the largest bucket that fits, and counts are rounded by largest remainder, so
    the byte mass is kept (Chopper truncated with int() and punched nothing for layout 5)."""
    meanlog, sdlog = LAYOUTS[layout]
    share = [lognormal_cdf(a + 1, meanlog, sdlog) - lognormal_cdf(a, meanlog, sdlog) for a in range(31)]
    largest = max(a for a in range(31) if (1 << a) + 1 <= max(free_blocks, 2))
    share[largest] += sum(share[largest + 1:])
    share = share[:largest + 1]
    total = sum(share)
    share = [s / total for s in share]
    punched = free_blocks / (1 + sum(s / (1 << a) for a, s in enumerate(share)))
    exact = [punched * s / (1 << a) for a, s in enumerate(share)]
    counts = [int(e) for e in exact]
    budget = free_blocks - sum(c * ((1 << a) + 1) for a, c in enumerate(counts))
    for a in sorted(range(len(exact)), key=lambda a: exact[a] - counts[a], reverse=True):
        if exact[a] - counts[a] > 0 and (1 << a) + 1 <= budget:
            counts[a] += 1
            budget -= (1 << a) + 1
    for a in reversed(range(len(share))):  # what is left: the largest holes of the layout that fit
        if share[a] > 0.001 and (1 << a) + 1 <= budget:
            counts[a] += budget // ((1 << a) + 1)
            budget %= (1 << a) + 1
    sizes = [1 << a for a, c in enumerate(counts) for _unused in range(c)]
    random.Random(1).shuffle(sizes)  # deterministic, as in Chopper
    return sizes


def fragment(mountpoint, layout, block_size):
    """Fill 99% of the free space with one file, then punch the layout's holes into it."""
    vfs = os.statvfs(mountpoint)
    free_blocks = int(vfs.f_bavail * vfs.f_frsize * 0.99) // block_size
    sizes = hole_sizes(free_blocks, layout)
    fd = os.open(os.path.join(mountpoint, "punchfile"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        length = sum(s + 1 for s in sizes) * block_size
        if length:
            os.posix_fallocate(fd, 0, length)
        offset = 0
        for size in sizes:
            offset += block_size  # the separator stays allocated
            punch_hole(fd, offset, size * block_size)
            offset += size * block_size
    finally:
        os.close(fd)
    holes = sorted(sizes)
    return {"holes": len(sizes), "hole_bytes": sum(sizes) * block_size,
            "median_hole_bytes": holes[len(holes) // 2] * block_size if holes else 0}


CACHE_FORMAT = 1  # what a cache entry is; raise it when that changes
CACHE_RECORD_MAX = 64 * 1024  # an entry's record is a few hundred bytes


def build_environment():
    """What shapes a pristine image besides its own settings: the kernel whose allocator
    fragments it, the mke2fs that makes it, and this code (hole sizes, mkfs arguments)."""
    uname = os.uname()
    mke2fs = subprocess.run(["mke2fs", "-V"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
                            env=dict(os.environ, LC_ALL="C"), universal_newlines=True, check=False)
    with open(os.path.abspath(__file__), "rb") as handle:
        code = hashlib.sha256(handle.read()).hexdigest()
    return {"format": CACHE_FORMAT, "kernel": [uname.release, uname.version, uname.machine],
            "mke2fs": mke2fs.stdout.strip()[:200], "probe": code}


def build_options(options):
    """The mount options an image is built under: the host's, without `discard`. A discard
    per punched hole made building the replica of a discard-mounted filesystem 4.6x slower,
    and the free space it leaves is the same block for block (tests/integration/test_probe.py);
    the runs themselves keep every option."""
    return [o for o in options if o != "discard"]


class Images:
    """Pristine images, one per (DiskSize, UsedRatio, FreeSpaceLayout, mkfs settings), in the
    scratch directory's cache/ (kept across runs with keep_cache).

    An entry is named by the digest of everything that shapes it (its settings, the build's
    mount options, build_environment()), and holds the image (NAME.img) and its record
    (NAME.json: those inputs, the image's content digest, its free-space layout). It is used
    only after it checks out, once per run: a regular file of root's with mode 0600 and one
    link, of the size asked for, with the inputs and the content recorded when it was built.
    Anything else there is removed (by descriptor, inside the probe's own directory) and
    rebuilt, and `rejected` says why. The checked image stays open; the runs copy it through
    that descriptor, so what was checked is what they copy."""

    def __init__(self, scratch, mkfs, options):
        self.scratch, self.mkfs, self.options = scratch, mkfs, options
        self.cache_fd = os.open("cache", DIRECTORY, dir_fd=scratch.fd)
        self.environment = build_environment()
        self.held = {}  # entry name -> the checked image's open descriptor
        self.layouts, self.rejected = {}, []
        self.built, self.reused, self.seconds = 0, 0, 0.0

    def get(self, disk_size, used_ratio, layout, mkfs=None):
        mkfs = mkfs or self.mkfs
        options = build_options(self.options)
        inputs = dict(self.environment, disk_size=disk_size, used_ratio=used_ratio, layout=layout, mkfs=mkfs,
                      options=options)
        name = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32]
        if name not in self.held:
            start = now()
            fd, record = self._checked(name, inputs)
            if fd is None:
                fd, record = self._build(name, inputs, disk_size, used_ratio, layout, mkfs, options)
                self.built += 1
            else:
                self.reused += 1
            self.held[name] = fd
            if record["layout"]:
                self.layouts["%d/%g/%d" % (disk_size, used_ratio, layout)] = record["layout"]
            self.seconds += now() - start
        return "/proc/%d/fd/%d" % (os.getpid(), self.held[name])

    def _checked(self, name, inputs):
        """(open image, its record) if the entry is there and checks out, else (None, None)."""
        try:
            fd = os.open(name + ".img", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.cache_fd)
        except FileNotFoundError:
            self._remove(name)  # a record without its image
            return None, None
        except OSError as exc:  # ELOOP: a symbolic link
            self._reject(name, "cannot be opened without following a link (%s)" % exc.strerror)
            return None, None
        try:
            record, why = self._record(name), self._foreign(fd, inputs["disk_size"])
            if not why and (record is None or record.get("inputs") != inputs):
                why = "its record is missing or names other build inputs"
            if not why and record.get("digest") != content_digest(fd):
                why = "its content is not what was built (the digest recorded at build time differs)"
        except BaseException:
            os.close(fd)
            raise
        if why:
            os.close(fd)
            self._reject(name, why)
            return None, None
        return fd, record

    @staticmethod
    def _foreign(fd, size):
        """Why an open cache file is not one the probe made, or None."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o600 or st.st_nlink != 1:
            return "owned by uid %d with mode %04o and %d links (the probe makes its own as root, 0600, one link)" % (
                st.st_uid, stat.S_IMODE(st.st_mode), st.st_nlink)
        if size is not None and st.st_size != size:
            return "%d bytes, not %d" % (st.st_size, size)
        return None

    def _record(self, name):
        try:
            fd = os.open(name + ".json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.cache_fd)
        except OSError:
            return None
        try:
            if self._foreign(fd, None):
                return None
            text = os.read(fd, CACHE_RECORD_MAX + 1)
        finally:
            os.close(fd)
        try:
            record = json.loads(text.decode("utf-8")) if len(text) <= CACHE_RECORD_MAX else None
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def _reject(self, name, why):
        self.rejected.append("cache/%s.img: %s; rebuilt" % (name, why))
        self._remove(name)

    def _remove(self, name):
        for suffix in (".img", ".json", ".img.new", ".json.new"):
            remove_tree(self.cache_fd, name + suffix)

    def _build(self, name, inputs, disk_size, used_ratio, layout, mkfs, options):
        self._remove(name)
        fd = os.open(name + ".img.new", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=self.cache_fd)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.ftruncate(fd, disk_size)
            run_tool(mkfs_argv(mkfs, disk_size, self.scratch.path("cache", name + ".img.new")), "mke2fs")
            record = {"inputs": inputs, "layout": None}
            if used_ratio or layout != 6:
                with Mounted(self.scratch.path("cache", name + ".img.new"), self.scratch.path("mnt", "build"),
                             options) as mnt:
                    if used_ratio:
                        placeholder = os.open(os.path.join(mnt.target, "placeholder"),
                                              os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
                        try:
                            os.posix_fallocate(placeholder, 0, int(disk_size * used_ratio) // mkfs["block_size"]
                                               * mkfs["block_size"])
                        finally:
                            os.close(placeholder)
                    if layout != 6:
                        record["layout"] = fragment(mnt.target, layout, mkfs["block_size"])
            record["digest"] = content_digest(fd)
            text = json.dumps(record, sort_keys=True).encode()
            out = os.open(name + ".json.new", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                          0o600, dir_fd=self.cache_fd)
            try:
                os.fchmod(out, 0o600)
                os.write(out, text)
            finally:
                os.close(out)
            # the record first: an image in place always has one (a killed build leaves .new files)
            os.rename(name + ".json.new", name + ".json", src_dir_fd=self.cache_fd, dst_dir_fd=self.cache_fd)
            os.rename(name + ".img.new", name + ".img", src_dir_fd=self.cache_fd, dst_dir_fd=self.cache_fd)
        except BaseException:
            os.close(fd)
            raise
        self.scratch.check_cap()
        return fd, record

    def prune(self):
        """Remove the entries this run did not use (other settings, another kernel or code):
        the cache holds what the last run needed, no more."""
        kept = set(name + suffix for name in self.held for suffix in (".img", ".json"))
        for entry in os.listdir(self.cache_fd):
            if entry not in kept:
                remove_tree(self.cache_fd, entry)

    def close(self):
        for fd in list(self.held.values()) + [self.cache_fd]:
            os.close(fd)
        self.held = {}


# ------------------------------------------------------------------ extents (FIEMAP)
def fiemap(fd, max_extents=512):
    """The file's extents as (logical, physical, length) in bytes, via FS_IOC_FIEMAP."""
    extents, start = [], 0
    while True:
        request = bytearray(FIEMAP_HEADER.size + FIEMAP_EXTENT.size * max_extents)
        FIEMAP_HEADER.pack_into(request, 0, start, (1 << 64) - 1 - start, FIEMAP_FLAG_SYNC, 0, max_extents, 0)
        fcntl.ioctl(fd, FS_IOC_FIEMAP, request)
        mapped = FIEMAP_HEADER.unpack_from(request, 0)[3]
        last = False
        for i in range(mapped):
            logical, physical, length, _unused, _unused, flags = FIEMAP_EXTENT.unpack_from(
                request, FIEMAP_HEADER.size + i * FIEMAP_EXTENT.size)
            extents.append((logical, physical, length))
            last = bool(flags & FIEMAP_EXTENT_LAST)
        if last or mapped == 0:
            return extents
        start = extents[-1][0] + extents[-1][2]


def extent_metrics(extents, block_size):
    """d-span (bytes from the first to the last physical byte), extent count, and the
    Smith-Seltzer layout score: the share of blocks placed right after the file's previous block."""
    if not extents:
        return {"dspan": 0, "extents": 0, "layout_score": 1.0}
    extents = sorted(extents)
    blocks = sum(length // block_size for _unused, _unused, length in extents)
    good = sum(length // block_size - 1 for _unused, _unused, length in extents)
    good += sum(1 for prev, cur in zip(extents, extents[1:]) if prev[1] + prev[2] == cur[1])
    return {"dspan": max(p + n for _unused, p, n in extents) - min(p for _unused, p, _unused in extents),
            "extents": len(extents), "layout_score": round(good / (blocks - 1), 4) if blocks > 1 else 1.0}


# ------------------------------------------------------------------ the workload player
def tree_path(node):
    """Chopper's directory tree: a complete binary tree, BFS ids, only levels >= 2 created."""
    parts = []
    while node >= 3:
        parts.append("dir.%d" % node)
        node = (node - 1) // 2
    return "/".join(reversed(parts))


TREE = tuple(tree_path(node) for node in range(3, 31))  # made once: play() runs 256 times a sweep


def file_dirs(file_count, span):
    """Files sit at evenly spaced places among dirs 3 .. 2+span (1 file: the last one)."""
    candidates = list(range(3, 3 + span))
    if file_count == 1:
        return [candidates[-1]]
    return [candidates[round(i * (len(candidates) - 1) / (file_count - 1))] for i in range(file_count)]


def write_plan(treatment):
    """The writes of one file, in order: a list of passes, each a list of (offset, length)."""
    chunks, size, density = treatment["ChunkCount"], treatment["FileSize"], treatment["InternalDensity"]
    chunk = size // chunks
    order = treatment["ChunkOrder"]
    if density <= 1:
        solid = int(chunk * density)
        return [[(chunk * i + chunk - solid, solid) for i in order]]
    tail = int(chunk * (density - 1))
    return [[(chunk * i, chunk) for i in order], [(chunk * i + chunk - tail, tail) for i in order]]


def play(mountpoint, treatment, cpus, log=None):
    """Play one treatment; returns the file paths written. Two files are written interleaved,
    chunk by chunk; Fsync and Sync bitmaps apply in write order; a Sync bit closes the file
    and syncs the scratch filesystem (syncfs, not the whole machine). `log`, if a list, gets
    every file operation in order (the tests check them against Chopper's semantics)."""
    record = log.append if log is not None else (lambda op: None)
    # Every file operation is relative to the mount's root, opened once: the mount point's path
    # goes through /proc/<pid>/fd (Scratch.path), which costs a lookup per use.
    root = os.open(mountpoint, DIRECTORY)
    names = [os.path.join(TREE[d - 3], "%d.file" % i)
             for i, d in enumerate(file_dirs(treatment["FileCount"], treatment["DirectorySpan"]))]
    fsync_bits, sync_bits = treatment["Fsync"], treatment["Sync"]
    previous = os.sched_getaffinity(0)
    fds = dict.fromkeys(names)
    try:
        for path in TREE:
            os.mkdir(path, dir_fd=root)
        os.sched_setaffinity(0, cpus[:treatment["CPUCount"]])
        for writes in write_plan(treatment):
            for k, (offset, length) in enumerate(writes):
                for i, name in enumerate(names):
                    if fds[name] is None:
                        fds[name] = os.open(name, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644, dir_fd=root)
                        record(("open", i))
                    os.pwrite(fds[name], PAYLOAD[:length], offset)
                    record(("write", i, offset, length))
                    if fsync_bits[k]:
                        os.fsync(fds[name])
                        record(("fsync", i))
                    if sync_bits[k]:
                        os.close(fds[name])
                        fds[name] = None
                        record(("close", i))
                        syncfs(root)
                        record(("syncfs",))
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
        os.sched_setaffinity(0, previous)
        os.close(root)
    return [os.path.join(mountpoint, name) for name in names]


def measure_run(paths, block_size, file_size):
    files = []
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            metrics = extent_metrics(fiemap(fd), block_size)
            metrics.update(name=os.path.basename(path), bytes=os.fstat(fd).st_size)
        finally:
            os.close(fd)
        files.append(metrics)
    return {"dspan": max(f["dspan"] for f in files), "ideal": file_size,
            "extents": sum(f["extents"] for f in files),
            "layout_score": min(f["layout_score"] for f in files), "files": files}


class RunSlots:
    """Two run slots that take turns, set up and torn down by one background thread: while one
    run plays, the previous run is unmounted (umount's journal flush) and the run after the
    playing one gets its fresh copy, loop device and mount. These are a run's largest fixed
    costs, and they touch other filesystems than the one being measured. The thread works in
    submission order, so a slot is set up again only after its last run was released; a run
    whose release failed stops the sweep (its mount would stay under the next)."""

    def __init__(self, scratch, options, helper):
        self.scratch, self.options, self.helper = scratch, options, helper
        self.paths = [(scratch.path("runs", "run%d.img" % k), scratch.path("mnt", "run%d" % k)) for k in (0, 1)]
        self.mounted = [False, False]
        self.stuck = [None, None]  # a release that failed, per slot
        self.pending = [None, None]

    def turn(self, slot, pristine, error=None):
        """Queue: release the slot's last run, then mount a fresh copy of `pristine` there (None:
        nothing). error: why the slot's next run has no image; ready() raises it."""
        self.pending[slot] = self.helper.submit(self._turn, slot, pristine, error)

    def wait(self, slot):
        """Wait for the slot's queued turn; its error, if any, is raised here, in the sweep's thread."""
        pending, self.pending[slot] = self.pending[slot], None
        if pending is not None:
            pending.result()

    def ready(self, slot):
        """The mount point of the slot's run, once it is set up (never a bare directory)."""
        self.wait(slot)
        if not self.mounted[slot]:
            raise ProbeError("run slot %d has no filesystem mounted" % slot)
        return self.paths[slot][1]

    def _turn(self, slot, pristine, error):
        image, target = self.paths[slot]
        if self.stuck[slot] is not None:  # never mount over it; Scratch's cleanup detaches it at the end
            if pristine is None and error is None:
                return
            raise self.stuck[slot]
        if self.mounted[slot]:
            try:
                umount(target)  # the loop device goes with it: autoclear
            except OSError as exc:
                self.stuck[slot] = ProbeError("the run before it could not be released from %s: %s" % (
                    os.path.join(self.scratch.real_path(), "mnt", "run%d" % slot), os.strerror(exc.errno)))
                raise self.stuck[slot]
            self.mounted[slot] = False
            os.unlink(image)
        if error is not None:
            raise error
        if pristine is None:
            return
        try:
            copy_sparse(pristine, image)
            Mounted(image, target, self.options).__enter__()  # the next turn unmounts it
        except OSError as exc:
            exc = self.scratch.full(exc)  # before the run image is freed
            if os.path.exists(image):
                os.unlink(image)
            raise exc
        self.mounted[slot] = True


def sweep(scratch, images, plan, deadline, progress):
    """Every treatment of the plan on a fresh sparse copy of its pristine image (RunSlots: the
    copies are made, mounted and released in the background). The pristine images are got in
    this thread, so building one (a cold cache) never overlaps a run and its time stays out of
    runs_seconds."""
    cpus = sorted(os.sched_getaffinity(0))
    runs, errors, stopped_by = [], [], None
    started = now()
    treatments = plan["treatments"]

    def queue(slot, number):
        """Queue the set-up of the plan's run `number` (1-based; past the end: a release only)."""
        if number > len(treatments):
            return slots.turn(slot, None)
        treatment = treatments[number - 1]
        try:
            pristine = images.get(treatment["DiskSize"], treatment["UsedRatio"], treatment["FreeSpaceLayout"])
        except (OSError, ProbeError) as exc:
            return slots.turn(slot, None, error=exc)
        return slots.turn(slot, pristine)

    with concurrent.futures.ThreadPoolExecutor(1) as helper:
        slots = RunSlots(scratch, images.options, helper)
        try:
            queue(1, 1)
            queue(0, 2)
            for number, treatment in enumerate(treatments, 1):
                slot = number % 2
                if now() > deadline:
                    stopped_by = "time budget"
                    break
                try:
                    try:
                        paths = play(slots.ready(slot), treatment, cpus)
                        result = measure_run(paths, images.mkfs["block_size"], treatment["FileSize"])
                    finally:
                        queue(slot, number + 2)
                    result["id"] = treatment["id"]
                    runs.append(result)
                except (OSError, ProbeError) as exc:
                    exc = scratch.full(exc)
                    errors.append("treatment %s: %s" % (treatment["id"], exc))
                    if isinstance(exc, ProbeError) or len(errors) >= 5:
                        stopped_by = exc.what if isinstance(exc, ScratchFull) else "error"
                        break
                if number % 32 == 0 or number == len(treatments):
                    progress("sweep %d/%d runs, %.1f s" % (number, len(treatments), now() - started))
        finally:
            for slot in (0, 1):  # whatever is queued or still mounted, released before the slots go
                try:
                    slots.wait(slot)
                except (OSError, ProbeError):
                    pass  # a set-up no run used: its error was the sweep's, or it never played
                slots.turn(slot, None)
                try:
                    slots.wait(slot)
                except (OSError, ProbeError) as exc:
                    errors.append("cleanup of the last runs: %s" % exc)
                    stopped_by = stopped_by or "error"
    return {"planned": len(treatments), "completed": len(runs), "stopped_by": stopped_by,
            "images_built": images.built, "images_reused": images.reused, "cache_rejected": images.rejected,
            "images_seconds": round(images.seconds, 3),
            "runs_seconds": round(now() - started - images.seconds, 3), "layouts": images.layouts,
            "runs": runs, "errors": errors}


# ------------------------------------------------------------------ confirmation probes
def with_options(options, add, drop=()):
    """The host's options with `add` forced on and the opposite spellings (and `drop`) removed."""
    def name(option):
        return ext4_parsers.NEGATIONS.get(option, option).split("=")[0]
    names = set(name(o) for o in add) | set(drop)
    kept = [o for o in options if name(o) not in names]
    return kept + list(add)


def percentile(values, q):
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def timed(func, *args):
    start = time.perf_counter()
    func(*args)
    return time.perf_counter() - start


def rename_workload(mnt, size=4 * MiB, iterations=12):
    """Seed 000: write a file, then rename a freshly written one over it; the rename's latency."""
    latencies = []
    for i in range(iterations):
        for name in ("victim", "new"):
            with open(os.path.join(mnt, name), "wb") as handle:
                for _unused in range(size // MiB):
                    handle.write(PAYLOAD)
        latencies.append(timed(os.rename, os.path.join(mnt, "new"), os.path.join(mnt, "victim")))
    return percentile(latencies, 0.5)


def writeback_workload(mnt, size=16 * MiB):
    """Seed 001: buffered writes, then one fsync; the whole time (cost of the write-back)."""
    start = time.perf_counter()
    fd = os.open(os.path.join(mnt, "bulk"), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    try:
        for _unused in range(size // MiB):
            os.write(fd, PAYLOAD)
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def xattr_workload(mnt, files=1500):
    """Seed 003: two 64-byte user xattrs per file; p99 and p50 of setxattr latency."""
    latencies = []
    value = b"x" * 64
    for i in range(files):
        path = os.path.join(mnt, "x%d" % i)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        for name in (b"user.probe.a", b"user.probe.b"):
            latencies.append(timed(os.setxattr, path, name, value))
    return {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99)}


def existing_entry(mountpoint):
    """A path that exists inside the mount (a directory if there is one). Not the mount point
    itself: mkdir on that is answered by the parent filesystem and never reaches the network."""
    with os.scandir(mountpoint) as entries:
        names = sorted((not e.is_dir(follow_symlinks=False), e.name) for e in entries)
    if not names:
        raise ProbeError("%s is empty: there is no existing path to mkdir without creating one" % mountpoint)
    return os.path.join(mountpoint, names[0][1])


def mkdir_existing_latency(path, iterations=200):
    """Seed 002: mkdir on a path that exists: EEXIST, never a change."""
    latencies = []
    for _unused in range(iterations):
        start = time.perf_counter()
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        else:  # cannot happen for an existing path; undo at once if a race made it
            os.rmdir(path)
            raise ProbeError("mkdir created %s: the path did not exist" % path)
        latencies.append(time.perf_counter() - start)
    return percentile(latencies, 0.5)


def mkdir_latency_child(path):
    # as the probe itself is started (ext4_probe_run): isolated, no site-packages, no bytecode beside it
    out = subprocess.run([sys.executable, "-I", "-S", "-B", os.path.abspath(__file__), "mkdir-latency", path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, universal_newlines=True, check=False)
    if out.returncode != 0:
        raise ProbeError("mkdir timing on %s failed: %s" % (path, out.stderr.strip()[-300:]))
    return float(out.stdout)


def paired(risky_samples, safe_samples):
    ratios = [r / s for r, s in zip(risky_samples, safe_samples) if s]
    if not ratios:
        return None, None
    return round(percentile(ratios, 0.5), 4), [round(min(ratios), 4), round(max(ratios), 4)]


class Confirmations:
    """Each probe compares the host's risky option set with the safe alternative: same kernel,
    same workload, fresh scratch filesystems, repetitions alternating risky and safe."""

    DISK = 4 << 30  # sparse; room for the 1 GiB journal of the xattr probe's safe side
    PROBES = ext4_parsers.CONFIRMATION_PROBES
    SEEDS = {"rename_over_existing": "000", "buffered_write_fsync": "001", "netfs_mkdir_existing": "002",
             "xattr_set": "003"}
    # The options each probe's risky side mounts on top of the replica's; its safe side changes one
    # of them. The scope `own` runs a probe only where the replica already has all of them in effect.
    # None for the other two: xattr_set's risky side is the host's own journal and inode size, and
    # netfs_mkdir_existing times the host's own network mounts.
    RISKY_OPTIONS = {"rename_over_existing": ("data=ordered", "delalloc", "auto_da_alloc"),
                     "buffered_write_fsync": ("dioread_nolock", "nodelalloc")}

    def __init__(self, scratch, images, netfs, repetitions, deadline, scope="all", mountpoint=None,
                 named_options=False):
        """scope: one of CONFIRM_SCOPES; mountpoint: the filesystem replicated; named_options: the
        replica mounts the job's option set, not the host's (both for a skipped entry's reason)."""
        self.scratch, self.images = scratch, images
        self.netfs, self.repetitions, self.deadline = netfs, repetitions, deadline
        self.scope = scope
        # whose options the replica mounts, in words
        self.configuration = "the job's option set" if named_options else "your configuration"
        self.replica = "the replica of %s%s" % (mountpoint, " with the job's mount options" if named_options else "")
        self.options = images.options

    def entry(self, probe_id, metric, risky_label, risky_options, safe_label, safe_options):
        return {"id": probe_id, "seed": self.SEEDS[probe_id], "status": "measured", "reason": None, "metric": metric,
                "unit": "s", "mountpoint": None, "repetitions": 0, "ratio": None, "ratio_spread": None,
                "risky": {"label": risky_label, "options": ",".join(risky_options), "samples": []},
                "safe": {"label": safe_label, "options": ",".join(safe_options), "samples": []}}

    def skipped(self, probe_id, reason):
        """A probe that measured nothing, with the keys of a measured entry."""
        return {"id": probe_id, "seed": self.SEEDS[probe_id], "status": "skipped", "reason": reason, "metric": None,
                "unit": "s", "mountpoint": None, "repetitions": 0, "ratio": None, "ratio_spread": None,
                "risky": None, "safe": None}

    def risky_options(self, probe_id):
        return with_options(self.options, self.RISKY_OPTIONS[probe_id])

    def not_in_effect(self, probe_id):
        """The options probe_id's risky side adds that the replica does not have in effect
        (compared as the kernel reads them: nodelalloc is delalloc off); [] for its own configuration."""
        in_effect = ext4_parsers.mount_option_map(self.options)
        return [option for option in self.RISKY_OPTIONS.get(probe_id, ())
                if any(in_effect.get(name) != value
                       for name, value in ext4_parsers.mount_option_map([option]).items())]

    def compare(self, entry, risky, safe, workload, pick=lambda v: v):
        """risky/safe: (mkfs dict, options); each repetition measures both on fresh copies."""
        raw = {"risky": [], "safe": []}
        run_image = self.scratch.path("runs", "confirm.img")
        try:
            for _unused in range(self.repetitions):
                if now() > self.deadline:
                    entry["reason"] = "time budget reached after %d repetitions" % entry["repetitions"]
                    break
                for side, (mkfs, options) in (("risky", risky), ("safe", safe)):
                    copy_sparse(self.images.get(self.DISK, 0, 6, mkfs), run_image)
                    try:
                        with Mounted(run_image, self.scratch.path("mnt", "confirm"), options) as mnt:
                            value = workload(mnt.target)
                    finally:
                        os.unlink(run_image)
                    raw[side].append(value)
                    entry[side]["samples"].append(round(pick(value), 9))
                entry["repetitions"] += 1
        except (OSError, ProbeError) as exc:
            entry.update(status="error", reason=str(self.scratch.full(exc)))
            return entry
        if not entry["repetitions"]:
            entry["status"] = "skipped"
            return entry
        entry["ratio"], entry["ratio_spread"] = paired(entry["risky"]["samples"], entry["safe"]["samples"])
        if isinstance(raw["risky"][0], dict):  # several percentiles: a ratio for each
            entry["ratios"] = dict((q, paired([v[q] for v in raw["risky"]], [v[q] for v in raw["safe"]])[0])
                                   for q in raw["risky"][0])
        return entry

    def journalled(self, entry):
        """The replica's mkfs settings, with a journal if it has none (data= needs one)."""
        mkfs = dict(self.images.mkfs)
        if not mkfs.get("journal_bytes"):
            mkfs["journal_bytes"] = 64 * MiB
            mkfs["features"] = [f for f in mkfs.get("features", []) if f != "^has_journal"]
            entry["replica_note"] = "the host's filesystem has no journal; the replica got a 64 MiB one"
        return mkfs

    def rename_over_existing(self):
        risky = self.risky_options("rename_over_existing")
        safe = with_options(risky, ["noauto_da_alloc"])
        entry = self.entry("rename_over_existing", "rename(2) over a freshly written file, p50",
                           "auto_da_alloc", risky, "noauto_da_alloc", safe)
        mkfs = self.journalled(entry)
        return self.compare(entry, (mkfs, risky), (mkfs, safe), rename_workload)

    def buffered_write_fsync(self):
        changed = self.RISKY_OPTIONS["buffered_write_fsync"]
        risky = self.risky_options("buffered_write_fsync")
        safe = with_options(risky, ["delalloc"])
        entry = self.entry("buffered_write_fsync", "16 MiB buffered write + fsync", ",".join(changed), risky,
                           ",".join(with_options(changed, ["delalloc"])), safe)
        mkfs = self.journalled(entry)
        return self.compare(entry, (mkfs, risky), (mkfs, safe), writeback_workload)

    def xattr_set(self):
        host = dict(self.images.mkfs)
        safe = dict(host, journal_bytes=1 << 30, inode_size=256)
        label = "journal %s, inode %s" % (
            "%d MiB" % (host["journal_bytes"] // MiB) if host.get("journal_bytes") else "none",
            host.get("inode_size") or "mke2fs default")
        entry = self.entry("xattr_set", "setxattr latency, p99", label, self.options,
                           "journal 1024 MiB, inode 256", self.options)
        return self.compare(entry, (host, self.options), (safe, self.options), xattr_workload,
                            pick=lambda v: v["p99"])

    def netfs_mkdir_existing(self):
        """One entry per network mount. The timing runs in a child process with a timeout,
        so a hung server cannot hang the probe; the local side is a scratch ext4 mount."""
        entries = []
        run_image = self.scratch.path("runs", "confirm.img")
        for netfs in self.netfs:
            path = netfs["mountpoint"]
            entry = self.entry("netfs_mkdir_existing", "mkdir(2) on an existing path, p50",
                               netfs.get("fstype") or "network filesystem", [], "local ext4", self.options)
            entry["mountpoint"] = path
            try:  # a full scratch is this entry's error, not the whole probe's
                copy_sparse(self.images.get(self.DISK, 0, 6), run_image)
                remote = existing_entry(path)
                with Mounted(run_image, self.scratch.path("mnt", "confirm"), self.options) as mnt:
                    local = os.path.join(mnt.target, "existing")
                    os.mkdir(local)
                    for _unused in range(self.repetitions):
                        if now() > self.deadline:
                            entry["reason"] = "time budget reached after %d repetitions" % entry["repetitions"]
                            break
                        for side, where in (("risky", remote), ("safe", local)):
                            entry[side]["samples"].append(mkdir_latency_child(where))
                        entry["repetitions"] += 1
                entry["ratio"], entry["ratio_spread"] = paired(entry["risky"]["samples"], entry["safe"]["samples"])
            except subprocess.TimeoutExpired:
                entry.update(status="error", reason="mkdir on %s did not answer within 30 s" % path)
            except (OSError, ProbeError) as exc:
                entry.update(status="error", reason=str(self.scratch.full(exc)))
            finally:
                if os.path.exists(run_image):
                    os.unlink(run_image)
            entries.append(entry)
        if not entries:
            entries.append(self.skipped("netfs_mkdir_existing", "no network filesystem is mounted on this host"))
        return entries

    def run(self, wanted, progress):
        results = []
        for probe_id in wanted:
            if probe_id not in self.PROBES:
                results.append({"id": probe_id, "status": "error", "reason": "unknown confirmation probe"})
                continue
            if now() > self.deadline:
                results.append({"id": probe_id, "status": "skipped", "reason": "time budget reached"})
                continue
            missing = ",".join(self.not_in_effect(probe_id)) if self.scope == "own" else ""
            if missing:  # its number would be for reference only, and it costs the host time
                reason = "not %s: %s does not use %s (set chopper_probe_confirm_scope: all to measure it)" % (
                    self.configuration, self.replica, missing)
                results.append(self.skipped(probe_id, reason))
                progress("confirmation %s skipped: not %s (no %s)" % (probe_id, self.configuration, missing))
                continue
            outcome = getattr(self, probe_id)()
            outcome = outcome if isinstance(outcome, list) else [outcome]
            results.extend(outcome)
            skipped = [entry["reason"] for entry in outcome if entry["status"] == "skipped"]
            progress("confirmation %s %s" % (probe_id, "skipped: " + skipped[0] if len(skipped) == len(outcome) else "done"))
        return results


# ------------------------------------------------------------------ Chopper's four allocator issues
# He et al. (FAST '15, section 5) traced ext4's layout tail on 3.12 to four allocator policies. Each
# experiment below plays a workload that meets the policy's trigger, and the same workload with
# only the trigger taken away, on fresh copies of one pristine image (the same 256 MiB, unfragmented
# image every run uses), trigger and control alternating which goes first. The measure is Chopper's:
# the largest d-span (FIEMAP) among the files the policy places. Every write is flushed at once
# (fsync), so each chunk is one allocation request made in the writer's own thread, on its CPU, at
# the moment the workload chooses: the policies act per request, and a flush makes the request.
#
# Operations are tuples, the player's own log vocabulary (play): ("open", f), ("write", f, offset,
# length), ("fsync", f), ("close", f), ("syncfs",), plus ("cpu", k): run on the k-th allowed CPU.
KiB = 1 << 10
ALLOCATOR_ISSUES = (("scheduler_dependency", "Scheduler Dependency"), ("special_end", "Special End"),
                    ("shared_global", "Shared Global"), ("normalization", "Normalization"))
ALLOCATOR_PAIRS = 12       # trigger/control pairs per issue
ALLOCATOR_MIN_PAIRS = 8    # fewer, and no effect is not evidence of absence
ALLOCATOR_ALPHA = 0.05
ALLOCATOR_MIN_RATIO = 1.2  # p90 d-span, trigger over control: smaller is not a layout problem
ALLOCATOR_TEST = "exact one-sided sign test (trigger d-span > control), ties dropped"


def flushed_writes(f, chunks, cpus=None):
    """Each (offset, length) written and flushed; cpus[i]: the CPU the i-th chunk runs on."""
    ops = []
    for i, (offset, length) in enumerate(chunks):
        if cpus is not None:
            ops.append(("cpu", cpus[i]))
        ops += [("write", f, offset, length), ("fsync", f)]
    return ops


def scheduler_dependency_ops(trigger):
    """Four small files (32 KiB, under mb_stream_req's 64 KiB), each written in four flushed 8 KiB
    chunks. Small files are placed in the preallocation of the flushing CPU's locality group: on
    one CPU the chunks of a file sit side by side; flushed from alternating CPUs they go to two
    preallocations (2 MiB each by default), so a file's d-span spans the distance between them."""
    ops = []
    for f in range(4):
        chunks = [(8 * KiB * i, 8 * KiB) for i in range(4)]
        ops += [("open", f)] + flushed_writes(f, chunks, [i % 2 if trigger else 0 for i in range(4)]) + [("close", f)]
    return ops + [("syncfs",)], [0, 1, 2, 3]


def special_end_ops(trigger):
    """A 256 KiB file: three 64 KiB chunks flushed while open, then closed, synced and reopened,
    and its last chunk written at the end of the file. Trigger: the file is closed before that
    chunk is flushed, so the last extent is allocated for a closed file at its end (the three
    conditions: no preallocation for it, unlike the rest of the file). Control: the last chunk is
    flushed before the close, while the file is open. The d-span shows where the last extent went."""
    chunk = 64 * KiB
    ops = [("open", 0)] + flushed_writes(0, [(chunk * i, chunk) for i in range(3)])
    ops += [("close", 0), ("syncfs",), ("open", 0), ("write", 0, 3 * chunk, chunk)]
    ops += ([] if trigger else [("fsync", 0)]) + [("close", 0), ("syncfs",)]
    return ops, [0]


def shared_global_ops(trigger):
    """A file that grows from small to large (four flushed 32 KiB chunks: 32 KiB is a small file,
    from 96 KiB on a large one). Once large, its next extent's goal is the group of the last large
    allocation anywhere in the filesystem. Trigger: another file gets 1 MiB written and flushed
    before each of its chunks, so that last large allocation is elsewhere; control: the growing file
    alone (the same operations without the other file's). Only the growing file is measured."""
    chunk, ops = 32 * KiB, [("open", 0)]
    if trigger:
        ops.append(("open", 1))
    for i in range(4):
        if trigger:
            ops += flushed_writes(1, [(MiB * i, MiB)])
        ops += flushed_writes(0, [(chunk * i, chunk)])
    ops += [("close", 0)] + ([("close", 1)] if trigger else [])
    return ops + [("syncfs",)], [0]


def normalization_ops(trigger):
    """A large sparse file: four 256 KiB chunks, each holding 128 KiB of data, written in the
    paper's order 3-0-1-2 and flushed one by one. Normalization widens a request to an aligned
    window; the paper's bug moved its logical start back without moving the physical goal, so the
    request no longer fits next to the file's other extents and a distant search follows. Trigger:
    the data sits at the end of each chunk (Chopper's layout), so each request starts inside the
    window and normalization moves its start. Control: the same bytes at the start of each chunk,
    where the request is already aligned and the start stays. Same lengths, same order."""
    chunk, data = 256 * KiB, 128 * KiB
    chunks = [(chunk * i + (chunk - data if trigger else 0), data) for i in (3, 0, 1, 2)]
    return [("open", 0)] + flushed_writes(0, chunks) + [("close", 0), ("syncfs",)], [0]


ALLOCATOR_WORKLOADS = {"scheduler_dependency": scheduler_dependency_ops, "special_end": special_end_ops,
                       "shared_global": shared_global_ops, "normalization": normalization_ops}


def play_ops(mountpoint, ops, cpus):
    """Play operations on files 0.file, 1.file, ... at the mount's root; returns the paths.
    It starts on the first allowed CPU: a workload left to migrate between CPUs would meet the
    Scheduler Dependency in every experiment (seen on 6.12: scattered control runs)."""
    root = os.open(mountpoint, DIRECTORY)
    previous = os.sched_getaffinity(0)
    fds = {}
    try:
        os.sched_setaffinity(0, [cpus[0]])
        for op in ops:
            kind, f = op[0], op[1] if len(op) > 1 else None
            if kind == "open":
                fds[f] = os.open("%d.file" % f, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644, dir_fd=root)
            elif kind == "write":
                os.pwrite(fds[f], PAYLOAD[:op[3]], op[2])
            elif kind == "fsync":
                os.fsync(fds[f])
            elif kind == "close":
                os.close(fds.pop(f))
            elif kind == "syncfs":
                syncfs(root)
            elif kind == "cpu":
                os.sched_setaffinity(0, [cpus[f]])
            else:
                raise ProbeError("unknown workload operation %r" % (op,))
    finally:
        for fd in fds.values():
            os.close(fd)
        os.sched_setaffinity(0, previous)
        os.close(root)
    names = sorted(set(op[1] for op in ops if op[0] == "open"))
    return [os.path.join(mountpoint, "%d.file" % f) for f in names]


def largest_dspan(paths, block_size):
    spans = []
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            spans.append(extent_metrics(fiemap(fd), block_size)["dspan"])
        finally:
            os.close(fd)
    return max(spans)


def sign_test(trigger, control):
    """One-sided exact sign test that trigger values exceed their paired control values: the
    binomial tail P(X >= wins) for X ~ Bin(n, 1/2), n the pairs that differ (ties dropped)."""
    wins = sum(1 for t, c in zip(trigger, control) if t > c)
    n = wins + sum(1 for t, c in zip(trigger, control) if t < c)
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2.0 ** n


def quantile(values, q):
    """Linear interpolation between order statistics (R's type 7, the controller's numpy default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def allocator_effect(trigger, control):
    """Ratios of the d-span quantiles (trigger over control) and each side's tail share: the share
    of its runs at or above the p90 of both sides' runs together (Chopper's tail)."""
    if not trigger:
        return {"dspan_p50_ratio": None, "dspan_p90_ratio": None, "tail_share_trigger": None,
                "tail_share_control": None}
    effect = {}
    for name, q in (("dspan_p50_ratio", 0.5), ("dspan_p90_ratio", 0.9)):
        below = quantile(control, q)
        effect[name] = round(quantile(trigger, q) / below, 4) if below else None
    threshold = quantile(trigger + control, 0.9)
    for side, values in (("trigger", trigger), ("control", control)):
        effect["tail_share_" + side] = round(sum(1 for v in values if v >= threshold) / len(values), 4)
    return effect


def allocator_verdict(pairs, p_value, p90_ratio):
    """present: the trigger makes the d-span larger (p < ALLOCATOR_ALPHA) by a margin that matters
    (p90 ratio >= ALLOCATOR_MIN_RATIO); absent: no significant difference over at least
    ALLOCATOR_MIN_PAIRS pairs; anything else is inconclusive. Returns (verdict, reason)."""
    if pairs < ALLOCATOR_MIN_PAIRS:
        return "inconclusive", "%d pairs measured, %d needed" % (pairs, ALLOCATOR_MIN_PAIRS)
    if p_value >= ALLOCATOR_ALPHA:
        return "absent", None
    if p90_ratio is not None and p90_ratio >= ALLOCATOR_MIN_RATIO:
        return "present", None
    return "inconclusive", "the trigger's d-spans are larger (p %.3g) but the p90 ratio %s is under %g" % (
        p_value, "n/a" if p90_ratio is None else "%.3g" % p90_ratio, ALLOCATOR_MIN_RATIO)


class Allocator:
    """The four experiments, within a deadline; each issue's outcome is measured or says why not."""

    DISK = 256 * MiB  # the image the mount check already uses: no extra build

    def __init__(self, scratch, images, deadline, pairs=ALLOCATOR_PAIRS):
        self.scratch, self.images, self.deadline, self.pairs = scratch, images, deadline, pairs
        self.cpus = sorted(os.sched_getaffinity(0))

    def issue(self, issue_id, name):
        entry = {"id": issue_id, "name": name, "verdict": "inconclusive", "reason": None, "pairs": 0,
                 "effect": allocator_effect([], []), "p_value": None, "test": ALLOCATOR_TEST}
        if issue_id == "scheduler_dependency" and len(self.cpus) < 2:
            entry["reason"] = "one CPU: cannot be measured"
            return entry
        samples = {True: [], False: []}
        run_image = self.scratch.path("runs", "allocator.img")
        for number in range(self.pairs):
            if now() > self.deadline:
                entry["reason"] = "time budget reached after %d pairs" % number
                break
            for trigger in ((True, False) if number % 2 == 0 else (False, True)):
                ops, measured = ALLOCATOR_WORKLOADS[issue_id](trigger)
                copy_sparse(self.images.get(self.DISK, 0, 6), run_image)
                try:
                    self.scratch.check_cap()
                    with Mounted(run_image, self.scratch.path("mnt", "allocator"), self.images.options) as mnt:
                        paths = play_ops(mnt.target, ops, self.cpus)
                        samples[trigger].append(largest_dspan([paths[i] for i in measured],
                                                              self.images.mkfs["block_size"]))
                finally:
                    os.unlink(run_image)
            entry["pairs"] += 1
        trigger, control = samples[True], samples[False]
        entry["effect"] = allocator_effect(trigger, control)
        if entry["pairs"]:
            entry["p_value"] = round(sign_test(trigger, control), 6)
        verdict, reason = allocator_verdict(entry["pairs"], entry["p_value"], entry["effect"]["dspan_p90_ratio"])
        entry["verdict"], entry["reason"] = verdict, entry["reason"] or reason
        return entry

    def run(self, progress):
        """The `allocator` section: status ran, or error (with the reason) when an experiment
        could not be run; an issue not measured is inconclusive with its reason, never absent."""
        section = {"status": "ran", "reason": None, "issues": []}
        for issue_id, name in ALLOCATOR_ISSUES:
            try:
                entry = self.issue(issue_id, name)
            except (OSError, ProbeError) as exc:
                why = "%s: %s" % (name, self.scratch.full(exc))
                section.update(status="error", reason="; ".join(filter(None, [section["reason"], why])))
                entry = {"id": issue_id, "name": name, "verdict": "inconclusive", "reason": "error: %s" % why,
                         "pairs": 0, "effect": allocator_effect([], []), "p_value": None, "test": ALLOCATOR_TEST}
            section["issues"].append(entry)
            tested = "" if entry["p_value"] is None else ", p %.3g" % entry["p_value"]
            progress("allocator %s: %s (%d pairs%s)" % (issue_id, entry["verdict"], entry["pairs"], tested))
        return section


# ------------------------------------------------------------------ the job
def load_job(path):
    with open(path, encoding="utf-8") as handle:
        job = json.load(handle)
    if not isinstance(job, dict) or job.get("schema") != JOB_SCHEMA:
        raise ProbeError("%s is not a %s document" % (path, JOB_SCHEMA))
    if not isinstance(job.get("filesystem"), dict) or "mountpoint" not in job["filesystem"]:
        raise ProbeError("the job names no filesystem to replicate")
    job.setdefault("confirm_scope", "all")  # a job of an older controller: every confirmation it lists ran
    if job["confirm_scope"] not in CONFIRM_SCOPES:
        raise ProbeError("the job's confirm_scope is %s, not one of %s"
                         % (json.dumps(job["confirm_scope"]), ", ".join(CONFIRM_SCOPES)))
    return job


def probe_with(result, scratch, images, job, mkfs, options, adjustments, started, progress):
    """The replica's mount options (those this kernel takes, tried on a copy so the cached image
    stays as built), the sweep and the confirmation probes, into the result as they are done."""
    check_image = scratch.path("runs", "check.img")
    copy_sparse(images.get(256 * MiB, 0, 6), check_image)
    try:
        options, dropped = mountable_options(check_image, scratch.path("mnt", "check"), options)
    finally:
        os.unlink(check_image)
    images.options = options
    if dropped:
        adjustments.append("options this kernel refused on the scratch mount: " + ",".join(dropped))
    result["replica"] = {"mkfs_args": mkfs_argv(mkfs, 256 * MiB, "IMAGE")[:-2],
                         "mount_options": ",".join(options), "adjustments": adjustments}
    if job.get("plan"):
        result["sweep"] = sweep(scratch, images, job["plan"], started + float(job.get("sweep_budget_s", 30)), progress)
    if job.get("allocator"):
        deadline = now() + float(job.get("allocator_budget_s", 20))
        result["allocator"] = Allocator(scratch, images, deadline).run(progress)
    else:
        result["allocator"] = {"status": "skipped", "reason": "not asked for (the job's allocator is false)",
                               "issues": []}
    confirm_deadline = now() + float(job.get("confirm_budget_s", 30))
    confirmations = Confirmations(scratch, images, job.get("netfs") or [], int(job.get("repetitions", 5)),
                                  confirm_deadline, job["confirm_scope"], job["filesystem"]["mountpoint"],
                                  bool(job.get("mount_options")))
    result["confirmations"] = confirmations.run(job.get("confirmations") or [], progress)


def run_job(job, progress):
    started_wall, started = time.time(), now()
    result = {"schema": RESULT_SCHEMA, "status": "error", "reason": None, "kernel": os.uname().release,
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_wall)),
              "duration_s": None, "mountpoint": job["filesystem"]["mountpoint"], "replica": None,
              "released_stale": [], "sweep": None, "allocator": None, "confirmations": [], "resources": None}
    cap = int(job.get("scratch_cap_bytes", 128 * MiB))
    scratch = Scratch(job.get("scratch_dir", "/dev/shm/ext4-audit-probe"), cap, bool(job.get("keep_cache")),
                      float(job.get("lock_wait_s", 0)))
    try:
        # First: mount(2) refuses a target reached through a descriptor opened in another mount
        # namespace, so the scratch directory is opened (Scratch) in the private one. What an older
        # version's killed probe left mounted in the host's namespace is released there by sweep-stale.
        private_mounts()
        with scratch:
            result["released_stale"] = scratch.released
            mkfs, options, adjustments = replica(job["filesystem"])
            if job.get("mount_options"):  # a named option set to compare, instead of the host's
                options = [o for o in job["mount_options"] if o.split("=")[0] not in NOT_REPLAYED]
                adjustments.append("mount options given by the job, not the host's: " + ",".join(options))
            smallest_disk = min([t["DiskSize"] for t in (job.get("plan") or {}).get("treatments", [])] or [256 * MiB])
            if (mkfs.get("journal_bytes") or 0) > smallest_disk // 8:
                adjustments.append("journal of %d MiB capped at an eighth of each scratch disk (%d MiB on the "
                                   "smallest)" % (mkfs["journal_bytes"] // MiB, smallest_disk // 8 // MiB))
            options = options + ["noinit_itable"]  # no background zeroing of the scratch inode tables
            images = Images(scratch, mkfs, options)
            try:
                probe_with(result, scratch, images, job, mkfs, options, adjustments, started, progress)
                if scratch.keep_cache:
                    images.prune()
            finally:
                images.close()
            scratch.used()
        sweep_done = result["sweep"] is None or result["sweep"]["stopped_by"] is None
        result["status"] = "ok" if sweep_done else "partial"
        if not sweep_done:
            sweep_result = result["sweep"]
            result["reason"] = "sweep stopped by %s after %d of %d runs (%d missing)" % (
                sweep_result["stopped_by"], sweep_result["completed"], sweep_result["planned"],
                sweep_result["planned"] - sweep_result["completed"])
    except Refused as exc:
        result.update(status="refused", reason=str(exc))
    except ProbeError as exc:
        result["reason"] = str(exc)
    except OSError as exc:
        result["reason"] = "%s (%s)" % (exc, type(exc).__name__)
    result["duration_s"] = round(now() - started, 3)
    result["resources"] = {"peak_rss_bytes": peak_rss(),
                           "scratch_peak_bytes": scratch.peak}
    return result


def peak_rss():
    """This process's own high-water RSS (VmHWM). getrusage's ru_maxrss would carry over the
    parent's peak through fork and exec."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def write_json_atomic(path, doc):
    folder = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".probe-")
    with os.fdopen(handle, "w") as out:
        # dumps, not dump: json.dump streams through the pure-Python encoder, dumps uses the C one
        out.write(json.dumps(doc, sort_keys=True, separators=(",", ":")))
    os.replace(tmp, path)


class Progress:
    """Progress lines to stderr and, when the job names a file, appended to it line by line: the
    playbook reads that file while the probe runs (Ansible returns an async job's stderr only at
    its end). The file is in the playbook's own private temporary directory, beside job.json."""

    def __init__(self, path):
        self.fd = None if not path else os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

    def __call__(self, text):
        line = "ext4_probe: " + text
        print(line, file=sys.stderr, flush=True)
        if self.fd is not None:
            os.write(self.fd, (line + "\n").encode("utf-8", "replace"))


def _interrupt(signum, _frame):
    raise Interrupted("signal %d" % signum)


def main(argv):
    if len(argv) == 3 and argv[0] == "run":
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, _interrupt)
        try:
            job = load_job(argv[1])
        except (OSError, ValueError, ProbeError) as exc:
            print("ext4_probe: cannot read the job: %s" % exc, file=sys.stderr)
            return 2
        progress = Progress(job.get("progress_file"))
        try:
            result = run_job(job, progress)
        except Interrupted as exc:
            progress("stopped by %s; scratch cleaned up" % exc)
            return 3
        write_json_atomic(argv[2], result)
        progress("%s in %.1f s" % (result["status"], float(result["duration_s"])))  # set by run_job
        return EXIT_CODES[result["status"]]
    if len(argv) == 2 and argv[0] == "sweep-stale":
        try:
            with Scratch(argv[1], 0):
                pass
        except Refused as exc:
            print("ext4_probe: refused: %s" % exc, file=sys.stderr)
            return REFUSED_EXIT
        return 0
    if len(argv) == 2 and argv[0] == "mkdir-latency":
        print(mkdir_existing_latency(argv[1]))
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
