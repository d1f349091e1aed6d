# -*- coding: utf-8 -*-
"""Parsers for the places where a host keeps the truth about its ext4 filesystems.

One module, stdlib only, Python >= 3.8: it is shipped to targets inside the
``ext4_facts`` module and imported by the controller and the tests as-is.
Every parser takes text and returns plain data; anything it cannot read is
raised as ``ParseError`` with the line that broke it, never a bare traceback.
Formats and their sources are described in ../shared/research/ext4kb.md (sec. 0, 2.2).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import re
import struct
import uuid

# Constants both sides of the audit use (the controller's ext4audit/contract.py reads them here:
# target code cannot import the controller package).
FACTS_SCHEMA = "ext4-fleet-audit/facts/v1"  # library/ext4_facts.py, ext4_image_facts.py
PROBE_RESULT_SCHEMA = "ext4-fleet-audit/probe-result/v1"  # the probe's OUT.json
# The probe's confirmation probes (roles/chopper_probe/files/ext4_probe.py, Confirmations)
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


def fstab_not_audited(entry: dict) -> bool:
    """Is this fstab entry (of a disk image) a local filesystem the audit does not check? As
    not_audited, with a device source standing in for the block device's major number."""
    fstype = entry["fstype"]
    if fstype in EXT4_DRIVER_TYPES + NETFS_TYPES + ("auto", "swap", "none") or \
            all(kind in READ_ONLY_IMAGE_TYPES for kind in fstype.split(",")):  # udf,iso9660: a CD drive
        return False
    device = fstab_spec_target(entry["spec"])[0] is not None or entry["spec"].startswith("/dev/")
    return entry["mountpoint"] == "/" or device or fstype in ANONYMOUS_DEVICE_TYPES


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


# --------------------------------------------------------------------- dumpe2fs
_SIZE_UNITS = {"": 1, "k": 1024, "K": 1024, "M": 1024 ** 2, "G": 1024 ** 3, "T": 1024 ** 4}


def parse_size(text):
    """'64M' -> 67108864, '4096k' -> 4194304 (dumpe2fs prints %uk below 8 MiB, %uM above)."""
    match = re.match(r"^\s*(\d+)\s*([kKMGT]?)\s*$", text)
    if not match:
        raise ParseError("not a size: %r" % text)
    return int(match.group(1)) * _SIZE_UNITS[match.group(2)]


# The superblock facts parse_dumpe2fs gives: (name, type, description), in the order the modules'
# RETURN blocks list them (ext4_facts, ext4_image_facts: tools/module_return.py writes those from
# this table; the controller's fact paths, ext4audit/fact_paths.py, are its names).
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


def parse_dumpe2fs(text):
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

    def integer(key):
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


# Disk models of virtual and cloud block volumes (sysfs device/model, compared case-insensitively):
# no RAID geometry of their own that a stripe could follow.
VIRTUAL_DISK_MODELS = ("amazon elastic block store", "persistentdisk", "virtual disk", "qemu harddisk",
                       "blockvolume")
VIRTUAL_DISK_PREFIXES = ("vd", "xvd", "rbd", "nbd")  # virtio-blk, Xen, Ceph RBD, network block device


def volume_kind(disk, model):
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
# The os-release fields a facts record keeps with the kernel: the distribution, and the image's own
# name where it has one (IMAGE_ID, IMAGE_VERSION: the results store's image column names it so).
OS_RELEASE_KEPT = ("ID", "ID_LIKE", "VERSION_ID", "PRETTY_NAME", "IMAGE_ID", "IMAGE_VERSION")


def os_release_kept(os_release):
    """The fields of a parsed os-release a facts record keeps (OS_RELEASE_KEPT), those present."""
    return dict((key, os_release[key]) for key in OS_RELEASE_KEPT if key in os_release)


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


# A build date in an image's identity: YYYYMMDD (Amazon's image_date adds hhmmss) or YYYY-MM-DD,
# not inside a longer number.
_BUILD_DATE = re.compile(r"(?<![0-9])((?:19|20)[0-9]{2})(-?)(0[1-9]|1[0-2])\2(0[1-9]|[12][0-9]|3[01])"
                         r"(?:[0-9]{6})?(?![0-9])")


