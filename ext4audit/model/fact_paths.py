"""The fact paths a rule may read (`{fact: PATH, ...}` in rules/catalog.yml), by rule scope.

A path the engine cannot find is read as "unknown" (or, for options, "off") on every host, so a
rule with a misspelt path never fires; the catalog loader refuses such a rule instead. This is
the one list of what exists: what library/ext4_facts.py puts in a facts record (checked against
a real record from the module on a loop-mounted ext4 by tests/integration/test_fact_paths.py)
and what engine.py works out itself (derived, host; checked by tests/unit/test_rules.py).
A new scope or a new fact is added here, once.

Each root lists its keys; "a.b" is a key b inside the mapping a.
"""

from ext4audit.parsers.ext4_parsers.superblock import SUPERBLOCK_FIELDS

# Effective mount options as engine.filesystem_context names them (ext4_parsers.mounts.option_map:
# nodelalloc -> delalloc, nobarrier and barrier=0 -> barrier, rw/ro -> ro): every name in
# fs/ext4/super.c's ext4_param_specs (6.18), the removed ones that older kernels still print,
# and resv_strict, which a vendor 5.7 kernel prints (tests/fixtures/ext4_options).
OPTIONS = (
    "ro", "bsddf", "minixdf", "grpid", "bsdgroups", "sysvgroups", "resgid", "resuid", "sb", "errors",
    "nouid32", "debug", "oldalloc", "orlov", "user_xattr", "acl", "norecovery", "noload", "bh",
    "commit", "min_batch_time", "max_batch_time", "journal_dev", "journal_path", "journal_checksum",
    "journal_async_commit", "abort", "data", "data_err", "usrjquota", "grpjquota", "jqfmt",
    "grpquota", "quota", "noquota", "usrquota", "prjquota", "barrier", "i_version", "dax", "stripe",
    "delalloc", "warn_on_error", "lazytime", "debug_want_extra_isize", "mblk_io_submit",
    "block_validity", "inode_readahead_blks", "journal_ioprio", "auto_da_alloc", "dioread_nolock",
    "discard", "init_itable", "fc_debug_force", "fc_debug_max_replay", "max_dir_size_kb",
    "test_dummy_encryption", "inlinecrypt", "nombcache", "no_mbcache", "prefetch_block_bitmaps",
    "no_prefetch_block_bitmaps", "mb_optimize_scan", "check", "nocheck", "reservation",
    "noreservation", "journal", "resv_strict",
)
# ext4_parsers.superblock.parse_dumpe2fs
SUPERBLOCK = tuple(name for name, _type, _description in SUPERBLOCK_FIELDS)
# ext4_facts Collector.queue
QUEUE = ("device", "rotational", "write_cache", "discard_max_bytes", "optimal_io_size", "model", "kind")
# ext4_parsers.superblock.parse_jbd2_info: the head line, then one key per statistics line (kernels 5.10-6.18)
JBD2 = (
    "transactions", "requested", "max_transaction_blocks", "waiting_for_transaction_ms",
    "request_delay_ms", "running_transaction_ms", "transaction_was_being_locked_ms",
    "flushing_data_in_ordered_mode_ms", "logging_transaction_ms", "average_transaction_commit_time_us",
    "handles_per_transaction", "blocks_per_transaction", "logged_blocks_per_transaction",
)
# ext4_facts Collector.filesystem
FILESYSTEM = (
    "device", "kernel_name", "major", "minor", "mountpoint", "fstype", "bind_mounts", "mount_options",
    "super_options", "superblock", "jbd2", "queue", "options", "options_source", "fstab", "fstab.spec",
    "fstab.fstype", "fstab.options", "fstab.line", "fstab_drift", "device_bytes",
    # Collector.usage: statvfs of the mount point (live; null in a disk image's record)
    "usage", "usage.block_size", "usage.blocks", "usage.blocks_free", "usage.blocks_avail", "usage.inodes",
    "usage.inodes_free",
)
# What ext4_image_facts adds to a filesystem of a disk image (options_kernel: also ext4_facts'
# inferred options, on kernels without /proc/fs/ext4/<dev>/options)
IMAGE_FILESYSTEM = (
    "options_kernel", "options_kernel.upstream", "options_kernel.why", "uuid", "label", "partition",
    "fsck", "fsck.clean", "fsck.exit_code", "fsck.problems",
)
# ext4_facts Collector.collect: a network mount
NETFS = ("mountpoint", "fstype", "source", "options")
# kernel_version.identify and ext4_facts Collector.kernel
KERNEL = (
    "release", "vendor", "upstream", "vendor_version", "backports", "notes", "proc_version",
    "version_signature", "os_release", "os_release.ID", "os_release.ID_LIKE", "os_release.VERSION_ID",
    "os_release.PRETTY_NAME", "page_size",
)
# What ext4_image_facts adds to the kernel of a disk image
IMAGE_KERNEL = ("source",)
# engine.filesystem_context
DERIVED = (
    "journal_present", "journal_ratio", "journal_default_bytes", "mb_optimize_scan", "stripe",
    "block_smaller_than_page", "fstab_drift_count", "inode_use", "growth_room_32bit",
    "missing_ext4_features", "reserved_bytes", "database_volume", "block_use", "use_source",
    "disk_image", "boot_filesystem", "grub_version", "grub_unreadable_features", "e2fsprogs_version", "fsck_unsupported_features",
    "image_build_date",
)
# The host's capacity limits (policy.CAPACITY_LIMITS, ext4_audit_capacity_limits): what a rule
# compares a use with ({fact: derived.block_use, gte: {fact: limit.block_use_medium}})
LIMIT = ("block_use_medium", "block_use_high", "inode_use_medium", "inode_use_high")
# What the engine reads of a disk image's record (ext4_image_facts: image): fstab_unresolved and
# unread for host facts, packages for the derived boot-tool facts and identity for the image's build
# date (engine.filesystem_context)
IMAGE = ("fstab_unresolved", "unread", "packages", "identity")
# engine.host_context
HOST = ("ext4_count", "netfs_count", "disk_image", "fstab_unresolved_count", "image_unread_count")

# scope -> root -> keys: what a rule of that scope sees (the engine's contexts)
BY_SCOPE = {
    "filesystem": {"opt": OPTIONS, "sb": SUPERBLOCK, "queue": QUEUE, "jbd2": JBD2,
                   "fs": FILESYSTEM + IMAGE_FILESYSTEM, "kernel": KERNEL + IMAGE_KERNEL, "derived": DERIVED,
                   "limit": LIMIT},
    "netfs": {"fs": NETFS, "kernel": KERNEL + IMAGE_KERNEL},
    "host": {"kernel": KERNEL + IMAGE_KERNEL, "host": HOST},
}
_KNOWN = dict((scope, frozenset("%s.%s" % (root, key) for root, keys in roots.items() for key in keys))
              for scope, roots in BY_SCOPE.items())


def known(scope, path):
    """Whether a rule of this scope can read path."""
    return path in _KNOWN[scope]


def roots(scope):
    return sorted(BY_SCOPE[scope])
