# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""A file's extents (the FIEMAP ioctl) and the layout measures taken from them.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import fcntl
import struct


# linux/fs.h, linux/fiemap.h
FS_IOC_FIEMAP = 0xC020660B
FIEMAP_FLAG_SYNC = 1
FIEMAP_EXTENT_LAST = 1
FIEMAP_HEADER = struct.Struct("=QQIIII")
FIEMAP_EXTENT = struct.Struct("=QQQQQI12x")


def fiemap(fd, max_extents=512):
    """The file's extents as (logical, physical, length) in bytes, via FS_IOC_FIEMAP."""
    extents, start = [], 0
    while True:
        request = bytearray(FIEMAP_HEADER.size + FIEMAP_EXTENT.size * max_extents)
        FIEMAP_HEADER.pack_into(request, 0, start, (1 << 64) - 1 - start, FIEMAP_FLAG_SYNC, 0, max_extents, 0)
        fcntl.ioctl(fd, FS_IOC_FIEMAP, request)
        mapped = FIEMAP_HEADER.unpack_from(request, 0)[3]
        last = False
        for i in range(mapped):
            logical, physical, length, _unused, _unused, flags = FIEMAP_EXTENT.unpack_from(
                request, FIEMAP_HEADER.size + i * FIEMAP_EXTENT.size)
            extents.append((logical, physical, length))
            last = bool(flags & FIEMAP_EXTENT_LAST)
        if last or mapped == 0:
            return extents
        start = extents[-1][0] + extents[-1][2]


def extent_metrics(extents, block_size):
    """d-span (bytes from the first to the last physical byte), extent count, and the
    Smith-Seltzer layout score: the share of blocks placed right after the file's previous block."""
    if not extents:
        return {"dspan": 0, "extents": 0, "layout_score": 1.0}
    extents = sorted(extents)
    blocks = sum(length // block_size for _unused, _unused, length in extents)
    good = sum(length // block_size - 1 for _unused, _unused, length in extents)
    good += sum(1 for prev, cur in zip(extents, extents[1:]) if prev[1] + prev[2] == cur[1])
    return {"dspan": max(p + n for _unused, p, n in extents) - min(p for _unused, p, _unused in extents),
            "extents": len(extents), "layout_score": round(good / (blocks - 1), 4) if blocks > 1 else 1.0}
