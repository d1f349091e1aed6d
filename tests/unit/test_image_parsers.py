"""Parsers of the image pre-rollout check (plugins/module_utils/ext4_parsers.py, disk image section), and the
inferred-options function that ext4_facts and ext4_image_facts share.

Partition tables are built here byte by byte from the MBR and UEFI GPT layouts (with real CRC32s);
tests/integration/test_image_facts.py reads the ones sfdisk writes."""

import binascii
import glob
import os
import random
import re
import struct
import subprocess
import sys
import uuid

import pytest

from conftest import ROOT, VENV_BIN, fixture_text

from ext4audit.parsers.ext4_parsers.common import ParseError
from ext4audit.parsers.ext4_parsers.disk_image import (
    parse_bzimage_version, parse_debugfs_fast_link, parse_debugfs_ls, parse_partition_table, plain_image_path,
)
from ext4audit.parsers.ext4_parsers.fstab import fstab_long_line, fstab_mount_tokens, fstab_spec_target
from ext4audit.parsers.ext4_parsers.kernel_defaults import infer_options
from ext4audit.parsers.ext4_parsers.mounts import option_map
from ext4audit.parsers.ext4_parsers.os_files import parse_grub_first_kernel, release_sort_key
from ext4audit.parsers.ext4_parsers.superblock import ext_fstype, parse_dumpe2fs_identity

MODULE = os.path.join(ROOT, "library", "ext4_image_facts.py")


# ------------------------------------------------------------------ inferred options
# infer_options itself is pinned in test_inference.py and against the kernel in
# tests/integration/test_inference_differential.py.
def test_ext4_facts_uses_the_shared_inference():
    text = open(os.path.join(ROOT, "library", "ext4_facts.py")).read()
    assert "infer_options(superblock, mount[\"super_options\"], self.options_kernel[\"upstream\"]" in text
    assert "KERNEL_DEFAULTS" not in text  # one place for the kernel defaults


def test_fstab_mount_tokens_keep_what_reaches_ext4():
    assert fstab_mount_tokens(["defaults"]) == ["rw"]
    assert fstab_mount_tokens(["errors=remount-ro", "noatime", "nofail", "x-systemd.growfs"]) == \
        ["rw", "errors=remount-ro"]
    assert fstab_mount_tokens(["ro", "nodelalloc", "commit=30"]) == ["ro", "nodelalloc", "commit=30"]
    inferred = option_map(infer_options(None, fstab_mount_tokens(["nobarrier", "data=writeback"]), "6.1.0"))
    assert inferred["barrier"] is False and inferred["data"] == "writeback" and inferred["delalloc"] is True


# ----------------------------------------------------------------------- fstab sources
@pytest.mark.parametrize("spec, expected", [
    ("UUID=97ED1E1D-8194-4C20-849E-A22BA9B40F4F", ("uuid", "97ed1e1d-8194-4c20-849e-a22ba9b40f4f")),
    ('UUID="abc"', ("uuid", "abc")),
    ("/dev/disk/by-uuid/abc", ("uuid", "abc")),
    ("LABEL=Root Fs", ("label", "Root Fs")),
    ("/dev/disk/by-label/boot", ("label", "boot")),
    ("PARTUUID=5D8E3F2B-01", ("partuuid", "5d8e3f2b-01")),
    ("PARTLABEL=data", ("partlabel", "data")),
    ("/dev/vda1", ("number", 1)), ("/dev/sda15", ("number", 15)), ("/dev/xvdb2", ("number", 2)),
    ("/dev/nvme0n1p3", ("number", 3)), ("/dev/mmcblk0p2", ("number", 2)),
    ("/dev/vda", ("disk", "/dev/vda")), ("/dev/nvme0n1", ("disk", "/dev/nvme0n1")),
    ("/dev/root", ("root", None)),
    ("/dev/mapper/vg-root", (None, "/dev/mapper/vg-root")), ("server:/export", (None, "server:/export")),
])
def test_fstab_spec_target(spec, expected):
    assert fstab_spec_target(spec) == expected


@pytest.mark.parametrize("spec", ["/dev/sda" + "1" * 5000, "/dev/nvme0n1p" + "9" * 5000, "/dev/vda\u0661",
                                  "/dev/sda1234"])
