# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Free-space layouts: Chopper's lognormal hole sizes, punched into a filled scratch filesystem.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os
import random

from .base import punch_hole


# Chopper's lognormal parameters per FreeSpaceLayout: (meanlog, sdlog) of log2(hole blocks).
LAYOUTS = {1: (0.693, 1.0), 2: (1.910, 0.775), 3: (2.442, 0.55), 4: (2.788, 0.325), 5: (3.045, 0.1)}


def lognormal_cdf(x, meanlog, sdlog):
    return 0.0 if x <= 0 else 0.5 * math.erfc(-(math.log(x) - meanlog) / (sdlog * math.sqrt(2)))


def hole_sizes(free_blocks, layout):
    """Hole sizes (blocks) for a FreeSpaceLayout, Chopper's distribution: log2 of a hole's size
    is lognormal, and bucket a's probability is the share of punched *bytes* in 2^a-block holes.
    Each hole is followed by one allocated separator block. Buckets larger than the disk give
    their mass to the largest bucket that fits, and counts are rounded by largest remainder, so
    the byte mass is kept (Chopper truncated with int() and punched nothing for layout 5)."""
    meanlog, sdlog = LAYOUTS[layout]
    share = [lognormal_cdf(a + 1, meanlog, sdlog) - lognormal_cdf(a, meanlog, sdlog) for a in range(31)]
    largest = max(a for a in range(31) if (1 << a) + 1 <= max(free_blocks, 2))
    share[largest] += sum(share[largest + 1:])
    share = share[:largest + 1]
    total = sum(share)
    share = [s / total for s in share]
    punched = free_blocks / (1 + sum(s / (1 << a) for a, s in enumerate(share)))
    exact = [punched * s / (1 << a) for a, s in enumerate(share)]
    counts = [int(e) for e in exact]
    budget = free_blocks - sum(c * ((1 << a) + 1) for a, c in enumerate(counts))
    for a in sorted(range(len(exact)), key=lambda a: exact[a] - counts[a], reverse=True):
        if exact[a] - counts[a] > 0 and (1 << a) + 1 <= budget:
            counts[a] += 1
            budget -= (1 << a) + 1
    for a in reversed(range(len(share))):  # what is left: the largest holes of the layout that fit
        if share[a] > 0.001 and (1 << a) + 1 <= budget:
            counts[a] += budget // ((1 << a) + 1)
            budget %= (1 << a) + 1
    sizes = [1 << a for a, c in enumerate(counts) for _unused in range(c)]
    random.Random(1).shuffle(sizes)  # deterministic, as in Chopper
    return sizes


def fragment(mountpoint, layout, block_size):
    """Fill 99% of the free space with one file, then punch the layout's holes into it."""
    vfs = os.statvfs(mountpoint)
    free_blocks = int(vfs.f_bavail * vfs.f_frsize * 0.99) // block_size
    sizes = hole_sizes(free_blocks, layout)
    fd = os.open(os.path.join(mountpoint, "punchfile"), os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o600)
    try:
        length = sum(s + 1 for s in sizes) * block_size
        if length:
            os.posix_fallocate(fd, 0, length)
        offset = 0
        for size in sizes:
            offset += block_size  # the separator stays allocated
            punch_hole(fd, offset, size * block_size)
            offset += size * block_size
    finally:
        os.close(fd)
    holes = sorted(sizes)
    return {"holes": len(sizes), "hole_bytes": sum(sizes) * block_size,
            "median_hole_bytes": holes[len(holes) // 2] * block_size if holes else 0}
