# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The filesystem itself: dumpe2fs -h (SUPERBLOCK_FIELDS, the one table of its facts), the journal's
jbd2 statistics, the options a superblock bakes in, and the volume under it.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from typing import Any, Dict, Iterable, Optional

from .common import ParseError, split_options
from .mounts import option_map


_SIZE_UNITS = {"": 1, "k": 1024, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


def parse_size(text: str) -> int:
    """'64M' -> 67108864, '4096k' -> 4194304 (dumpe2fs prints %uk below 8 MiB, %uM above)."""
    match = re.match(r"^\s*(\d+)\s*([kKMGT]?)\s*$", text)
    if not match:
        raise ParseError("not a size: %r" % text)
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


# The superblock facts parse_dumpe2fs gives: (name, type, description), in the order the modules'
# RETURN blocks list them (ext4_facts, ext4_image_facts: tools/module_return.py writes those from
# this table; the controller's fact paths, ext4audit/model/fact_paths.py, are its names).
SUPERBLOCK_FIELDS = (
    ("block_count", "int", "Blocks."),
    ("block_size", "int", "Block size in bytes."),
    ("blocks_per_group", "int", "Blocks per group."),
    ("inode_count", "int", "Inodes."),
    ("free_inodes", "int", "Free inodes as the superblock last recorded them: exact in an image, which is not mounted; "
                           "on a mounted filesystem written back at unmount, freeze or error (its usage has the live count)."),
    ("free_blocks", "int", "Free blocks as the superblock last recorded them (like free_inodes)."),
    ("reserved_block_count", "int", "Blocks reserved for root."),
    ("inode_size", "int", "Inode size in bytes."),
    ("features", "list", "Filesystem features."),
    ("default_mount_options", "list", "Default mount options stored in the superblock."),
    ("mount_options", "list", "Mount options stored in the superblock (tune2fs -E mount_opts)."),
    ("errors_behavior", "str", "What the filesystem does on an error (continue, remount-ro, panic)."),
    ("state", "str", "Filesystem state."),
    ("error_count", "int", "Filesystem errors the superblock records (0 when none)."),
    ("journal_bytes", "int", "Journal size in bytes, or null without a journal."),
    ("journal_blocks", "int", "Journal size in blocks, or null."),
    ("journal_device", "str", "External journal device, or null."),
    ("journal_features", "list", "Journal features."),
    ("fast_commit_blocks", "int", "Fast-commit area in blocks, or null."),
    ("raid_stride", "int", "RAID stride (0 when not set)."),
    ("raid_stripe_width", "int", "RAID stripe width (0 when not set)."),
    ("e2fsprogs_fields", "str", "Which journal field names this e2fsprogs version printed (total or legacy; they "
                                "changed across versions)."),
)


def parse_dumpe2fs(text: str) -> Dict[str, Any]:
    """Parse `dumpe2fs -h` (LC_ALL=C) from e2fsprogs 1.42 to 1.47 into superblock facts.

    Journal size: 1.46+ print 'Total journal size/blocks', older ones 'Journal size' and
    sometimes 'Journal length' (blocks); blocks x block size is exact, so it wins.
    """
    raw = {}
    lines = text.splitlines()
    # The volume name and the last mount point are printed first and raw: a newline in either
    # (a mount point named so) would forge the fields below. Every field read here is printed
    # after the UUID line, and a forged UUID line comes before the real one: start at the last.
    starts = [i for i, line in enumerate(lines) if line.startswith("Filesystem UUID:")]
    for line in lines[starts[-1] if starts else 0:]:
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and key not in raw:
            raw[key] = value.strip()
    if "Block size" not in raw or "Filesystem features" not in raw:
        raise ParseError("dumpe2fs output has no superblock header (Block size / Filesystem features)")

    def integer(key: str) -> Optional[int]:
        return int(raw[key]) if re.match(r"^[0-9]+$", raw.get(key, "")) else None  # not isdigit(): "²"

    block_size = integer("Block size")
    features = raw["Filesystem features"].split()
    sb = {
        "block_size": block_size,
        "block_count": integer("Block count"),
        "blocks_per_group": integer("Blocks per group"),
        "inode_count": integer("Inode count"),
        "free_inodes": integer("Free inodes"),
        "free_blocks": integer("Free blocks"),
        "reserved_block_count": integer("Reserved block count"),
        "inode_size": integer("Inode size"),
        "features": [] if features == ["(none)"] else features,
        "errors_behavior": raw.get("Errors behavior", "").lower() or None,
        "default_mount_options": split_options(raw.get("Default mount options", "").replace(" ", ",")),
        "mount_options": split_options(raw.get("Mount options", "")),
        "raid_stride": integer("RAID stride") or 0,
        "raid_stripe_width": integer("RAID stripe width") or 0,
        "journal_features": [f for f in raw.get("Journal features", "").split() if f != "(none)"],
        "journal_bytes": None,
        "journal_blocks": None,
        "fast_commit_blocks": integer("Fast commit length"),
        "journal_device": raw.get("Journal device"),
        "state": raw.get("Filesystem state"),
        # s_error_count: printed only when nonzero (e2fsprogs lib/e2p/ls.c), so absent means 0.
        "error_count": integer("FS Error count") or 0,
        "e2fsprogs_fields": "total" if "Total journal size" in raw else "legacy",
    }  # type: Dict[str, Any]
    blocks = integer("Total journal blocks") or integer("Journal length")
    size = raw.get("Total journal size") or raw.get("Journal size")
    if blocks and block_size:
        sb["journal_blocks"] = blocks
        sb["journal_bytes"] = blocks * block_size
    elif size:
        sb["journal_bytes"] = parse_size(size)
        if block_size:
            sb["journal_blocks"] = sb["journal_bytes"] // block_size
    return sb


# Disk models of virtual and cloud block volumes (sysfs device/model, compared case-insensitively):
# no RAID geometry of their own that a stripe could follow.
VIRTUAL_DISK_MODELS = ("amazon elastic block store", "persistentdisk", "virtual disk", "qemu harddisk",
                       "blockvolume")
VIRTUAL_DISK_PREFIXES = ("vd", "xvd", "rbd", "nbd")  # virtio-blk, Xen, Ceph RBD, network block device


def volume_kind(disk: str, model: Optional[str]) -> str:
    """What the whole disk under a filesystem is: md-raid, device-mapper, loop, virtual or disk.

    disk: the kernel name (md127, dm-0, nvme0n1, vda); model: sysfs device/model or None."""
    disk = disk or ""
    if disk.startswith("md"):
        return "md-raid"
    if disk.startswith("dm-"):
        return "device-mapper"  # LVM, LUKS, multipath or dm-raid: cannot tell a stripe from here
    if disk.startswith("loop"):
        return "loop"
    if disk.startswith(VIRTUAL_DISK_PREFIXES) or any(m in (model or "").lower() for m in VIRTUAL_DISK_MODELS):
        return "virtual"
    return "disk"


# Superblock "Default mount options:" tokens (tune2fs -o) and what they mean once mounted.
SUPERBLOCK_DEFAULT_OPTIONS = {
    "journal_data": ("data", "journal"),
    "journal_data_ordered": ("data", "ordered"),
    "journal_data_writeback": ("data", "writeback"),
    "nobarrier": ("barrier", False),
    "discard": ("discard", True),
    "nodelalloc": ("delalloc", False),
    "block_validity": ("block_validity", True),
    "user_xattr": ("user_xattr", True),
    "acl": ("acl", True),
    "bsdgroups": ("grpid", True),
}


def superblock_option_map(sb: Dict[str, Any]) -> Dict[str, Any]:
    """Options the superblock bakes in (tune2fs -o and -E mount_opts=), as option_map() values."""
    result = {}
    for token in sb.get("default_mount_options", []):
        if token in SUPERBLOCK_DEFAULT_OPTIONS:
            name, value = SUPERBLOCK_DEFAULT_OPTIONS[token]
            result[name] = value
    result.update(option_map(sb.get("mount_options", [])))
    return result


def e2fsprogs_default_journal_blocks(block_count: int) -> Optional[int]:
    """Journal size mke2fs >= 1.43.2 picks for a filesystem of block_count blocks
    (lib/ext2fs/mkjournal.c ext2fs_default_journal_size). None: too small for a journal."""
    table = (
        (2048, None), (32768, 1024), (256 * 1024, 4096), (512 * 1024, 8192),
        (4096 * 1024, 16384), (8192 * 1024, 32768), (16384 * 1024, 65536),
        (32768 * 1024, 131072),
    )
    for limit, journal_blocks in table:
        if block_count < limit:
            return journal_blocks
    return 262144


def parse_jbd2_info(text: str) -> Dict[str, Optional[int]]:
    """Parse /proc/fs/jbd2/<dev>-<inode>/info into numbers (units kept in the key names)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        raise ParseError("jbd2 info is empty")
    head = re.match(r"^(\d+) transactions(?: \((\d+) requested\))?, each up to (\d+) blocks", lines[0])
    if not head:
        raise ParseError("jbd2 info first line is not '<n> transactions ...': %r" % lines[0][:120])
    info = {
        "transactions": int(head.group(1)),
        "requested": int(head.group(2)) if head.group(2) else None,
        "max_transaction_blocks": int(head.group(3)),
    }
    for line in lines[1:]:
        match = re.match(r"^\s+(\d+)(ms|us)?\s+(.+?)\s*$", line)
        if match:
            label = re.sub(r"[^a-z0-9]+", "_", match.group(3).lower()).strip("_")
            info[label + ("_" + match.group(2) if match.group(2) else "")] = int(match.group(1))
    return info


def parse_dumpe2fs_identity(text: str) -> Dict[str, Optional[str]]:
    """UUID and label from `dumpe2fs -h` (the label is None when it prints '<none>')."""
    found = {"uuid": None, "label": None}  # type: Dict[str, Optional[str]]
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Filesystem UUID":  # the last: a forged one (see parse_dumpe2fs) comes first
            found["uuid"] = value.strip().lower()
        elif sep and key.strip() == "Filesystem volume name" and found["label"] is None:
            found["label"] = None if value.strip() == "<none>" else value.strip()
    return found


def ext_fstype(features: Iterable[str]) -> str:
    """What a filesystem with these features is called (what blkid would say)."""
    if set(features) & {"extent", "extents", "flex_bg", "64bit", "huge_file", "metadata_csum"}:
        return "ext4"
    return "ext3" if "has_journal" in features else "ext2"