def test_fstab_partition_numbers_are_short_ascii(spec):
    """Python's int() refuses strings of over 4,300 digits (ValueError) and reads Unicode digits:
    a partition number is 1 to 3 ASCII digits, anything else names nothing this check knows."""
    assert fstab_spec_target(spec) == (None, spec)


# ------------------------------------------------------------------ in-image paths
@pytest.mark.parametrize("path", ["/boot/vmlinuz-6.12.117+deb12-cloud-amd64", "/etc/os-release",
                                  "/boot/initrd.img-6.1.0-56-cloud-amd64", "/", "/a/../b", "/x@y:z=1,2~"])
def test_plain_paths_pass(path):
    assert plain_image_path(path)


@pytest.mark.parametrize("path", ["boot/vmlinuz", "/boot/vmlinuz-1; dump /etc/shadow /tmp/x", "/a b", '/a"b',
                                  "/a'b", "/a\nb", "/a\tb", "/a\\b", "/$HOME", "/a`b`", "/caf\u00e9", "", "/a|b"])
def test_other_paths_are_refused(path):
    assert not plain_image_path(path)


# ------------------------------------------------------------------------ debugfs
# Captured from debugfs 1.47.0 (`ls -p /` and `stat` of a fast symlink) on an image made with mkfs.ext4 -d.
LS_P = """
/2/040755/0/0/.//
/2/040755/0/0/..//
/11/040700/0/0/lost+found//
/12/040755/0/0/boot//
/16/120777/0/0/longlink/100/
/20/120777/0/0/vmlinuz/39/
/21/100644/0/0/initrd.img-6.1.0-56-cloud-amd64/15316167/
"""
STAT_FAST_LINK = """Inode: 20   Type: symlink    Mode:  0777   Flags: 0x0
Generation: 0    Version: 0x00000000:00000000
User:     0   Group:     0   Project:     0   Size: 39
File ACL: 0
Links: 1   Blockcount: 0
Fragment:  Address: 0    Number: 0    Size: 0
Size of extra inode fields: 32
Inode checksum: 0xefc82155
Fast link dest: "boot/vmlinuz-1; dump /etc/shadow /tmp/x"
"""


def test_parse_debugfs_ls():
    entries = parse_debugfs_ls(LS_P)
    assert [e["name"] for e in entries] == ["lost+found", "boot", "longlink", "vmlinuz",
                                            "initrd.img-6.1.0-56-cloud-amd64"]
    by_name = dict((e["name"], e) for e in entries)
    assert by_name["boot"]["mode"] == 0o40755 and by_name["boot"]["size"] == 0
    assert by_name["vmlinuz"]["mode"] == 0o120777 and by_name["vmlinuz"]["inode"] == 20
    assert by_name["initrd.img-6.1.0-56-cloud-amd64"]["size"] == 15316167


def test_parse_debugfs_ls_numbers_are_bounded():
    """A file name with a newline can put a line of its choosing in debugfs' output: its numbers are
    bounded ASCII digits, or the line is not an entry."""
    forged = "/%s/100644/0/0/fstab/12/\n/12/100644/0/0/fstab/%s/\n/13/100644/0/0/os-release/\u0661/\n" % (
        "9" * 5000, "9" * 5000)
    assert parse_debugfs_ls(forged + LS_P)[0]["name"] == "lost+found"
    assert parse_debugfs_ls(forged) == []


def test_parse_debugfs_fast_link():
    assert parse_debugfs_fast_link(STAT_FAST_LINK) == "boot/vmlinuz-1; dump /etc/shadow /tmp/x"
    assert parse_debugfs_fast_link(STAT_FAST_LINK.replace("Fast link dest", "EXTENTS")) is None


def test_dumpe2fs_identity():
    found = parse_dumpe2fs_identity(fixture_text("dumpe2fs", "e2fsprogs-1.47-nojournal.txt"))
    assert found == {"uuid": "baabfe35-fc4e-4ab3-bfbb-a653204871b1", "label": None}
    labelled = "Filesystem volume name:   root\nFilesystem UUID:          ABC\n"
    assert parse_dumpe2fs_identity(labelled) == {"uuid": "abc", "label": "root"}


def test_ext_fstype():
    assert ext_fstype(["has_journal", "extent", "flex_bg"]) == "ext4"
    assert ext_fstype(["has_journal", "ext_attr", "dir_index"]) == "ext3"
    assert ext_fstype(["ext_attr", "filetype"]) == "ext2"


