# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Disk images as ext4_image_facts reads them with e2fsprogs alone: partition tables (MBR, GPT), the
ext magic, an x86 bzImage's version, debugfs listings and the paths debugfs may be given.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import binascii
import re
import struct
import uuid

from .common import ParseError


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
