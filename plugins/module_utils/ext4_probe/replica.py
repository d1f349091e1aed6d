# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The replica of the audited filesystem: its mke2fs arguments and mount options, and sparse copies
of scratch images.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import os
import subprocess
from typing import Any, Dict, Iterator, List, Tuple

from .base import MiB, ProbeError


# Options that cannot or must not be replayed on a scratch mount (read-only recovery modes,
# external journals, quota files, DAX); everything else the host has in effect is replayed.
NOT_REPLAYED = ("ro", "rw", "norecovery", "noload", "dax", "journal_dev", "journal_path",
                "usrjquota", "grpjquota", "jqfmt", "test_dummy_encryption", "resuid", "resgid")


def replica(filesystem: Dict[str, Any]) -> Tuple[Dict[str, Any], List[str], List[str]]:
    """mke2fs arguments and mount options that replicate the audited filesystem.

    Returns (mkfs dict, mount option list, adjustments): what could not be replicated is
    said in adjustments, never silently changed."""
    sb = filesystem.get("superblock") or {}
    options = list(filesystem.get("options") or [])
    adjustments = []  # type: List[str]
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


def mkfs_argv(mkfs: Dict[str, Any], disk_size: int, image: str) -> List[str]:
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


def run_tool(argv: List[str], what: str) -> None:
    env = dict(os.environ, LC_ALL="C")
    # the probe runs as a program of its own on the host: no module there, no run_command
    # pylint: disable-next=ansible-bad-function
    proc = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                          universal_newlines=True, timeout=120, check=False)
    if proc.returncode != 0:
        raise ProbeError("%s failed (exit %d): %s" % (what, proc.returncode, proc.stdout.strip()[-500:]))


def data_segments(fd: int, size: int) -> Iterator[Tuple[int, int]]:
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


def copy_sparse(source: str, target: str) -> None:
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


def content_digest(fd: int) -> str:
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


def build_options(options: List[str]) -> List[str]:
    """The mount options an image is built under: the host's, without `discard`. A discard
    per punched hole made building the replica of a discard-mounted filesystem 4.6x slower,
    and the free space it leaves is the same block for block (tests/integration/test_probe.py);
    the runs themselves keep every option."""
    return [o for o in options if o != "discard"]
