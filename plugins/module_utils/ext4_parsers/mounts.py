# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Mount options: /proc/self/mountinfo, /proc/fs/ext4/<dev>/options, and option tokens as the
kernel reads them (option_map, mount_option_map).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .common import (
    ANONYMOUS_DEVICE_TYPES, EXT4_DRIVER_TYPES, READ_ONLY_IMAGE_TYPES, ParseError, split_options, unescape_octal,
)


def not_audited(mount: dict, netfs_types: tuple) -> bool:
    """Is this mount one the audit lists as not audited (a local filesystem of another type)?"""
    fstype = mount["fstype"]
    if fstype in EXT4_DRIVER_TYPES or fstype in netfs_types or fstype in READ_ONLY_IMAGE_TYPES:
        return False
    return mount["mountpoint"] == "/" or mount["major"] != 0 or fstype in ANONYMOUS_DEVICE_TYPES


# "noX" spellings that switch a default-on (or default-off) option; the value is the
# option's canonical name.  `dioread_lock` is what kernels < 5.6 print, `nodioread_nolock`
# what 5.6+ prints for the same state (token2str order changed in 244adf6426ee).
NEGATIONS = {
    "nodelalloc": "delalloc",
    "noauto_da_alloc": "auto_da_alloc",
    "dioread_lock": "dioread_nolock",
    "nodioread_nolock": "dioread_nolock",
    "nobarrier": "barrier",
    "nodiscard": "discard",
    "nojournal_checksum": "journal_checksum",
    "noblock_validity": "block_validity",
    "nouser_xattr": "user_xattr",
    "noacl": "acl",
    "noinit_itable": "init_itable",
    "nogrpid": "grpid",
    "nobh": "bh",
    "nolazytime": "lazytime",
    "nomblk_io_submit": "mblk_io_submit",
    "noprefetch_block_bitmaps": "prefetch_block_bitmaps",
    "nowarn_on_error": "warn_on_error",
    "nojournal_async_commit": "journal_async_commit",
}
# Per-mount VFS flags that fstab may ask for and mountinfo shows (field 6 or the super options).
VFS_FLAGS = (
    "ro", "rw", "noatime", "relatime", "strictatime", "nodiratime", "nodev",
    "nosuid", "noexec", "lazytime", "sync", "dirsync", "mand",
)
# fstab options that only mount(8), systemd or the kernel's generic layer act on.
FSTAB_ONLY = (
    "defaults", "auto", "noauto", "user", "users", "nouser", "owner", "group",
    "nofail", "_netdev", "async", "dev", "suid", "exec", "atime", "diratime",
    "nostrictatime", "norelatime", "loop", "nomand",
)
FSTAB_ONLY_PREFIXES = ("x-", "comment=", "loop=", "offset=", "sizelimit=", "context=",
                       "fscontext=", "defcontext=", "rootcontext=", "helper=")


def parse_mountinfo(text):
    """Parse /proc/self/mountinfo.

    Returns a list of dicts: mount_id, parent_id, major, minor, root, mountpoint,
    mount_options (field 6), optional, fstype, source, super_options (after ' - ').
    """
    mounts = []
    # Only "\n" ends a line: the kernel escapes it in names, but not \r, \f or U+2028, which
    # str.splitlines() would also cut at (one such name would hide every mount).
    for lineno, line in enumerate(text.split("\n"), 1):
        if not line.strip():
            continue
        fields = line.split(" ")
        try:
            sep = fields.index("-", 6)
            major, minor = fields[2].split(":")
            mounts.append({
                "mount_id": int(fields[0]),
                "parent_id": int(fields[1]),
                "major": int(major),
                "minor": int(minor),
                "root": unescape_octal(fields[3]),
                "mountpoint": unescape_octal(fields[4]),
                "mount_options": fields[5].split(","),
                "optional": fields[6:sep],
                "fstype": fields[sep + 1],
                "source": unescape_octal(fields[sep + 2]),
                "super_options": split_options(fields[sep + 3]) if len(fields) > sep + 3 else [],
            })
        except (ValueError, IndexError):
            raise ParseError("mountinfo line %d is malformed: %r" % (lineno, line[:200]))
    return mounts


def parse_ext4_options(text):
    """Parse /proc/fs/ext4/<dev>/options (one option per line, defaults included)."""
    options = [line.strip() for line in text.splitlines() if line.strip()]
    if not options or options[0] not in ("rw", "ro"):
        raise ParseError("ext4 options file does not start with rw/ro: %r" % text[:80])
    for opt in options:
        if " " in opt or "\t" in opt:
            raise ParseError("ext4 options file has a malformed line: %r" % opt[:80])
    return options


def option_map(options):
    """Normalise option tokens to {name: value}: booleans for flags, strings for key=value.

    nodelalloc -> {'delalloc': False}; dioread_lock and nodioread_nolock -> {'dioread_nolock': False};
    barrier=0 -> {'barrier': False}; data=ordered -> {'data': 'ordered'}.
    """
    result = {}
    for opt in options:
        name, sep, value = opt.partition("=")
        if name == "barrier" and sep:
            result["barrier"] = value not in ("0",)
        elif sep:
            result[name] = value
        elif opt in NEGATIONS:
            result[NEGATIONS[opt]] = False
        elif opt in ("ro", "rw"):
            result["ro"] = opt == "ro"
        else:
            result[opt] = True
    return result


# Mount tokens whose spelling means something else once mounted (fs/ext4/super.c ext4_param_specs
# and ext4_apply_options; journal_async_commit also sets JOURNAL_CHECKSUM).
MOUNT_SYNONYMS = {"noload": ["norecovery"], "journal_async_commit": ["journal_async_commit", "journal_checksum"]}
DEFAULT_COMMIT_SECONDS = "5"  # JBD2_DEFAULT_MAX_COMMIT_AGE: commit=0 means this


def mount_option_map(tokens):
    """option_map() of mount tokens as typed, read the way the kernel reads them."""
    expanded = []
    for token in tokens:
        expanded.extend(MOUNT_SYNONYMS.get(token, [token]))
    result = option_map(expanded)
    if result.get("commit") == "0":
        result["commit"] = DEFAULT_COMMIT_SECONDS
    if isinstance(result.get("auto_da_alloc"), str):  # auto_da_alloc=N: 0 turns it off
        result["auto_da_alloc"] = result["auto_da_alloc"] != "0"
    return result