# -------------------------------------------------------------------------- kernels
def bzimage(version, protocol=0x20F, pointer=0x3000):
    """The first bytes of an x86 bzImage: the setup header's magic, protocol and version pointer."""
    head = bytearray(0x4000)
    head[0x202:0x206] = b"HdrS"
    struct.pack_into("<H", head, 0x206, protocol)
    struct.pack_into("<H", head, 0x20E, pointer)
    if version is not None:
        head[pointer + 0x200:pointer + 0x200 + len(version) + 1] = version + b"\0"
    return bytes(head)


def test_bzimage_version():
    text = b"6.1.0-28-cloud-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian 6.1.119-1 (2024-11-22)"
    found = parse_bzimage_version(bzimage(text))
    assert found == {"release": "6.1.0-28-cloud-amd64", "version": text.decode()}


@pytest.mark.parametrize("head, message", [
    (b"\x7fELF" + b"\0" * 0x300, "not an x86 bzImage"),
    (bzimage(b"6.1.0", protocol=0x1FF), "has no kernel version string"),
    (bzimage(None, pointer=0), "has no kernel version string"),
    (bzimage(b"6.1.0")[:0x3205], "not terminated"),
    (bzimage(b"hello world"), "does not start with a kernel release"),
])
def test_bzimage_errors(head, message):
    with pytest.raises(ParseError, match=message):
        parse_bzimage_version(head)


def test_grub_first_kernel_and_release_order():
    cfg = "menuentry 'Debian' {\n\tlinux\t/boot/vmlinuz-6.12.1 root=UUID=x ro quiet\n}\n" \
          "menuentry 'old' {\n\tlinux /boot/vmlinuz-6.1.0-1 root=UUID=x ro\n}\n"
    assert parse_grub_first_kernel(cfg) == "/boot/vmlinuz-6.12.1"
    assert parse_grub_first_kernel("set default=0\n") is None
    releases = ["6.1.0-56-cloud-amd64", "6.12.117+deb12-cloud-amd64", "5.10.0-9-amd64", "6.1.0-9-cloud-amd64"]
    assert max(releases, key=release_sort_key) == "6.12.117+deb12-cloud-amd64"
    assert sorted(releases, key=release_sort_key)[:2] == ["5.10.0-9-amd64", "6.1.0-9-cloud-amd64"]


# ------------------------------------------------------------------- partition tables
MIB = 1024 * 1024


def reader(data):
    return lambda offset, length: bytes(data[offset:offset + length])


def mbr_entry(kind, lba, count):
    return struct.pack("<B3sB3sII", 0, b"\0\0\0", kind, b"\0\0\0", lba, count)


def mbr(entries, signature=0x5D8E3F2B, size=64 * MIB):
    disk = bytearray(size)
    struct.pack_into("<I", disk, 440, signature)
    for index, entry in enumerate(entries):
        disk[446 + 16 * index:462 + 16 * index] = mbr_entry(*entry)
    disk[510:512] = b"\x55\xaa"
    return disk


def test_bare_ext_filesystem():
    disk = bytearray(8 * MIB)
    disk[1080:1082] = b"\x53\xef"
    table = parse_partition_table(reader(disk), len(disk))
    assert table["table"] == "none"
    assert table["partitions"] == [{"number": None, "start": 0, "size": 8 * MIB, "type": None,
                                    "type_name": "ext-filesystem", "partuuid": None, "name": None}]


