"""plugins/module_utils/ext4_parsers.py against copies of real output (tests/fixtures/README.md says where from)."""

import glob
import os

import pytest

from ext4audit.parsers.ext4_parsers.common import NETFS_TYPES, ParseError
from ext4audit.parsers.ext4_parsers.fstab import fstab_drift, parse_fstab
from ext4audit.parsers.ext4_parsers.mounts import option_map, parse_ext4_options, parse_mountinfo
from ext4audit.parsers.ext4_parsers.os_files import parse_os_release
from ext4audit.parsers.ext4_parsers.superblock import (
    e2fsprogs_default_journal_blocks, parse_dumpe2fs, parse_jbd2_info, parse_size, superblock_option_map, volume_kind,
)
from conftest import FIXTURES, fixture_text

MiB = 1024 * 1024


# ------------------------------------------------------------------ mountinfo
def test_mountinfo_decodes_escaped_names():
    mounts = dict((m["mountpoint"], m) for m in parse_mountinfo(fixture_text("mountinfo", "escaped-names.txt")))
    for name in ("/tmp/fx/mnt with space", "/tmp/fx/mnt\twith\ttab", "/tmp/fx/mnt\nnewline",
                 "/tmp/fx/mnt\\backslash", "/tmp/fx/mnt#hash", "/tmp/fx/x<script>alert(1)</script>"):
        assert name in mounts, sorted(mounts)
    assert "/tmp/fx/mnt-\\xff-latin1-\\xe9" in mounts  # non-UTF-8 bytes kept visible, never raw
    spaced = mounts["/tmp/fx/mnt with space"]
    assert (spaced["major"], spaced["minor"], spaced["fstype"], spaced["source"]) == (7, 0, "ext4", "/dev/loop0")
    assert spaced["mount_options"] == ["rw", "noatime"]
    assert spaced["super_options"] == ["rw", "errors=remount-ro"]
    bind = mounts["/tmp/fx/bind of space"]
    assert bind["root"] == "/sub dir" and (bind["major"], bind["minor"]) == (7, 0)
    assert mounts["/tmp/fx/tmpfs mnt"]["source"] == "fx tmpfs"


def test_mountinfo_optional_fields_and_real_host():
    mounts = parse_mountinfo(fixture_text("mountinfo", "host-vda.txt"))
    root = [m for m in mounts if m["mountpoint"] == "/"][0]
    assert root["fstype"] == "ext4" and "discard" in root["super_options"]
    line = "36 35 98:0 /mnt1 /mnt2 rw,noatime master:1 shared:7 - ext3 /dev/root rw,errors=continue"
    parsed = parse_mountinfo(line)[0]
    assert parsed["optional"] == ["master:1", "shared:7"]
    assert parsed["super_options"] == ["rw", "errors=continue"]


def test_mountinfo_netfs_sample():
    types = set(m["fstype"] for m in parse_mountinfo(fixture_text("mountinfo", "netfs.txt")))
    assert {"nfs4", "cifs"} <= types
    assert types <= set(NETFS_TYPES) | {"ext4", "tmpfs", "proc", "sysfs", "overlay"}


@pytest.mark.parametrize("line", ["garbage", "1 2 3:4 / /x rw", "a b 8:1 / / rw - ext4 /dev/sda1 rw",
                                  "1 2 8-1 / / rw - ext4 /dev/sda1 rw"])
def test_mountinfo_malformed_line_is_a_clear_error(line):
    with pytest.raises(ParseError, match="mountinfo line 1"):
        parse_mountinfo(line)


# ------------------------------------------------------------------ options
def test_options_new_kernel_defaults_included():
    opts = option_map(parse_ext4_options(fixture_text("ext4_options", "kernel-6.18-defaults.txt")))
    assert opts["data"] == "ordered" and opts["delalloc"] is True and opts["auto_da_alloc"] is True
    assert opts["dioread_nolock"] is True and opts["barrier"] is True and opts["commit"] == "5"


def test_dioread_lock_spellings_old_and_new():
    new = option_map(parse_ext4_options(fixture_text("ext4_options", "kernel-6.18-dioread-lock.txt")))
    assert new["dioread_nolock"] is False
    assert "nodioread_nolock" in fixture_text("ext4_options", "kernel-6.18-dioread-lock.txt")
    old_text = fixture_text("ext4_options", "kernel-pre5.6-debian-sid-2019-dm5-dioread-lock-commit600.txt")
    assert "dioread_lock" in old_text.split()
    old = option_map(parse_ext4_options(old_text))
    assert old["dioread_nolock"] is False and old["commit"] == "600"