def parse_build_info(text: str) -> dict:
    """Parse Ubuntu cloud images' /etc/cloud/build.info (YAML-like "key: value" lines)."""
    result = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key and not key.startswith("#"):
            result[key.strip()] = value.strip().strip("\"'")
    return result


def image_identity(os_release: dict, image_id: dict, build_info: dict, file_name: str) -> dict:
    """The identity of a disk image, from what its distribution records (each dict may be None):
    os-release's IMAGE_ID, IMAGE_VERSION and BUILD_ID (systemd's os-release(5)); /etc/image-id
    (Amazon Linux: image_name, image_file, image_date as YYYYMMDDhhmmss UTC); Ubuntu cloud
    images' /etc/cloud/build.info (build_name, serial YYYYMMDD[.N]). The build date is the first
    date found, in that order, then in the names (Alibaba's are <os>_<version>_..._alibase_YYYYMMDD.vhd)
    and last in the image file's own name; build_date_source says which field it came from."""
    os_release, image_id, build_info = os_release or {}, image_id or {}, build_info or {}
    fields = [("os-release IMAGE_ID", os_release.get("IMAGE_ID")),
              ("/etc/image-id image_name", image_id.get("image_name")),
              ("/etc/cloud/build.info build_name", build_info.get("build_name"))]
    name_source, name = next(((source, value) for source, value in fields if value), (None, None))
    dated = [("/etc/image-id image_date", image_id.get("image_date")),
             ("/etc/cloud/build.info serial", build_info.get("serial")),
             ("os-release BUILD_ID", os_release.get("BUILD_ID")),
             ("os-release IMAGE_VERSION", os_release.get("IMAGE_VERSION")),
             ("/etc/image-id image_file", image_id.get("image_file"))] + fields + [("image file name", file_name)]
    build_date, date_source = None, None
    for source, value in dated:
        match = _BUILD_DATE.search(value or "")
        if match:
            build_date, date_source = "%s-%s-%s" % (match.group(1), match.group(3), match.group(4)), source
            break
    return {"name": name, "name_source": name_source,
            "version": os_release.get("IMAGE_VERSION") or image_id.get("image_version"),
            "build_id": os_release.get("BUILD_ID") or build_info.get("serial"),
            "vendor_image_id": image_id.get("image_file") or image_id.get("image_id") or image_id.get("image_name"),
            "build_date": build_date, "build_date_source": date_source}


def parse_dpkg_status(text, packages):
    """The installed version of each of packages in a dpkg status database (/var/lib/dpkg/status:
    RFC 822-style stanzas separated by blank lines); a package not installed is left out."""
    wanted, found = frozenset(packages), {}
    for stanza in re.split(r"\n\s*\n", text):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t"):  # a continuation line belongs to a field not read here
                key, sep, value = line.partition(":")
                if sep:
                    fields[key.strip().lower()] = value.strip()
        name = fields.get("package")
        if name in wanted and fields.get("status", "").endswith(" installed") and fields.get("version"):
            found[name] = fields["version"]
    return found


# ------------------------------------------------------------ inferred options
# What the kernel applies when neither the superblock nor the mount says otherwise, and what it
# derives from the combination (fs/ext4/super.c: ext4_set_def_opts, ext4_check_opt_consistency,
# __ext4_fill_super). Used where /proc/fs/ext4/<dev>/options cannot be read: old kernels
# (ext4_facts) and disk images that are not running (ext4_image_facts). Checked against the real
# kernel by tests/integration/test_inference_differential.py.
KERNEL_DEFAULTS = {"auto_da_alloc": True, "barrier": True, "discard": False, "commit": "5",
                   "journal_async_commit": False}
DEFAULT_COMMIT_SECONDS = "5"  # JBD2_DEFAULT_MAX_COMMIT_AGE: commit=0 means this
# dioread_nolock, off by default before 5.6, is on from the -rc1 that merged the change, by how the
# block size compares with the page size: 244adf6426ee (5.6) for equal ones, e89fdcc425b6 (6.8) for
# smaller blocks (its stable backports are not tracked: 6.1-6.7 images with sub-page blocks may differ).
DIOREAD_NOLOCK_DEFAULT_SINCE = {"page": "5.6.0-rc1", "subpage": "6.8.0-rc1"}
# Mount tokens whose spelling means something else once mounted (fs/ext4/super.c ext4_param_specs
# and ext4_apply_options; journal_async_commit also sets JOURNAL_CHECKSUM).
MOUNT_SYNONYMS = {"noload": ["norecovery"], "journal_async_commit": ["journal_async_commit", "journal_checksum"]}


