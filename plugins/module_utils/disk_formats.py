# -*- coding: utf-8 -*-
# Copyright: ext4audit contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""The format of a disk image file, told by its headers (never its name), and the checks that its
headers are whole and consistent with the file before any tool is let at it: raw, qcow2, VHD
(fixed and dynamic), VMDK (monolithic sparse and stream-optimized) and VHDX.

A header that is cut short or that points outside the file is refused with a FormatError naming
the file and the field; a format that would make qemu-img read another file (a VHD differencing
disk, a VMDK descriptor with a parent or separate extents) is refused too. The layouts are the
published ones: Microsoft's "Virtual Hard Disk Image Format Specification" (VHD footer and dynamic
header), [MS-VHDX] (headers, region tables, CRC-32C), VMware's "Virtual Disk Format 5.0" (sparse
extent header, descriptor) and qemu's docs/interop/qcow2.txt. Python >= 3.8 standard library only.
"""

from __future__ import absolute_import, division, print_function

import struct
from typing import Callable, List, Optional, Tuple

__metaclass__ = type

SECTOR = 512
KIB = 1024
MIB = 1024 * KIB
# The names of the formats as image.format reports them, and the qemu-img driver reading each.
QEMU_DRIVERS = {"raw": "raw", "qcow2": "qcow2", "vhd": "vpc", "vmdk": "vmdk", "vhdx": "vhdx"}
FORMATS = tuple(QEMU_DRIVERS)

QCOW2_MAGIC = b"QFI\xfb"
VHD_COOKIE = b"conectix"
VHD_SPARSE_COOKIE = b"cxsparse"
VHD_FIXED, VHD_DYNAMIC, VHD_DIFFERENCING = 2, 3, 4
VMDK_MAGIC = b"KDMV"
VMDK_TEXT = b"# Disk DescriptorFile"
VMDK_GD_AT_END = 0xFFFFFFFFFFFFFFFF
VMDK_CREATE_TYPES = ("monolithicSparse", "streamOptimized")
VMDK_DESCRIPTOR_CAP = 64 * KIB  # qemu reads at most 1 MiB; real embedded descriptors are < 1 KiB
VHDX_SIGNATURE = b"vhdxfile"
VHDX_HEADERS = (64 * KIB, 128 * KIB)
VHDX_HEADER_SIZE = 4 * KIB
VHDX_REGIONS = (192 * KIB, 256 * KIB)
VHDX_REGION_SIZE = 64 * KIB
VHDX_REGION_ENTRIES_MAX = 2047


class FormatError(Exception):
    """The image's headers are cut short, inconsistent or point outside the file."""


def _crc32c_table() -> List[int]:
    table = []
    for byte in range(256):
        crc = byte
        for _unused in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1
        table.append(crc)
    return table


_CRC32C = _crc32c_table()


def crc32c(data: bytes) -> int:
    """CRC-32C (Castagnoli), the checksum of VHDX headers and region tables."""
    crc = 0xFFFFFFFF
    table = _CRC32C
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def identify(read: Callable[[int, int], bytes], size: int, path: str) -> dict:
    """{"format", "subformat", "data_size"} of the image at `path` (`size` bytes long, `read(offset,
    length)` returning its bytes). data_size is set when the virtual disk lies in the file as is,
    from offset 0 (raw, fixed VHD), so it can be read in place. Raises FormatError."""
    head = read(0, SECTOR)
    tail_start = max(size - 2 * SECTOR, 0)
    tail = read(tail_start, size - tail_start)
    if head[:4] == QCOW2_MAGIC:
        qcow2_check(head, size, path)
        return {"format": "qcow2", "subformat": None, "data_size": None}
    if head[:4] == VMDK_MAGIC or head.startswith(VMDK_TEXT):
        return {"format": "vmdk", "subformat": vmdk_check(read, head, size, path), "data_size": None}
    if head[:8] == VHDX_SIGNATURE:
        vhdx_check(read, size, path)
        return {"format": "vhdx", "subformat": None, "data_size": None}
    if head[:8] == VHD_COOKIE or VHD_COOKIE in tail:
        subformat, data_size = vhd_check(read, head, tail, tail_start, size, path)
        return {"format": "vhd", "subformat": subformat, "data_size": data_size}
    return {"format": "raw", "subformat": None, "data_size": size}


def _need(size: int, end: int, path: str, what: str) -> None:
    if end > size:
        raise FormatError("%s: %s ends at byte %d, past the end of the file (%d bytes): truncated or lying header"
                          % (path, what, end, size))