def test_superblock_baked_options_are_in_the_options_file():
    opts = option_map(parse_ext4_options(fixture_text("ext4_options", "kernel-6.18-tune2fs-sb-defaults.txt")))
    assert opts["barrier"] is False and opts["data"] == "writeback" and opts["delalloc"] is False


def test_every_options_fixture_parses():
    for path in glob.glob(os.path.join(FIXTURES, "ext4_options", "*.txt")):
        opts = option_map(parse_ext4_options(open(path).read()))
        assert "ro" in opts, path


@pytest.mark.parametrize("text", ["", "data=ordered\nrw\n", "rw\nbad option\n"])
def test_options_malformed(text):
    with pytest.raises(ParseError):
        parse_ext4_options(text)


def test_option_map_spellings():
    assert option_map(["barrier=0"]) == {"barrier": False}
    assert option_map(["barrier=1", "nobarrier"]) == {"barrier": False}
    assert option_map(["noauto_da_alloc", "nodelalloc", "ro"]) == {"auto_da_alloc": False, "delalloc": False, "ro": True}


# ------------------------------------------------------------------ dumpe2fs
@pytest.mark.parametrize("name, journal_bytes, inode_size, block_count, fields", [
    ("e2fsprogs-1.42-centos7-root-orphan.txt", 128 * MiB, 256, 13106939, "legacy"),
    ("e2fsprogs-1.42-android-cust-no-mkfs-time.txt", 8 * MiB, 256, 131072, "legacy"),
    ("e2fsprogs-1.45-luks-music-journal-128m.txt", 128 * MiB, 256, 78642688, "legacy"),
    ("e2fsprogs-1.45-image-metadata-csum.txt", 32 * MiB, 256, 262144, "legacy"),
    ("e2fsprogs-1.47-default-2g.txt", 64 * MiB, 256, 524288, "total"),
    ("e2fsprogs-1.47-small-journal-inode128.txt", 4 * MiB, 128, 524288, "total"),
    ("e2fsprogs-1.47-1k-blocks.txt", 16 * MiB, 256, 524288, "total"),
    ("e2fsprogs-1.47-real-nvme-2tb-journal-1024m-csum.txt", 1024 * MiB, 256, 488378368, "total"),
    ("e2fsprogs-1.47-fast-commit-stride.txt", 16640 * 4096, 256, 524288, "total"),
])
def test_dumpe2fs_versions(name, journal_bytes, inode_size, block_count, fields):
    sb = parse_dumpe2fs(fixture_text("dumpe2fs", name))
    assert sb["journal_bytes"] == journal_bytes
    assert sb["inode_size"] == inode_size
    assert sb["block_count"] == block_count
    assert sb["e2fsprogs_fields"] == fields
    assert "has_journal" in sb["features"]


def test_dumpe2fs_details():
    sb = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-fast-commit-stride.txt"))
    assert (sb["raid_stride"], sb["raid_stripe_width"], sb["fast_commit_blocks"]) == (16, 64, 256)
    assert sb["errors_behavior"] == "remount read-only" and "fast_commit" in sb["features"]
    baked = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-tune2fs-nobarrier-mountopts.txt"))
    assert baked["default_mount_options"] == ["journal_data_writeback", "user_xattr", "acl", "nobarrier"]
    assert baked["mount_options"] == ["nodelalloc"]
    assert superblock_option_map(baked) == {"data": "writeback", "barrier": False, "delalloc": False,
                                              "user_xattr": True, "acl": True}
    nojournal = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-nojournal.txt"))
    assert "has_journal" not in nojournal["features"] and nojournal["journal_bytes"] is None
    csum = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-real-nvme-2tb-journal-1024m-csum.txt"))
    assert "journal_checksum_v3" in csum["journal_features"]


def test_dumpe2fs_errors_and_counts():
    errors = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-errors-recorded.txt"))
    assert (errors["state"], errors["error_count"]) == ("clean with errors", 7)
    default = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-default-2g.txt"))
    assert (default["state"], default["error_count"]) == ("clean", 0)  # no "FS Error count" line: none
    assert (default["inode_count"], default["free_inodes"], default["reserved_block_count"]) == (131072, 131061, 26214)
    centos = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.42-centos7-root-orphan.txt"))
    assert (centos["free_inodes"], centos["reserved_block_count"]) == (3205489, 544984)


