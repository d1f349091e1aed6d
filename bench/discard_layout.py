#!/usr/bin/env python3
"""Measurement: does building the sweep's pristine images with `discard` change their layout?

    sudo .venv/bin/python bench/discard_layout.py [--seed 20150216] [--runs 256]

For every distinct (DiskSize, UsedRatio, FreeSpaceLayout) of the plan, builds the image of a
journal-less replica (this machine's root: no journal, mounted with discard) twice, as
ext4_probe/image_cache.py Images does, once mounted with `discard` and once without, and compares each block
group's free block ranges (dumpe2fs). Prints the build time of each way and the mismatches.
"""

import argparse
import os
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT]
from ext4audit.probe import analysis as plan_mod  # noqa: E402
from ext4audit.parsers.ext4_probe.layouts import fragment  # noqa: E402
from ext4audit.parsers.ext4_probe.loops import Mounted  # noqa: E402
from ext4audit.parsers.ext4_probe.replica import mkfs_argv, run_tool  # noqa: E402
from ext4audit.parsers.ext4_probe.scratch_dir import Scratch  # noqa: E402

MKFS = {"block_size": 4096, "inode_size": None, "journal_bytes": 0, "features": []}
OPTIONS = ["delalloc", "noinit_itable"]


def build(scratch, disk_size, used_ratio, layout, options):
    image = scratch.path("runs", "build.img")
    start = time.perf_counter()
    with open(image, "wb") as handle:
        handle.truncate(disk_size)
    run_tool(mkfs_argv(MKFS, disk_size, image), "mke2fs")
    if used_ratio or layout != 6:
        with Mounted(image, scratch.path("mnt", "build"), options) as mnt:
            if used_ratio:
                fd = os.open(os.path.join(mnt.target, "placeholder"), os.O_CREAT | os.O_WRONLY, 0o600)
                os.posix_fallocate(fd, 0, int(disk_size * used_ratio) // 4096 * 4096)
                os.close(fd)
            if layout != 6:
                fragment(mnt.target, layout, 4096)
    seconds = time.perf_counter() - start
    out = subprocess.run(["dumpe2fs", image], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                         universal_newlines=True, check=True).stdout
    os.unlink(image)
    return seconds, [line.strip() for line in out.splitlines() if line.strip().startswith("Free blocks:")]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seed", type=int, default=plan_mod.DEFAULT_SEED)
    parser.add_argument("--runs", type=int, default=plan_mod.DEFAULT_RUNS)
    args = parser.parse_args()
    plan = plan_mod.make_plan(args.seed, args.runs)
    combos = sorted(set((t["DiskSize"], t["UsedRatio"], t["FreeSpaceLayout"]) for t in plan["treatments"]))
    seconds, mismatches = {"discard": 0.0, "no discard": 0.0}, []
    with Scratch("/dev/shm/ext4-audit-probe-discard-bench", 512 << 20) as scratch:
        for combo in combos:
            with_discard = build(scratch, *combo, options=OPTIONS + ["discard"])
            without = build(scratch, *combo, options=OPTIONS)
            seconds["discard"] += with_discard[0]
            seconds["no discard"] += without[0]
            if with_discard[1] != without[1]:
                mismatches.append(combo)
    print("%d images: built with discard %.2f s, without %.2f s; free space differs in %d: %s" % (
        len(combos), seconds["discard"], seconds["no discard"], len(mismatches), mismatches))


if __name__ == "__main__":
    main()