def _version_at_least(version, floor):
    # kernel_version.py is the one place that orders upstream versions; imported here, not at the
    # top, because the probe ships this file alone and never infers options. A sibling in the
    # collection's module_utils, in the controller's ext4audit.parsers and in a module's bundle.
    from .kernel_version import compare_upstream
    return compare_upstream(version, floor) >= 0


def default_dioread_nolock(kernel, block_size, page_size):
    """Is dioread_nolock on by default for this block size on upstream kernel version `kernel`?"""
    if not block_size or block_size > page_size:
        return False
    return _version_at_least(kernel, DIOREAD_NOLOCK_DEFAULT_SINCE["page" if block_size == page_size else "subpage"])


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


# ------------------------------------------------------------------ disk images
# ext4_image_facts reads an image file with e2fsprogs alone; these parse what it reads.
MBR_EXTENDED = (0x05, 0x0F, 0x85)
MBR_TYPES = {0x83: "linux", 0x82: "linux-swap", 0xEF: "efi-system", 0x0B: "fat32", 0x0C: "fat32",
             0x06: "fat16", 0x07: "ntfs-exfat", 0x8E: "linux-lvm", 0xFD: "linux-raid"}
GPT_TYPES = {
    "0fc63daf-8483-4772-8e79-3d69d8477de4": "linux",
    "4f68bce3-e8cd-4db1-96e7-fbcaf984b709": "linux-root-x86-64",
    "bc13c2ff-59e6-4262-a352-b275fd6f7172": "linux-extended-boot",
    "0657fd6d-a4ab-43c4-84e5-0933c84b4f4f": "linux-swap",
    "e6d6d379-f507-44c2-a23c-238f2a3df928": "linux-lvm",
    "c12a7328-f81f-11d2-ba4b-00a0c93ec93b": "efi-system",
    "21686148-6449-6e6f-744e-656564454649": "bios-boot",
}
GPT_ENTRY_SIZES = (128, 256, 512, 1024, 2048, 4096)
GPT_TABLE_CAP = 1024 * 1024  # the usual table is 16 KiB (128 entries of 128 bytes)
# Where the ext2/3/4 superblock's magic number (0xEF53, little-endian) sits in a filesystem.
EXT_MAGIC_OFFSET = 1024 + 56


def has_ext_magic(data, offset=EXT_MAGIC_OFFSET):
    return data[offset:offset + 2] == b"\x53\xef"


def _partition(number, start, size, type_id, type_name, partuuid=None, name=None):
    return {"number": number, "start": start, "size": size, "type": type_id, "type_name": type_name,
            "partuuid": partuuid, "name": name}


def parse_partition_table(read, size):
    """Partitions of a raw disk image. read(offset, length) returns the image's bytes there; size
    is the image's length. Returns {table: gpt|mbr|none, disk_id, sector_size, partitions: [...]}
    with each partition's number, start and size in bytes, type, type_name, partuuid and (GPT)
    name. A bare ext2/3/4 filesystem is table 'none' with one partition numbered None.
    Anything else (empty, random, cut short, a bad checksum) raises ParseError."""
    if size < 2048:
        raise ParseError("image is %d bytes: too small for a partition table or a filesystem" % size)
    head = read(0, 2048)
    if has_ext_magic(head):
        return {"table": "none", "disk_id": None, "sector_size": 512,
                "partitions": [_partition(None, 0, size, None, "ext-filesystem")]}
    if head[510:512] != b"\x55\xaa":
        raise ParseError("no partition table (no MBR signature 55AA at byte 510) and no ext2/3/4 "
                         "superblock at the start: not a disk image this check can read")
    entries = [struct.unpack_from("<B3xB3xII", head, 446 + 16 * i) for i in range(4)]
    if any(kind == 0xEE for _unused, kind, _unused, _unused in entries):
        return _parse_gpt(read, size)
    signature = struct.unpack_from("<I", head, 440)[0]
    partitions = []
    for index, (_unused, kind, lba, count) in enumerate(entries):
        if kind == 0 or count == 0:
            continue
        if kind in MBR_EXTENDED:
            partitions.extend(_logical_partitions(read, lba, signature))
            continue
        partitions.append(_partition(index + 1, lba * 512, count * 512, "0x%02x" % kind,
                                     MBR_TYPES.get(kind), "%08x-%02x" % (signature, index + 1)))
    _check_bounds(partitions, size)
    return {"table": "mbr", "disk_id": "%08x" % signature, "sector_size": 512, "partitions": partitions}