def qcow2_check(head: bytes, size: int, path: str) -> None:
    """The qcow2 header's version, cluster size and tables lie inside the file."""
    _need(size, 72, path, "the qcow2 header")
    (version, _unused, _unused, cluster_bits, virtual, _unused, l1_size, l1_offset, refcount_offset,
     refcount_clusters) = struct.unpack(">IQIIQIIQQI", head[4:60])
    if version not in (2, 3):
        raise FormatError("%s: qcow2 version %d: only 2 and 3 exist" % (path, version))
    if not 9 <= cluster_bits <= 21:
        raise FormatError("%s: qcow2 cluster_bits %d outside 9..21" % (path, cluster_bits))
    if virtual == 0:
        raise FormatError("%s: qcow2 virtual size is 0" % path)
    _need(size, l1_offset + l1_size * 8, path, "the qcow2 L1 table (l1_table_offset %d, l1_size %d)"
          % (l1_offset, l1_size))
    _need(size, refcount_offset + (refcount_clusters << cluster_bits), path,
          "the qcow2 refcount table (refcount_table_offset %d)" % refcount_offset)


def vhd_footer(data: bytes, path: str, where: str) -> dict:
    """The fields of a 512-byte VHD footer whose checksum holds."""
    if len(data) < SECTOR or data[:8] != VHD_COOKIE:
        raise FormatError("%s: no VHD footer (cookie 'conectix') %s: truncated" % (path, where))
    (data_offset, original, current, disk_type, checksum) = struct.unpack(">16xQ16xQQ4xII", data[:68])
    wanted = (~(sum(data[:64]) + sum(data[68:SECTOR]))) & 0xFFFFFFFF
    if checksum != wanted:
        raise FormatError("%s: VHD footer %s: checksum 0x%08x, the footer's bytes give 0x%08x"
                          % (path, where, checksum, wanted))
    return {"data_offset": data_offset, "original_size": original, "current_size": current, "disk_type": disk_type}


def vhd_check(read: Callable[[int, int], bytes], head: bytes, tail: bytes, tail_start: int, size: int,
              path: str) -> Tuple[str, Optional[int]]:
    """(subformat, data_size) of a VHD: its footer at the end (the spec's only required copy), and for a
    dynamic disk the sparse header and the block allocation table inside the file."""
    at = tail.rfind(VHD_COOKIE)
    if at < 0 or tail_start + at != size - SECTOR:
        raise FormatError("%s: VHD footer not at the file's last 512 bytes (%s): truncated or misplaced"
                          % (path, "found at byte %d" % (tail_start + at) if at >= 0 else "absent"))
    footer = vhd_footer(tail[at:], path, "at the end")
    if footer["disk_type"] == VHD_DIFFERENCING:
        raise FormatError("%s: VHD differencing disk: refused, it reads its parent, another file" % path)
    if footer["disk_type"] == VHD_FIXED:
        if footer["current_size"] != size - SECTOR:
            raise FormatError("%s: fixed VHD footer says the disk is %d bytes, the file holds %d before its footer"
                              % (path, footer["current_size"], size - SECTOR))
        return "fixed", footer["current_size"]
    if footer["disk_type"] != VHD_DYNAMIC:
        raise FormatError("%s: VHD disk type %d: not fixed (2), dynamic (3) or differencing (4)"
                          % (path, footer["disk_type"]))
    if head[:8] == VHD_COOKIE and head != tail[at:at + SECTOR]:
        raise FormatError("%s: dynamic VHD: the footer's copy at the start differs from the footer at the end" % path)
    offset = footer["data_offset"]
    _need(size - SECTOR, offset + 1024, path, "the dynamic VHD header (data offset %d)" % offset)
    sparse = read(offset, 1024)
    if sparse[:8] != VHD_SPARSE_COOKIE:
        raise FormatError("%s: no dynamic VHD header (cookie 'cxsparse') at byte %d" % (path, offset))
    table, entries, block, checksum = struct.unpack(">16xQ4xIII", sparse[:40])
    wanted = (~(sum(sparse[:36]) + sum(sparse[40:]))) & 0xFFFFFFFF
    if checksum != wanted:
        raise FormatError("%s: dynamic VHD header: checksum 0x%08x, its bytes give 0x%08x" % (path, checksum, wanted))
    if block < SECTOR or block & (block - 1):
        raise FormatError("%s: dynamic VHD block size %d is not a power of two of at least 512" % (path, block))
    if entries * block < footer["current_size"]:
        raise FormatError("%s: dynamic VHD: %d blocks of %d bytes cannot hold the footer's %d-byte disk"
                          % (path, entries, block, footer["current_size"]))
    _need(size - SECTOR, table + entries * 4, path, "the dynamic VHD block allocation table (offset %d, %d entries)"
          % (table, entries))
    return "dynamic", None