@pytest.mark.parametrize("disk, model, kind", [
    ("md127", None, "md-raid"),
    ("dm-0", None, "device-mapper"),
    ("loop3", None, "loop"),
    ("vda", None, "virtual"),
    ("xvdf", None, "virtual"),
    ("nvme1n1", "Amazon Elastic Block Store              ", "virtual"),
    ("sdb", "PersistentDisk  ", "virtual"),
    ("sda", "Virtual Disk    ", "virtual"),
    ("sda", "Samsung SSD 870 ", "disk"),
    ("nvme0n1", None, "disk"),
    (None, None, "disk"),
])
def test_volume_kind(disk, model, kind):
    assert volume_kind(disk, model) == kind


def test_dumpe2fs_size_units_without_blocks():
    text = "Block size:               4096\nFilesystem features:      has_journal\nJournal size:             4096k\n"
    assert parse_dumpe2fs(text)["journal_bytes"] == 4 * MiB
    assert parse_size("128M") == 128 * MiB
    with pytest.raises(ParseError):
        parse_size("12 parsecs")


@pytest.mark.parametrize("text", ["", "dumpe2fs 1.47.0 (5-Feb-2023)\n", "Couldn't find valid filesystem superblock.\n"])
def test_dumpe2fs_without_superblock(text):
    with pytest.raises(ParseError, match="no superblock header"):
        parse_dumpe2fs(text)


def test_default_journal_table():
    # e2fsprogs lib/ext2fs/mkjournal.c, in 4 KiB blocks: 2 GiB -> 64 MiB, 256 GiB -> 1 GiB.
    assert e2fsprogs_default_journal_blocks(1000) is None
    assert e2fsprogs_default_journal_blocks(262144) == 8192
    assert e2fsprogs_default_journal_blocks(524288) == 16384
    assert e2fsprogs_default_journal_blocks(13106939) == 65536
    assert e2fsprogs_default_journal_blocks(78642688) == 262144


# ------------------------------------------------------------------ jbd2
def test_jbd2_info_new_and_old():
    new = parse_jbd2_info(fixture_text("jbd2", "kernel-6.18-loop.txt"))
    assert new["transactions"] > 0 and new["max_transaction_blocks"] > 0
    assert "average_transaction_commit_time_us" in new
    old = parse_jbd2_info(fixture_text("jbd2", "kernel-5.10.162-nvme1n1-mail-indent-stripped.txt"))
    assert old["max_transaction_blocks"] > 0
    fresh = parse_jbd2_info(fixture_text("jbd2", "kernel-6.18-loop-fresh-mount.txt"))
    assert fresh["transactions"] == 0


def test_jbd2_malformed():
    with pytest.raises(ParseError):
        parse_jbd2_info("hello\n")
    with pytest.raises(ParseError):
        parse_jbd2_info("")


# ------------------------------------------------------------------ fstab
def test_fstab_mixed():
    entries, errors = parse_fstab(fixture_text("fstab", "fstab-mixed.txt"))
    by_mount = dict((e["mountpoint"], e) for e in entries)
    assert by_mount["/"]["options"] == ["noatime", "errors=remount-ro"]
    assert by_mount["/mnt/backup disk"]["spec"] == "LABEL=backup disk"
    assert by_mount["/home"]["fstype"] == "nfs4"
    assert by_mount["/var"]["options"] == ["defaults", "nodelalloc", "barrier=0"]
    assert "/mnt/short" not in by_mount  # two fields: reported, not guessed
    assert len(errors) == 1 and "has 2 fields" in errors[0] and "/mnt/short" in errors[0]
    entries, errors = parse_fstab("/dev/sda1 /only-two\n")
    assert entries == [] and "fstab line 1 has 2 fields" in errors[0]


def test_fstab_drift():
    effective = option_map(["rw", "data=ordered", "delalloc", "errors=continue", "commit=5", "barrier"])
    flags = {"rw", "relatime"}
    drift = fstab_drift(["defaults", "noatime", "errors=remount-ro", "nodelalloc", "commit=0", "nofail",
                           "x-systemd.device-timeout=5", "usrquota"], effective, flags)
    assert drift == [
        {"option": "noatime", "wanted": "noatime", "effective": None},
        {"option": "errors=remount-ro", "wanted": "remount-ro", "effective": "continue"},
        {"option": "nodelalloc", "wanted": False, "effective": True},
    ]
    assert fstab_drift(["defaults", "barrier=1", "rw"], effective, flags) == []


def test_os_release():
    parsed = parse_os_release('NAME="Debian GNU/Linux"\nID=debian\n# comment\nVERSION_ID="12"\n')
    assert parsed == {"NAME": "Debian GNU/Linux", "ID": "debian", "VERSION_ID": "12"}
