"""Offline option inference, pinned on real /proc/fs/ext4/<dev>/options captures from several kernels
(tests/fixtures/ext4_options, README there) and at the kernel releases where a default changed.
The live comparison on this machine's kernel is tests/integration/test_inference_differential.py."""

import pytest

from ext4audit.parsers import kernel_version as kv
from ext4audit.parsers.ext4_parsers.fstab import fstab_drift
from ext4audit.parsers.ext4_parsers.kernel_defaults import default_dioread_nolock, infer_options
from ext4audit.parsers.ext4_parsers.mounts import option_map, parse_ext4_options, parse_mountinfo
from ext4audit.parsers.ext4_parsers.superblock import parse_dumpe2fs
from conftest import fixture_text, rule_read_options

RULE_OPTIONS = sorted(rule_read_options())
DEFAULT_SB = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-default-2g.txt"))  # 4 KiB blocks


def sb(name):
    return parse_dumpe2fs(fixture_text("dumpe2fs", name))


def rule_view(tokens):
    """What a rule sees of an option list that names every option in effect: unlisted is off."""
    opts = option_map(tokens)
    return dict((name, opts.get(name, False)) for name in RULE_OPTIONS)


def kernel_options(name):
    return parse_ext4_options(fixture_text("ext4_options", name))


def mountinfo_super_options(mountpoint):
    mounts = parse_mountinfo(fixture_text("mountinfo", "ext4-loop-options-6.18.txt"))
    return [m for m in mounts if m["mountpoint"] == mountpoint][0]["super_options"]


@pytest.mark.parametrize("case, superblock, fstype", [
    ("defaults", DEFAULT_SB, "ext4"),
    ("nodelalloc", DEFAULT_SB, "ext4"),
    ("data-journal", DEFAULT_SB, "ext4"),
    ("dioread-lock", DEFAULT_SB, "ext4"),
    ("nobarrier-commit60-writeback", DEFAULT_SB, "ext4"),
    ("ext3-mount", sb("e2fsprogs-1.47-ext3.txt"), "ext3"),
    ("tune2fs-sb-defaults", sb("e2fsprogs-1.47-tune2fs-nobarrier-mountopts.txt"), "ext4"),
    ("fast-commit-stride", sb("e2fsprogs-1.47-fast-commit-stride.txt"), "ext4"),
    ("nojournal", sb("e2fsprogs-1.47-nojournal.txt"), "ext4"),
])
def test_kernel_6_18_captures(case, superblock, fstype):
    tokens = mountinfo_super_options("/tmp/fx/m-" + case)
    inferred = infer_options(superblock, tokens, "6.18.44", fstype)
    assert rule_view(inferred) == rule_view(kernel_options("kernel-6.18-%s.txt" % case))


@pytest.mark.parametrize("kernel, capture, mount", [
    ("5.7.1", "kernel-5.7.1-sdc2.txt", ["rw"]),
    ("6.5.5", "kernel-6.5.5-nvme1n1p1.txt", ["rw"]),
    # The mail does not name its kernel; Debian sid in June 2019 ran 4.19 (see the fixtures README).
    ("4.19.0", "kernel-pre5.6-debian-sid-2019-dm5-dioread-lock-commit600.txt", ["rw", "commit=600"]),
])
def test_captures_from_other_kernels(kernel, capture, mount):
    """Their superblocks were not published: 4 KiB blocks and no RAID geometry, as the options show."""
    assert rule_view(infer_options(DEFAULT_SB, mount, kernel)) == rule_view(kernel_options(capture))


@pytest.mark.parametrize("kernel, block_size, page_size, expected", [
    ("5.5.19", 4096, 4096, False),
    ("5.6.0-rc1", 4096, 4096, True),  # 244adf6426ee was merged for 5.6-rc1
    ("5.6.0", 4096, 4096, True),
    ("6.7.12", 1024, 4096, False),   # blocks smaller than the page: not before e89fdcc425b6
    ("6.8.0-rc1", 1024, 4096, True),
    ("6.18.44", 1024, 4096, True),
    ("6.7.12", 4096, 65536, False),  # 4 KiB blocks on a 64 KiB-page arm64/ppc64le kernel
    ("6.8.0", 4096, 65536, True),
    ("6.18.44", 65536, 4096, False),  # blocks larger than the page
    ("6.18.44", None, 4096, False),
])
def test_dioread_nolock_default_by_kernel(kernel, block_size, page_size, expected):
    assert default_dioread_nolock(kernel, block_size, page_size) is expected
    superblock = dict(DEFAULT_SB, block_size=block_size)
    inferred = option_map(infer_options(superblock, ["rw", "nodelalloc"], kernel, page_size=page_size))
    assert inferred["dioread_nolock"] is expected