def vmdk_check(read: Callable[[int, int], bytes], head: bytes, size: int, path: str) -> str:
    """The create type of a VMDK whose data is all in this file: the sparse extent header's tables
    and embedded descriptor lie inside the file, and the descriptor names no parent."""
    if head.startswith(VMDK_TEXT):
        raise FormatError("%s: a VMDK descriptor file: refused, its extents are other files" % path)
    _need(size, SECTOR, path, "the VMDK sparse extent header")
    (version, flags, capacity, grain, desc_offset, desc_size, _unused, rgd, gd, overhead) = struct.unpack(
        "<IIQQQQIQQQ", head[4:72])
    if version not in (1, 2, 3):
        raise FormatError("%s: VMDK sparse header version %d: only 1 to 3 exist" % (path, version))
    if capacity == 0 or grain < 8 or grain & (grain - 1):
        raise FormatError("%s: VMDK capacity %d sectors, grain %d sectors: not a disk (grain a power of two >= 8)"
                          % (path, capacity, grain))
    if not desc_offset or not desc_size:
        raise FormatError("%s: VMDK without an embedded descriptor: not monolithic" % path)
    if desc_size * SECTOR > VMDK_DESCRIPTOR_CAP:
        raise FormatError("%s: VMDK descriptor of %d sectors: over the %d bytes read"
                          % (path, desc_size, VMDK_DESCRIPTOR_CAP))
    _need(size, (desc_offset + desc_size) * SECTOR, path, "the VMDK descriptor (sector %d, %d sectors)"
          % (desc_offset, desc_size))
    if gd != VMDK_GD_AT_END:
        _need(size, gd * SECTOR + SECTOR, path, "the VMDK grain directory (sector %d)" % gd)
    if overhead * SECTOR > size and not flags & (1 << 16):  # stream-optimized files may end before the overhead
        raise FormatError("%s: VMDK overhead of %d sectors is past the end of the file" % (path, overhead))
    text = read(desc_offset * SECTOR, desc_size * SECTOR).split(b"\0", 1)[0].decode("utf-8", "replace")
    fields, extents = {}, []
    for line in text.splitlines():
        line = line.strip()
        if line.startswith(("RW ", "RDONLY ", "NOACCESS ")):
            extents.append(line)
        elif "=" in line and not line.startswith("#"):
            key, value = line.split("=", 1)
            fields[key.strip()] = value.strip().strip('"')
    create = fields.get("createType")
    if create not in VMDK_CREATE_TYPES:
        raise FormatError("%s: VMDK createType %r: only %s keep the whole disk in one file"
                          % (path, create, " and ".join(VMDK_CREATE_TYPES)))
    if fields.get("parentCID", "ffffffff").lower() != "ffffffff" or "parentFileNameHint" in fields:
        raise FormatError("%s: VMDK with a parent (parentCID %s): refused, it reads another file"
                          % (path, fields.get("parentCID")))
    if len(extents) != 1:
        raise FormatError("%s: VMDK descriptor lists %d extents: a monolithic disk has one" % (path, len(extents)))
    parts = extents[0].split()
    if len(parts) < 4 or not parts[1].isdigit() or int(parts[1]) != capacity:
        raise FormatError("%s: VMDK extent %r disagrees with the header's capacity of %d sectors"
                          % (path, extents[0][:200], capacity))
    return create


def vhdx_check(read: Callable[[int, int], bytes], size: int, path: str) -> None:
    """Both VHDX headers and both region tables have their signature and CRC-32C, and every region
    lies inside the file. The spec lets a reader fall back on the other copy; an image about to be
    rolled out has both whole, so any damaged copy is refused rather than guessed around."""
    _need(size, VHDX_REGIONS[1] + VHDX_REGION_SIZE, path, "the VHDX headers and region tables")
    for number, offset in enumerate(VHDX_HEADERS, 1):
        _vhdx_block(read(offset, VHDX_HEADER_SIZE), b"head", path, "header %d (byte %d)" % (number, offset))
    for number, offset in enumerate(VHDX_REGIONS, 1):
        table = read(offset, VHDX_REGION_SIZE)
        _vhdx_block(table, b"regi", path, "region table %d (byte %d)" % (number, offset))
        (count,) = struct.unpack("<I", table[8:12])
        if count > VHDX_REGION_ENTRIES_MAX:
            raise FormatError("%s: VHDX region table %d has %d entries, at most %d exist"
                              % (path, number, count, VHDX_REGION_ENTRIES_MAX))
        for index in range(count):
            start, length = struct.unpack("<QI", table[16 + 32 * index + 16:16 + 32 * index + 28])
            _need(size, start + length, path, "VHDX region %d of region table %d (byte %d, %d bytes)"
                  % (index, number, start, length))


def _vhdx_block(data: bytes, signature: bytes, path: str, what: str) -> None:
    if data[:4] != signature:
        raise FormatError("%s: VHDX %s: signature %r, not %r" % (path, what, data[:4], signature))
    (stored,) = struct.unpack("<I", data[4:8])
    actual = crc32c(data[:4] + b"\0\0\0\0" + data[8:])
    if stored != actual:
        raise FormatError("%s: VHDX %s: checksum 0x%08x, its bytes give 0x%08x" % (path, what, stored, actual))
