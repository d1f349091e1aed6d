# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The image check's ground: its limits and steps, its errors, and the commands it runs on an image
(e2fsprogs, qemu-img), each under a timeout, a cap on its output and the check's budget.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import contextlib
import os
import re
import stat
import time

from ..capped_command import CommandTimeout, run_capped


WORK_PREFIX = "ext4-image-"  # the folder of an image's raw copy, in tmp_dir
# E2FSCK_CONFIG: the controller's /etc/e2fsck.conf (logging, fix-up policies) has no say in the check
ENV = {"LC_ALL": "C", "LANG": "C", "E2FSCK_CONFIG": "/dev/null"}
BANNER = re.compile(r"^(debugfs|dumpe2fs|e2fsck) \d+\.\d+")
FSCK_EXIT_BITS = ((1, "errors corrected"), (2, "reboot needed"), (4, "errors left uncorrected"),
                  (8, "operational error"), (16, "usage error"), (32, "cancelled"), (128, "shared library error"))
FSCK_PROGRESS = re.compile(r"^(Pass \d[A-Z]?: |.*: \d+/\d+ files )")  # e2fsck's lines that say nothing is wrong
KIB = 1024
MIB = 1024 * KIB
# How much of each thing read out of an image is read at most; over the cap is an error.
OS_RELEASE_CAP = 64 * KIB
FSTAB_CAP = MIB
TEXT_CAP = MIB  # grub.cfg, dumpe2fs -h, debugfs stat, qemu-img info
LISTING_CAP = 4 * MIB  # debugfs ls -p of /etc or /boot: some 50,000 entries
LINK_CAP = 4096  # PATH_MAX: the longest symlink target Linux follows
SYMLINK_HOPS = 40  # MAXSYMLINKS: how many symlinks the kernel follows in one path lookup
FSTAB_LINE_CAP = 4096  # mount(2) copies one page of options: a longer fstab entry cannot be mounted as written
BOOT_FILE_CAP = 1024 * MIB  # a kernel or initrd extracted to boot the image
DPKG_STATUS_CAP = 32 * MIB  # /var/lib/dpkg/status: some 3 MiB on a server image, 10 on a large desktop
DPKG_STATUS = "/var/lib/dpkg/status"
# The packages whose versions decide whether the image's boot loader and fsck read its filesystems
# (rules/boot_tools.yml): GRUB's shared files (every GRUB platform package depends on them), e2fsprogs.
BOOT_PACKAGES = ("grub-common", "grub2-common", "e2fsprogs")
STDERR_KEPT = 64 * KIB
FSCK_KEPT = 64 * KIB  # of e2fsck's output, the rest read and thrown away
BZIMAGE_HEAD = 64 * KIB  # the setup header and the version string it points at sit in the first sectors
# The steps of the check, in order (image.steps times each; an incomplete check names those not done).
STEP_COPY = "raw copy of the image"
STEP_TABLE = "partition table and superblocks"
STEP_ROOT = "root filesystem and fstab"
STEP_SYSTEM = "os-release and kernels"
STEP_FSCK = "e2fsck -fn of the filesystems"
STEP_BOOT_FILES = "boot files"
STEPS = (STEP_COPY, STEP_TABLE, STEP_ROOT, STEP_SYSTEM, STEP_FSCK, STEP_BOOT_FILES)


class ImageError(Exception):
    """The image (or a part of it) cannot be read; the message says why."""


class OutOfTime(Exception):
    """The whole check's time budget ran out. Not an ImageError: nothing may take it for a file that
    could not be read or a filesystem that is not clean; it ends the check, which is incomplete."""


class Unread(ImageError):
    """A file the check needs is in the image but could not be read (already recorded in image.unread)."""


def file_kind(mode):
    """What a directory entry that is not a regular file is, for the reason it was not read."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "mode %o" % mode


class ImageBase:
    """What every part of the check shares: its state, its errors, the tools and the commands it runs."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.errors = []
        self.unread = []
        self.os_release_unread = False
        self.deadline = time.monotonic() + module.params["budget"]
        self.steps = []
        self.current = None
        self.raw = None
        self.raw_size = None
        self.listings = {}
        self.fscks = {}
        self.tools = {}
        self.mounts = []

    def error(self, where, reason):
        self.errors.append({"where": where, "reason": reason})

    def tool(self, name):
        if name not in self.tools:
            path = self.module.get_bin_path(name)
            if not path:
                raise ImageError("%s not found; install %s" % (name, "qemu-utils" if name == "qemu-img" else "e2fsprogs"))
            self.tools[name] = path
        return self.tools[name]

    def run(self, argv, limit, timeout, drain=False):
        """Run argv (a list, never a shell) for at most `timeout` seconds, keeping at most `limit`
        bytes of its output. Returns (rc, out, err, over): over is True when it printed more; it is
        then killed (rc None) unless drain, which reads the rest and throws it away to learn its exit
        code. A command still running at its timeout is killed and raises ImageError."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime("before %s" % os.path.basename(argv[0]))
        # the budget cuts a command short: then the budget, not the command, is what ran out
        by_budget, timeout = left < timeout, min(timeout, left)
        try:
            return run_capped(argv, dict(os.environ, **ENV), limit, STDERR_KEPT, timeout, drain)
        except CommandTimeout:
            raise self.too_slow(argv, timeout, by_budget) from None

    @staticmethod
    def too_slow(argv, timeout, by_budget):
        """The error of a command killed at its timeout, or at the end of the check's budget."""
        name = os.path.basename(argv[0])
        if by_budget:
            return OutOfTime("%s was killed at the end of the budget" % name)
        return ImageError("%s did not finish in %d s: killed" % (name, timeout))

    def e2fs(self, name, args, part, limit, head=False):
        """Run dumpe2fs or debugfs on the filesystem at a partition's offset; its output as bytes, at
        most `limit` of them (head: the first `limit` bytes are wanted and the rest is not read;
        otherwise more is an error). e2fsprogs' unix I/O manager reads 'file?offset=N'; debugfs
        opens read-only without -w and exits 0 on failed requests, so anything on stderr but its
        banner is the error."""
        rc, out, err, over = self.run([self.tool(name)] + args + [self.target(part)], limit, self.params["timeout"])
        if over:
            if head:
                return out
            raise ImageError("%s %s printed more than %d bytes: over the cap" % (name, " ".join(args), limit))
        problems = [line for line in err.splitlines() if line.strip() and not BANNER.match(line)]
        if rc != 0 or problems:
            raise ImageError("%s failed (rc=%d): %s" % (name, rc, " ".join(problems)[:300] or "no message"))
        return out

    def target(self, part):
        return self.raw if not part["start"] else "%s?offset=%d" % (self.raw, part["start"])

    def debugfs(self, part, request, limit=TEXT_CAP, head=False):
        return self.e2fs("debugfs", ["-R", request], part, limit, head)

    def read(self, offset, length):
        with open(self.raw, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    @contextlib.contextmanager
    def step(self, name):
        """Time one step of the check into image.steps (also when it fails or the budget runs out)."""
        self.current, start = name, time.monotonic()
        try:
            yield
        finally:
            self.steps.append({"step": name, "seconds": round(time.monotonic() - start, 3)})
