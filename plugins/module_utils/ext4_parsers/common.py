# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""What every parser and both sides of the audit share: the documents' schema ids, the probe's
confirmation names and scopes, the filesystem types the audit sorts mounts by, ParseError and the
kernel's escapes.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from typing import List, Union


# Constants both sides of the audit use (the controller's ext4audit/model/contract.py reads them here:
# target code cannot import the controller package).
FACTS_SCHEMA = "ext4-fleet-audit/facts/v1"  # library/ext4_facts.py, ext4_image_facts.py
PROBE_RESULT_SCHEMA = "ext4-fleet-audit/probe-result/v1"  # the probe's OUT.json
# The probe's confirmation probes (ext4_probe/confirmations.py, Confirmations)
CONFIRMATION_PROBES = ("rename_over_existing", "buffered_write_fsync", "xattr_set", "netfs_mkdir_existing")
# Which of them the probe runs (the job's confirm_scope, chopper_probe_confirm_scope): `own`, those whose
# risky option set the replica already uses; `all`, every one the job lists.
CONFIRM_SCOPES = ("own", "all")
EXT4_DRIVER_TYPES = ("ext4", "ext3", "ext2")  # all served by ext4.ko on modern kernels
NETFS_TYPES = (
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "ceph", "glusterfs",
    "lustre", "gpfs", "beegfs", "fuse.sshfs", "fuse.glusterfs", "fuse.cephfs",
    "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "davfs", "fuse.davfs2",
)
# Local filesystems the audit does not check, listed as "not audited" so that none is silently
# absent: any mounted from a block device (major number not 0), these whose device number is an
# anonymous one (btrfs subvolumes, ZFS datasets, bcachefs), and whatever is mounted at /.
ANONYMOUS_DEVICE_TYPES = ("btrfs", "zfs", "bcachefs")
# Read-only images (snap packages, live media): nothing is written to them, nothing to audit.
READ_ONLY_IMAGE_TYPES = ("squashfs", "iso9660", "erofs", "cramfs", "udf")


class ParseError(ValueError):
    """Input that does not have the expected format; the message says where."""


def unescape_octal(field: Union[str, bytes]) -> str:
    """Decode the kernel's octal escapes (\\040 space, \\011 tab, \\012 newline, \\134 backslash).

    Works on bytes so that a name which is not UTF-8 survives; the result is text with
    undecodable bytes kept as backslash escapes (reports must never hold raw surrogates).
    """
    raw = field.encode("utf-8", "surrogateescape") if isinstance(field, str) else field
    out = bytearray()
    i = 0
    while i < len(raw):
        if raw[i:i + 1] == b"\\" and re.match(rb"[0-7]{3}", raw[i + 1:i + 4]):
            out.append(int(raw[i + 1:i + 4], 8) & 0xFF)
            i += 4
        else:
            out += raw[i:i + 1]
            i += 1
    return bytes(out).decode("utf-8", "backslashreplace")


def split_options(text: str) -> List[str]:
    """Split a comma-separated option string; empty and '(none)' give []."""
    text = text.strip()
    if not text or text == "(none)":
        return []
    return [opt for opt in text.split(",") if opt]