def test_seed_001_rule_is_decided_offline_on_both_sides_of_5_6():
    """nodelalloc baked into the superblock: dioread_nolock is known, not missing, so the rule decides."""
    baked = dict(DEFAULT_SB, default_mount_options=["user_xattr", "acl", "nodelalloc"])
    new, old = (option_map(infer_options(baked, ["rw"], k)) for k in ("5.6.0", "5.4.0"))
    assert (new["dioread_nolock"], new["delalloc"]) == (True, False)
    assert (old["dioread_nolock"], old["delalloc"]) == (False, False)


@pytest.mark.parametrize("mount, superblock, expected", [
    (["rw", "data=journal"], DEFAULT_SB, {"data": "journal", "delalloc": False, "dioread_nolock": False}),
    (["ro", "noload"], DEFAULT_SB, {"norecovery": True, "data": None, "journal_async_commit": False}),
    (["ro", "norecovery"], DEFAULT_SB, {"norecovery": True, "data": None}),
    (["rw"], sb("e2fsprogs-1.47-nojournal.txt"), {"data": None, "journal_checksum": False}),
    (["rw", "commit=0"], DEFAULT_SB, {"commit": "5"}),
    (["rw", "auto_da_alloc=0"], DEFAULT_SB, {"auto_da_alloc": False}),
    (["rw", "auto_da_alloc=1"], DEFAULT_SB, {"auto_da_alloc": True}),
    (["rw", "barrier=0"], DEFAULT_SB, {"barrier": False}),
    (["rw", "dioread_lock"], DEFAULT_SB, {"dioread_nolock": False}),
    (["rw", "data=writeback", "journal_async_commit"], DEFAULT_SB,
     {"journal_async_commit": True, "journal_checksum": True}),
    (["rw"], sb("e2fsprogs-1.47-ext3.txt"), {"delalloc": True}),  # mounted as ext4: delalloc by default
    (["rw"], sb("e2fsprogs-1.47-fast-commit-stride.txt"), {"stripe": "64", "errors": "remount-ro"}),
    # 2 GiB of 4 KiB blocks is 16 groups: mb_optimize_scan is on by default and printed only when off
    (["rw", "mb_optimize_scan=1"], DEFAULT_SB, {"mb_optimize_scan": None}),
    (["rw", "mb_optimize_scan=0"], DEFAULT_SB, {"mb_optimize_scan": "0"}),
])
def test_what_the_kernel_derives(mount, superblock, expected):
    inferred = option_map(infer_options(superblock, mount, "6.18.44"))
    assert dict((name, inferred.get(name)) for name in expected) == expected


def test_ext3_mounts_have_no_delalloc_by_default():
    inferred = option_map(infer_options(sb("e2fsprogs-1.47-ext3.txt"), ["rw"], "6.18.44", "ext3"))
    assert inferred["delalloc"] is False


@pytest.mark.parametrize("info, upstream, why", [
    (kv.identify("6.1.0-28-cloud-amd64", "Linux version 6.1.0-28-cloud-amd64 (x) #1 SMP PREEMPT_DYNAMIC "
                 "Debian 6.1.119-1 (2024-11-22)"), "6.1.119", "the image's boot kernel (6.1.0-28-cloud-amd64)"),
    (kv.identify("5.15.0-1034-aws"), "5.15.0", "upstream version unknown, 5.15.0 assumed from the release"),
    (kv.identify("4.18.0-513.5.1.el8_9.x86_64"), "4.18.0", "the image's boot kernel"),
    (None, kv.OPTIONS_DEFAULT_KERNEL, "no known kernel: the defaults of %s assumed" % kv.OPTIONS_DEFAULT_KERNEL),
    ({"release": None, "upstream": None}, kv.OPTIONS_DEFAULT_KERNEL, "no known kernel"),
])
def test_the_kernel_whose_defaults_apply(info, upstream, why):
    chosen = kv.options_kernel(info, "the image's boot kernel")
    assert chosen["upstream"] == upstream and why in chosen["why"]


def test_fstab_drift_reads_mount_tokens_as_the_kernel_does():
    """fstab auto_da_alloc=0 is in effect when the kernel prints noauto_da_alloc (was reported as drift)."""
    effective = option_map(infer_options(DEFAULT_SB, ["rw", "auto_da_alloc=0", "commit=0"], "6.18.44"))
    assert effective["auto_da_alloc"] is False and effective["commit"] == "5"
    assert fstab_drift(["defaults", "auto_da_alloc=0", "commit=0", "noload"], effective, {"rw"}) == []
    assert fstab_drift(["auto_da_alloc=1"], effective, {"rw"}) == \
        [{"option": "auto_da_alloc=1", "wanted": True, "effective": False}]