def test_mbr_with_logical_partitions():
    # 1: linux at 1 MiB (8 MiB), 2: extended at 16 MiB (32 MiB) holding logical 5 and 6, 3: swap.
    disk = mbr([(0x83, 2048, 16384), (0x05, 32768, 65536), (0x82, 100000, 2048)])
    first_ebr = 32768 * 512
    disk[first_ebr + 446:first_ebr + 462] = mbr_entry(0x83, 2048, 8192)        # relative to this EBR
    disk[first_ebr + 462:first_ebr + 478] = mbr_entry(0x05, 20480, 20480)      # next EBR, relative to the extended
    disk[first_ebr + 510:first_ebr + 512] = b"\x55\xaa"
    second_ebr = (32768 + 20480) * 512
    disk[second_ebr + 446:second_ebr + 462] = mbr_entry(0x83, 2048, 4096)
    disk[second_ebr + 510:second_ebr + 512] = b"\x55\xaa"
    table = parse_partition_table(reader(disk), len(disk))
    assert table["table"] == "mbr" and table["disk_id"] == "5d8e3f2b"
    got = [(x["number"], x["start"] // 512, x["size"] // 512, x["type_name"], x["partuuid"]) for x in table["partitions"]]
    assert got == [(1, 2048, 16384, "linux", "5d8e3f2b-01"),
                   (5, 32768 + 2048, 8192, "linux", "5d8e3f2b-05"),
                   (6, 32768 + 20480 + 2048, 4096, "linux", "5d8e3f2b-06"),
                   (3, 100000, 2048, "linux-swap", "5d8e3f2b-03")]


def test_mbr_extended_loop_stops():
    disk = mbr([(0x05, 2048, 65536)])
    ebr = 2048 * 512
    disk[ebr + 446:ebr + 462] = mbr_entry(0x83, 63, 1000)
    disk[ebr + 462:ebr + 478] = mbr_entry(0x05, 0, 1000)  # points back at itself: read once
    disk[ebr + 510:ebr + 512] = b"\x55\xaa"
    table = parse_partition_table(reader(disk), len(disk))
    assert [x["number"] for x in table["partitions"]] == [5]


def gpt(partitions, size=64 * MIB, corrupt=None):
    """A GPT disk: protective MBR, header at LBA 1 with CRC32s, 128 entries of 128 bytes at LBA 2."""
    disk = mbr([(0xEE, 1, size // 512 - 1)], signature=0, size=size)
    entries = bytearray(128 * 128)
    for index, (type_guid, part_guid, first, last, name) in enumerate(partitions):
        struct.pack_into("<16s16sQQQ72s", entries, 128 * index, uuid.UUID(type_guid).bytes_le,
                         uuid.UUID(part_guid).bytes_le, first, last, 0, name.encode("utf-16-le"))
    header = bytearray(92)
    struct.pack_into("<8sIII4xQQQQ16sQIII", header, 0, b"EFI PART", 0x10000, 92, 0, 1, size // 512 - 1, 34,
                     size // 512 - 34, uuid.UUID("11111111-2222-3333-4444-555555555555").bytes_le, 2, 128, 128,
                     binascii.crc32(entries) & 0xFFFFFFFF)
    struct.pack_into("<I", header, 16, binascii.crc32(bytes(header)) & 0xFFFFFFFF)
    disk[512:604] = header
    disk[1024:1024 + len(entries)] = entries
    if corrupt:
        disk[corrupt] ^= 0xFF
    return disk


LINUX = "0fc63daf-8483-4772-8e79-3d69d8477de4"
ESP = "c12a7328-f81f-11d2-ba4b-00a0c93ec93b"


def test_gpt():
    disk = gpt([(ESP, "aaaaaaaa-0000-0000-0000-000000000001", 2048, 4095, "EFI"),
                (LINUX, "bbbbbbbb-0000-0000-0000-000000000002", 4096, 65535, "root fs")])
    table = parse_partition_table(reader(disk), len(disk))
    assert table["table"] == "gpt" and table["disk_id"] == "11111111-2222-3333-4444-555555555555"
    assert [(x["number"], x["start"], x["size"], x["type_name"], x["partuuid"], x["name"]) for x in table["partitions"]] == [
        (1, 2048 * 512, 2048 * 512, "efi-system", "aaaaaaaa-0000-0000-0000-000000000001", "EFI"),
        (2, 4096 * 512, 61440 * 512, "linux", "bbbbbbbb-0000-0000-0000-000000000002", "root fs")]


@pytest.mark.parametrize("corrupt, message", [(520, "GPT header checksum"), (1024 + 130, "entries checksum")])
def test_gpt_checksums(corrupt, message):
    disk = gpt([(LINUX, "bbbbbbbb-0000-0000-0000-000000000002", 2048, 65535, "")], corrupt=corrupt)
    with pytest.raises(ParseError, match=message):
        parse_partition_table(reader(disk), len(disk))


def gpt_with_table_size(entry_size, count):
    """A GPT whose header (its CRC right) declares count entries of entry_size bytes."""
    disk = gpt([(LINUX, "bbbbbbbb-0000-0000-0000-000000000002", 2048, 65535, "")])
    header = bytearray(disk[512:604])
    struct.pack_into("<II", header, 80, count, entry_size)
    struct.pack_into("<I", header, 16, 0)
    struct.pack_into("<I", header, 16, binascii.crc32(bytes(header)) & 0xFFFFFFFF)
    disk[512:604] = header
    return disk


@pytest.mark.parametrize("entry_size, count", [(0xFFFFFFF0, 4096), (130, 128), (4096, 4096), (128, 0)])
def test_gpt_table_size_is_bounded_before_it_is_read(entry_size, count):
    disk = gpt_with_table_size(entry_size, count)
    asked = []

    def read(offset, length):
        asked.append(length)
        return bytes(disk[offset:offset + length])
    with pytest.raises(ParseError, match="GPT has %d entries of %d bytes: not a table this check reads"
                       % (count, entry_size)):
        parse_partition_table(read, len(disk))
    assert max(asked) <= 4096  # the MBR and the header, never the declared table


@pytest.mark.parametrize("make, message", [
    (lambda: bytearray(0), "too small"),
    (lambda: bytearray(random.Random(7).getrandbits(8) for _ in range(8192)), "no partition table"),
    (lambda: bytearray(1 * MIB), "no partition table"),
    (lambda: mbr([(0x83, 2048, 200000)], size=8 * MIB), "runs past the end"),
    (lambda: mbr([(0xEE, 1, 100)], size=8 * MIB), "no GPT header"),
])
def test_unreadable_tables(make, message):
    disk = make()
    with pytest.raises(ParseError, match=message):
        parse_partition_table(reader(disk), len(disk))


@pytest.mark.parametrize("make, message", [
    (lambda: mbr([(0x83, 2048, 16384)] * 4), "partitions 1 (bytes 1048576-9437184) and 2 (bytes 1048576-9437184) overlap"),
    (lambda: mbr([(0x83, 2048, 16384), (0x83, 10000, 16384)]), "partitions 1 (bytes 1048576-9437184) and 2 "
                                                               "(bytes 5120000-13508608) overlap"),
    (lambda: gpt([(LINUX, "bbbbbbbb-0000-0000-0000-000000000002", 2048, 65535, "root"),
                  (LINUX, "bbbbbbbb-0000-0000-0000-000000000003", 40000, 80000, "data")], size=64 * MIB),
     "partitions 1 (bytes 1048576-33554432) and 2 (bytes 20480000-40960512) overlap"),
])
def test_overlapping_partitions_are_refused(make, message):
    """Partitions that share blocks (a repeated entry, one starting inside another) are a corrupt or
    forged table: each filesystem would write over the other's blocks."""
    disk = make()
    with pytest.raises(ParseError, match=re.escape(message)):
        parse_partition_table(reader(disk), len(disk))


def test_adjacent_partitions_are_not_overlapping():
    disk = mbr([(0x83, 2048, 16384), (0x83, 2048 + 16384, 16384)])
    assert [x["number"] for x in parse_partition_table(reader(disk), len(disk))["partitions"]] == [1, 2]


def test_fstab_long_line():
    assert fstab_long_line("# " + "x" * 9000 + "\n/dev/vda / ext4 defaults 0 1\n", 4096) is None  # a comment
    assert fstab_long_line("/dev/vda / ext4 defaults,x-%s 0 1\n" % ("a" * 5000), 4096) == (1, 5031)
    assert fstab_long_line("\n/dev/vda / ext4 x-%s 0 1" % ("\u00e9" * 2100), 4096) == (2, 4222)  # bytes, not characters
    assert fstab_long_line("/dev/vda / ext4 x-%s 0 1" % ("a" * 4074), 4096) is None  # 4096 bytes exactly


# ---------------------------------------------------------------- the module's code
def test_image_module_runs_on_python_3_8_and_imports_only_stdlib():
    result = subprocess.run([os.path.join(VENV_BIN, "vermin"), "-t=3.8-", "--no-tips", "--violations", MODULE]
                            + glob.glob(os.path.join(ROOT, "plugins", "module_utils", "ext4_*", "*.py")),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == 0, result.stdout.decode()
    names = re.findall(r"^(?:from|import) ([a-z_0-9]+)", open(MODULE).read(), re.M)
    assert names and all(name in sys.stdlib_module_names or name in ("ansible", "ansible_collections") for name in names), names
