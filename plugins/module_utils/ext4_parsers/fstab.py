# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""/etc/fstab: its entries, what a mount from one hands the kernel, what it names, and where it
differs from the options in effect.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re

from .common import ANONYMOUS_DEVICE_TYPES, EXT4_DRIVER_TYPES, NETFS_TYPES, READ_ONLY_IMAGE_TYPES, split_options, unescape_octal
from .mounts import FSTAB_ONLY, FSTAB_ONLY_PREFIXES, VFS_FLAGS, mount_option_map


def fstab_not_audited(entry: dict) -> bool:
    """Is this fstab entry (of a disk image) a local filesystem the audit does not check? As
    not_audited, with a device source standing in for the block device's major number."""
    fstype = entry["fstype"]
    if fstype in EXT4_DRIVER_TYPES + NETFS_TYPES + ("auto", "swap", "none") or \
            all(kind in READ_ONLY_IMAGE_TYPES for kind in fstype.split(",")):  # udf,iso9660: a CD drive
        return False
    device = fstab_spec_target(entry["spec"])[0] is not None or entry["spec"].startswith("/dev/")
    return entry["mountpoint"] == "/" or device or fstype in ANONYMOUS_DEVICE_TYPES


def parse_fstab(text):
    """Parse /etc/fstab. Returns (entries, errors); a malformed line is an error, not a crash."""
    entries, errors = [], []
    for lineno, line in enumerate(text.split("\n"), 1):  # as libmount: lines end at \n,
        stripped = line.strip(" \t\r")                      # fields are split at spaces and tabs
        if not stripped or stripped.startswith("#"):
            continue
        fields = re.split(r"[ \t]+", stripped)
        if len(fields) < 3:
            errors.append("fstab line %d has %d fields, expected at least 3: %r"
                          % (lineno, len(fields), stripped[:200]))
            continue
        entries.append({
            "line": lineno,
            "spec": unescape_octal(fields[0]),
            "mountpoint": unescape_octal(fields[1]),
            "fstype": fields[2],
            "options": split_options(fields[3]) if len(fields) > 3 else ["defaults"],
        })
    return entries, errors


def fstab_long_line(text, cap):
    """(line number, length in bytes) of the first fstab entry (not a comment) longer than cap
    bytes, or None."""
    for lineno, line in enumerate(text.split("\n"), 1):
        if len(line) > cap // 4 and not line.lstrip(" \t").startswith("#"):  # (a char is at most 4 bytes)
            size = len(line.encode("utf-8", "surrogateescape"))
            if size > cap:
                return lineno, size
    return None


def fstab_drift(fstab_options, effective, mount_flags):
    """What fstab asks for that is not in effect.

    fstab_options: the entry's option list; effective: option_map of the effective ext4
    options; mount_flags: set of per-mount and super option tokens from mountinfo.
    Returns a list of {option, wanted, effective}; options that only mount(8) acts on are skipped.
    """
    drift = []
    for opt in fstab_options:
        if opt in FSTAB_ONLY or opt.startswith(FSTAB_ONLY_PREFIXES):
            continue
        if opt in VFS_FLAGS:
            if opt not in mount_flags:
                drift.append({"option": opt, "wanted": opt, "effective": None})
            continue
        for name, wanted in sorted(mount_option_map([opt]).items()):  # commit=0 is commit=5, ...
            if name not in effective:
                continue  # the kernel does not report this option; nothing to compare
            if effective[name] != wanted:
                drift.append({"option": opt, "wanted": wanted, "effective": effective[name]})
    return drift


def fstab_spec_target(spec):
    """What an fstab source names: ('uuid'|'label'|'partuuid'|'partlabel', value), ('number', N)
    for a partition device name, ('disk', name) for a whole disk, ('root', None) for /dev/root, or
    (None, spec) for anything else (LVM, md, a network source)."""
    for prefix, kind in (("UUID=", "uuid"), ("LABEL=", "label"), ("PARTUUID=", "partuuid"),
                         ("PARTLABEL=", "partlabel"), ("/dev/disk/by-uuid/", "uuid"),
                         ("/dev/disk/by-label/", "label"), ("/dev/disk/by-partuuid/", "partuuid"),
                         ("/dev/disk/by-partlabel/", "partlabel")):
        if spec.startswith(prefix):
            value = spec[len(prefix):].strip('"')
            return kind, value.lower() if kind in ("uuid", "partuuid") else value
    if spec == "/dev/root":
        return "root", None
    # A partition number has at most 3 digits (ASCII only: \d is any Unicode digit), so int() stays
    # far below Python's limit on the length of integer strings; a longer one matches nothing.
    match = re.match(r"^/dev/(?:[shv]d[a-z]+|xvd[a-z]+)([0-9]{1,3})$", spec) or \
        re.match(r"^/dev/(?:nvme[0-9]+n[0-9]+|mmcblk[0-9]+|loop[0-9]+)p([0-9]{1,3})$", spec)
    if match:
        return "number", int(match.group(1))
    if re.match(r"^/dev/(?:[shv]d[a-z]+|xvd[a-z]+|nvme[0-9]+n[0-9]+|mmcblk[0-9]+)$", spec):
        return "disk", spec
    return None, spec


def fstab_mount_tokens(options):
    """The option tokens a mount from this fstab entry hands the filesystem (what mountinfo's
    super options would show): rw or ro, then everything mount(8) and the VFS do not keep."""
    tokens = ["ro" if "ro" in options else "rw"]
    for opt in options:
        if opt in FSTAB_ONLY or opt in VFS_FLAGS or opt.startswith(FSTAB_ONLY_PREFIXES):
            continue
        tokens.append(opt)
    return tokens
