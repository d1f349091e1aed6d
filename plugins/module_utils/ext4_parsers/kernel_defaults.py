# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Inferred options: the effective option tokens rebuilt from the kernel's defaults, the superblock
and the mount, where /proc/fs/ext4/<dev>/options cannot be read.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..kernel_version import compare_upstream
from .mounts import mount_option_map
from .superblock import SUPERBLOCK_DEFAULT_OPTIONS


# What the kernel applies when neither the superblock nor the mount says otherwise, and what it
# derives from the combination (fs/ext4/super.c: ext4_set_def_opts, ext4_check_opt_consistency,
# __ext4_fill_super). Used where /proc/fs/ext4/<dev>/options cannot be read: old kernels
# (ext4_facts) and disk images that are not running (ext4_image_facts). Checked against the real
# kernel by tests/integration/test_inference_differential.py.
KERNEL_DEFAULTS = {"auto_da_alloc": True, "barrier": True, "discard": False, "commit": "5",
                   "journal_async_commit": False}
# dioread_nolock, off by default before 5.6, is on from the -rc1 that merged the change, by how the
# block size compares with the page size: 244adf6426ee (5.6) for equal ones, e89fdcc425b6 (6.8) for
# smaller blocks (its stable backports are not tracked: 6.1-6.7 images with sub-page blocks may differ).
DIOREAD_NOLOCK_DEFAULT_SINCE = {"page": "5.6.0-rc1", "subpage": "6.8.0-rc1"}


def _version_at_least(version, floor):
    # kernel_version.py is the one place that orders upstream versions
    return compare_upstream(version, floor) >= 0


def default_dioread_nolock(kernel, block_size, page_size):
    """Is dioread_nolock on by default for this block size on upstream kernel version `kernel`?"""
    if not block_size or block_size > page_size:
        return False
    return _version_at_least(kernel, DIOREAD_NOLOCK_DEFAULT_SINCE["page" if block_size == page_size else "subpage"])


def infer_options(superblock, super_options, kernel, fstype="ext4", page_size=4096):
    """Rebuild the effective option tokens as /proc/fs/ext4/<dev>/options would print them, for the
    options the rules read (tests/integration/test_inference_differential.py lists the rest).

    superblock: parse_dumpe2fs() (None when unread); super_options: the mount's option tokens
    (mountinfo super options, or an fstab entry's through fstab_mount_tokens); kernel: the upstream
    version "x.y.z" whose defaults apply; fstype: the type it is mounted as (ext2/ext3 mounts have
    no delalloc by default); page_size: the kernel's page size in bytes.
    Each source overrides the one before: kernel defaults, superblock defaults (tune2fs -o), the
    superblock's mount_opts (tune2fs -E mount_opts=), the mount; then what the kernel derives."""
    merged = dict(KERNEL_DEFAULTS, delalloc=fstype not in ("ext2", "ext3"))
    if superblock:
        merged.update(dioread_nolock=default_dioread_nolock(kernel, superblock["block_size"], page_size),
                      data="ordered", journal_checksum="metadata_csum" in superblock["features"],
                      stripe=str(default_stripe(superblock)),
                      errors=(superblock["errors_behavior"] or "continue").replace("remount read-only", "remount-ro"))
        for token in superblock.get("default_mount_options", []):
            if token in SUPERBLOCK_DEFAULT_OPTIONS:
                name, value = SUPERBLOCK_DEFAULT_OPTIONS[token]
                merged[name] = value
        merged.update(mount_option_map(superblock.get("mount_options", [])))
    merged.update(mount_option_map(super_options))
    if superblock and ("has_journal" not in superblock["features"] or merged.get("norecovery")):
        # No journal (none, or noload): no data mode, and the journal options are dropped.
        merged.pop("data", None)
        merged.update(journal_async_commit=False, journal_checksum=False)
    if merged.get("data") == "journal":
        merged.update(delalloc=False, dioread_nolock=False)  # data=journal disables both
    scan_default = default_mb_optimize_scan(superblock) if superblock else None
    if scan_default is not None and merged.get("mb_optimize_scan") == ("1" if scan_default else "0"):
        del merged["mb_optimize_scan"]  # printed only where it differs from the group-count default
    tokens = []
    for name, value in sorted(merged.items()):
        if name == "ro":
            tokens.insert(0, "ro" if value else "rw")
        elif value is True:
            tokens.append(name)
        elif value is False:
            tokens.append("no" + name)
        else:
            tokens.append("%s=%s" % (name, value))
    return tokens


def default_mb_optimize_scan(superblock):
    """The kernel turns mb_optimize_scan on for 16 block groups or more (MB_DEFAULT_LINEAR_SCAN_THRESHOLD)."""
    if not superblock.get("block_count") or not superblock.get("blocks_per_group"):
        return None
    return -(-superblock["block_count"] // superblock["blocks_per_group"]) >= 16


def default_stripe(superblock):
    """The RAID stripe the kernel takes from the superblock (fs/ext4/super.c ext4_get_stripe_size):
    the stripe width, else the stride, if within a block group; 1 means none."""
    per_group = superblock.get("blocks_per_group") or 0
    for value in (superblock.get("raid_stripe_width") or 0, superblock.get("raid_stride") or 0):
        if value and value <= per_group:
            return value if value > 1 else 0
    return 0