def _logical_partitions(read, extended_lba, signature):
    """Walk the chain of extended boot records; logical partitions are numbered from 5."""
    found, ebr, seen = [], extended_lba, set()
    while ebr not in seen and len(found) < 128:
        seen.add(ebr)
        sector = read(ebr * 512, 512)
        if len(sector) < 512 or sector[510:512] != b"\x55\xaa":
            raise ParseError("extended boot record at sector %d has no 55AA signature" % ebr)
        _unused, kind, lba, count = struct.unpack_from("<B3xB3xII", sector, 446)
        if kind and count:
            number = 5 + len(found)
            found.append(_partition(number, (ebr + lba) * 512, count * 512, "0x%02x" % kind,
                                    MBR_TYPES.get(kind), "%08x-%02x" % (signature, number)))
        _unused, next_kind, next_lba, _unused = struct.unpack_from("<B3xB3xII", sector, 462)
        if next_kind not in MBR_EXTENDED or not next_lba:
            break
        ebr = extended_lba + next_lba
    return found


def _parse_gpt(read, size):
    for sector in (512, 4096):
        header = read(sector, 92)
        if header[:8] == b"EFI PART":
            break
    else:
        raise ParseError("protective MBR but no GPT header ('EFI PART') at LBA 1")
    header_size = struct.unpack_from("<I", header, 12)[0]
    if not 92 <= header_size <= sector:
        raise ParseError("GPT header size %d is out of range" % header_size)
    header = read(sector, header_size)
    stored = struct.unpack_from("<I", header, 16)[0]
    if binascii.crc32(header[:16] + b"\0\0\0\0" + header[20:]) & 0xFFFFFFFF != stored:
        raise ParseError("GPT header checksum does not match: the table is corrupt")
    entries_lba, count, entry_size, entries_crc = struct.unpack_from("<QIII", header, 72)
    # UEFI: entries of 128 x 2^n bytes; bounded here (with the table's size) before anything is read
    if entry_size not in GPT_ENTRY_SIZES or not 1 <= count <= 4096 or count * entry_size > GPT_TABLE_CAP:
        sizes = "/".join(map(str, GPT_ENTRY_SIZES))
        raise ParseError("GPT has %d entries of %d bytes: not a table this check reads (entries of %s bytes, "
                         "at most %d bytes in all)" % (count, entry_size, sizes, GPT_TABLE_CAP))
    table = read(entries_lba * sector, count * entry_size)
    if len(table) != count * entry_size or binascii.crc32(table) & 0xFFFFFFFF != entries_crc:
        raise ParseError("GPT partition entries checksum does not match: the table is corrupt")
    partitions = []
    for index in range(count):
        entry = table[index * entry_size:(index + 1) * entry_size]
        if entry[:16] == b"\0" * 16:
            continue
        type_guid = str(uuid.UUID(bytes_le=entry[:16]))
        first, last = struct.unpack_from("<QQ", entry, 32)
        name = entry[56:128].decode("utf-16-le", "replace").split("\0")[0]
        partitions.append(_partition(index + 1, first * sector, (last - first + 1) * sector, type_guid,
                                     GPT_TYPES.get(type_guid), str(uuid.UUID(bytes_le=entry[16:32])), name))
    _check_bounds(partitions, size)
    return {"table": "gpt", "disk_id": str(uuid.UUID(bytes_le=header[56:72])), "sector_size": sector,
            "partitions": partitions}


def _check_bounds(partitions, size):
    """Every partition inside the image, and no two sharing a byte: a disk whose partitions overlap
    (or repeat one another) has filesystems writing over each other's blocks."""
    for part in partitions:
        if part["size"] <= 0 or part["start"] + part["size"] > size:
            raise ParseError("partition %s (bytes %d-%d) runs past the end of the %d-byte image: cut short?"
                             % (part["number"], part["start"], part["start"] + part["size"], size))
    ordered = sorted(partitions, key=lambda part: (part["start"], part["number"] or 0))
    for before, after in zip(ordered, ordered[1:]):
        if after["start"] < before["start"] + before["size"]:
            raise ParseError("partitions %s (bytes %d-%d) and %s (bytes %d-%d) overlap: a corrupt or forged "
                             "partition table" % (before["number"], before["start"], before["start"] + before["size"],
                                                  after["number"], after["start"], after["start"] + after["size"]))


