# -*- coding: utf-8 -*-
"""Parsers for the places where a host keeps the truth about its ext4 filesystems.

One module, stdlib only, Python >= 3.8: it is shipped to targets inside the
``ext4_facts`` module and imported by the controller and the tests as-is.
Every parser takes text and returns plain data; anything it cannot read is
raised as ``ParseError`` with the line that broke it, never a bare traceback.
Formats and their sources are described in ../shared/research/ext4kb.md (sec. 0, 2.2).
"""

import re

EXT4_DRIVER_TYPES = ("ext4", "ext3", "ext2")  # all served by ext4.ko on modern kernels
NETFS_TYPES = (
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "afs", "9p", "ceph", "glusterfs",
    "lustre", "gpfs", "beegfs", "fuse.sshfs", "fuse.glusterfs", "fuse.cephfs",
    "fuse.s3fs", "fuse.gcsfuse", "fuse.rclone", "davfs", "fuse.davfs2",
)

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


class ParseError(ValueError):
    """Input that does not have the expected format; the message says where."""


def unescape_octal(field):
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


# --------------------------------------------------------------------- mountinfo
def parse_mountinfo(text):
    """Parse /proc/self/mountinfo.

    Returns a list of dicts: mount_id, parent_id, major, minor, root, mountpoint,
    mount_options (field 6), optional, fstype, source, super_options (after ' - ').
    """
    mounts = []
    for lineno, line in enumerate(text.splitlines(), 1):
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


def split_options(text):
    """Split a comma-separated option string; empty and '(none)' give []."""
    text = text.strip()
    if not text or text == "(none)":
        return []
    return [opt for opt in text.split(",") if opt]


# ------------------------------------------------------- effective ext4 options
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


# ------------------------------------------------------------------------ fstab
def parse_fstab(text):
    """Parse /etc/fstab. Returns (entries, errors); a malformed line is an error, not a crash."""
    entries, errors = [], []
    for lineno, line in enumerate(text.splitlines(), 1):
        stripped = line.strip()
        if not stripped or stripped.startswith("#"):
            continue
        fields = stripped.split()
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
        (name, wanted), = option_map([opt]).items()
        if name == "commit" and wanted == "0":
            wanted = "5"  # commit=0 means the default, 5 seconds
        if name not in effective:
            continue  # the kernel does not report this option; nothing to compare
        if effective[name] != wanted:
            drift.append({"option": opt, "wanted": wanted, "effective": effective[name]})
    return drift


# --------------------------------------------------------------------- dumpe2fs
_SIZE_UNITS = {"": 1, "k": 1024, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


def parse_size(text):
    """'64M' -> 67108864, '4096k' -> 4194304 (dumpe2fs prints %uk below 8 MiB, %uM above)."""
    match = re.match(r"^\s*(\d+)\s*([kKMGT]?)\s*$", text)
    if not match:
        raise ParseError("not a size: %r" % text)
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


def parse_dumpe2fs(text):
    """Parse `dumpe2fs -h` (LC_ALL=C) from e2fsprogs 1.42 to 1.47 into superblock facts.

    Journal size: 1.46+ print 'Total journal size/blocks', older ones 'Journal size' and
    sometimes 'Journal length' (blocks); blocks x block size is exact, so it wins.
    """
    raw = {}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        key = key.strip()
        if sep and key and key not in raw:
            raw[key] = value.strip()
    if "Block size" not in raw or "Filesystem features" not in raw:
        raise ParseError("dumpe2fs output has no superblock header (Block size / Filesystem features)")

    def integer(key):
        return int(raw[key]) if raw.get(key, "").isdigit() else None

    block_size = integer("Block size")
    features = raw["Filesystem features"].split()
    sb = {
        "block_size": block_size,
        "block_count": integer("Block count"),
        "blocks_per_group": integer("Blocks per group"),
        "inode_count": integer("Inode count"),
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
        "e2fsprogs_fields": "total" if "Total journal size" in raw else "legacy",
    }
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


def superblock_option_map(sb):
    """Options the superblock bakes in (tune2fs -o and -E mount_opts=), as option_map() values."""
    result = {}
    for token in sb.get("default_mount_options", []):
        if token in SUPERBLOCK_DEFAULT_OPTIONS:
            name, value = SUPERBLOCK_DEFAULT_OPTIONS[token]
            result[name] = value
    result.update(option_map(sb.get("mount_options", [])))
    return result


def e2fsprogs_default_journal_blocks(block_count):
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


# ------------------------------------------------------------------------- jbd2
def parse_jbd2_info(text):
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


# --------------------------------------------------------------------- os-release
def parse_os_release(text):
    """Parse /etc/os-release (shell-style KEY=value, optionally quoted)."""
    result = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            result[key] = value
    return result