def parse_dumpe2fs_identity(text):
    """UUID and label from `dumpe2fs -h` (the label is None when it prints '<none>')."""
    found = {"uuid": None, "label": None}
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "Filesystem UUID":  # the last: a forged one (see parse_dumpe2fs) comes first
            found["uuid"] = value.strip().lower()
        elif sep and key.strip() == "Filesystem volume name" and found["label"] is None:
            found["label"] = None if value.strip() == "<none>" else value.strip()
    return found


def ext_fstype(features):
    """What a filesystem with these features is called (what blkid would say)."""
    if set(features) & {"extent", "extents", "flex_bg", "64bit", "huge_file", "metadata_csum"}:
        return "ext4"
    return "ext3" if "has_journal" in features else "ext2"


def parse_bzimage_version(head):
    """The version string of an x86 bzImage from its setup header (boot protocol >= 2.00):
    kernel_version at 0x20E points at a NUL-terminated string 0x200 bytes further on. The string
    is what /proc/version says after 'Linux version ', without the compiler part, e.g.
    '6.1.0-28-cloud-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)'.
    Returns {release, version}."""
    if len(head) < 0x210 or head[0x202:0x206] != b"HdrS":
        raise ParseError("not an x86 bzImage (no 'HdrS' setup header at 0x202)")
    protocol, = struct.unpack_from("<H", head, 0x206)
    pointer, = struct.unpack_from("<H", head, 0x20E)
    if protocol < 0x200 or not pointer:
        raise ParseError("bzImage boot protocol %x.%02x has no kernel version string" % (protocol >> 8, protocol & 0xFF))
    start = pointer + 0x200
    end = head.find(b"\0", start, start + 512)
    if end < 0:
        raise ParseError("bzImage kernel version string at 0x%x is not terminated" % start)
    text = head[start:end].decode("ascii", "replace")
    release = text.split(" ", 1)[0]
    if not re.match(r"^\d+\.\d+[0-9A-Za-z._+~-]*$", release):
        raise ParseError("bzImage version string does not start with a kernel release: %r" % text[:80])
    return {"release": release, "version": text}


def parse_debugfs_ls(text):
    """`debugfs -R 'ls -p DIR'`: one '/inode/mode/uid/gid/name/size/' line per entry. Returns
    [{name, inode, mode, size}] without '.' and '..'; a name with a newline breaks its line and is
    left out (such names are refused anyway)."""
    entries = []
    for line in text.splitlines():
        # ASCII digits of bounded length: a line forged by a name with a newline stays a line of data
        match = re.match(r"^/([0-9]{1,20})/([0-7]{1,7})/[0-9]+/[0-9]+/(.*)/([0-9]{0,20})/$", line)
        if match and match.group(3) not in (".", ".."):
            entries.append({"name": match.group(3), "inode": int(match.group(1)), "mode": int(match.group(2), 8),
                            "size": int(match.group(4)) if match.group(4) else 0})
    return entries


def parse_debugfs_fast_link(text):
    """A fast symlink's target from `debugfs -R 'stat PATH'` (None: not a fast link)."""
    match = re.search(r'^Fast link dest: "(.*)"$', text, re.M)
    return match.group(1) if match else None


# In-image paths go into debugfs request strings, which debugfs splits at spaces and quotes:
# only these characters are let through.
_PLAIN_IMAGE_PATH = re.compile(r"^/[A-Za-z0-9._+@:=,~/-]*$")


def plain_image_path(path):
    return bool(_PLAIN_IMAGE_PATH.match(path))


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


def parse_grub_first_kernel(text):
    """The kernel path of grub.cfg's first `linux` line (GRUB boots the first entry by default)."""
    match = re.search(r"^\s*linux(?:efi|16)?\s+(\S+)", text, re.M)
    return match.group(1) if match else None


def release_sort_key(release):
    """Orders kernel releases by their numbers: 6.12.57+deb12-cloud-amd64 after 6.1.0-28-cloud-amd64."""
    return [int(number) for number in re.findall(r"\d+", release)]
