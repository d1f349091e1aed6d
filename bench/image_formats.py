#!/usr/bin/env python3
"""The offline image check of a 20 GiB machine image in each format it reads (issue 33).

The image: the test VM's Debian 12 root filesystem (testhosts/vm, built by `make vm-image`; its
disk.raw is a bare ext4 filesystem), grown to 20 GiB with resize2fs and given GIB_FILLER GiB of
incompressible data with debugfs (nothing mounted), so that a few GiB are used of a sparse disk.
Each format is made from it with `qemu-img convert` (not timed), then checked by this checkout's
ext4_image_facts (tests/image_module.py); qcow2 is also checked by the module of another checkout
(--baseline, e.g. main: today's qcow2 path). Printed per format: the check's wall seconds, its
steps' seconds, the most bytes its work folder held on disk (the raw copy, sampled every 0.1 s)
and the image file's own size on disk.

Usage: sudo bench/image_formats.py --disk PATH/disk.raw [--baseline /work/main] [--work /var/tmp]
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
GIB = 1024 ** 3
SIZE = "20G"
GIB_FILLER = 2
# (label, qemu-img -O, -o): every format the check reads
FORMATS = (
    ("raw", "raw", ""),
    ("qcow2", "qcow2", ""),
    ("vhd fixed", "vpc", "subformat=fixed"),
    ("vhd dynamic", "vpc", "subformat=dynamic"),
    ("vmdk monolithicSparse", "vmdk", "subformat=monolithicSparse"),
    ("vmdk streamOptimized", "vmdk", "subformat=streamOptimized"),
    ("vhdx", "vhdx", ""),
)


def run(argv: list) -> str:
    return subprocess.run(argv, check=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT).stdout.decode()


def allocated(path: str) -> int:
    """Bytes on disk under path (sparse files count what they hold)."""
    total = 0
    for folder, _, files in os.walk(path):
        for name in files:
            try:
                total += os.lstat(os.path.join(folder, name)).st_blocks * 512
            except OSError:
                pass  # removed meanwhile
    return total


def make_base(disk: str, work: str, size: str, filler_gib: int) -> str:
    base = os.path.join(work, "base.raw")
    run(["cp", "--sparse=always", disk, base])
    run(["truncate", "-s", size, base])
    # resize2fs wants a freshly checked filesystem
    subprocess.run(["e2fsck", "-fp", base], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    run(["resize2fs", base])
    filler = os.path.join(work, "filler")
    with open("/dev/urandom", "rb") as source, open(filler, "wb") as target:
        for _ in range(filler_gib * 1024):
            target.write(source.read(1024 * 1024))
    run(["debugfs", "-w", "-R", "write %s /var/filler" % filler, base])
    os.unlink(filler)
    return base


def check(module_root: str, image: str, scratch: str) -> dict:
    """One run of a checkout's module on image; the most bytes scratch held meanwhile."""
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], allocated(scratch))
            time.sleep(0.1)

    sampler = threading.Thread(target=sample)
    sampler.start()
    start = time.monotonic()
    out = subprocess.run([sys.executable, os.path.join(module_root, "tests", "image_module.py"),
                          json.dumps({"image": image, "tmp_dir": scratch})], check=True, stdout=subprocess.PIPE,
                         cwd=module_root).stdout
    seconds = time.monotonic() - start
    done.set()
    sampler.join()
    facts = json.loads(out.decode())["ext4_image_facts"]
    return {"seconds": seconds, "peak": peak[0], "facts": facts}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--disk", required=True, help="testhosts/vm's disk.raw (a Debian 12 root filesystem)")
    parser.add_argument("--baseline", help="another checkout whose module checks the qcow2 image too (today's path)")
    parser.add_argument("--work", default="/var/tmp", help="where the images and raw copies go")
    parser.add_argument("--size", default=SIZE, help="the virtual disk's size (truncate -s)")
    parser.add_argument("--filler-gib", type=int, default=GIB_FILLER, help="GiB of random data added to the filesystem")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="bench-image-formats-", dir=args.work)
    try:
        base = make_base(args.disk, work, args.size, args.filler_gib)
        print("| format | check | check s | steps (s) | work folder peak MiB | image on disk MiB | filesystems | errors |")
        print("|---|---|---|---|---|---|---|---|")
        for label, driver, options in FORMATS:
            image = base if driver == "raw" else os.path.join(work, "image.img")
            if driver != "raw":
                run(["qemu-img", "convert", "-f", "raw", "-O", driver] + (["-o", options] if options else [])
                    + [base, image])
            runs = [("this checkout", ROOT)]
            if driver == "qcow2" and args.baseline:
                runs.append(("baseline", os.path.abspath(args.baseline)))
            for name, module_root in runs:
                scratch = os.path.join(work, "scratch")
                os.mkdir(scratch)
                result = check(module_root, image, scratch)
                shutil.rmtree(scratch)
                facts = result["facts"]
                steps = ", ".join("%s %.1f" % (step["step"].split(" ")[0], step["seconds"])
                                  for step in facts["image"]["steps"])
                print("| %s | %s | %.1f | %s | %d | %d | %d | %s |" % (
                    label, name, result["seconds"], steps, result["peak"] // 2 ** 20,
                    os.lstat(image).st_blocks * 512 // 2 ** 20, len(facts["filesystems"]),
                    "; ".join(e["reason"][:80] for e in facts["errors"]) or "none"))
                sys.stdout.flush()
            if image != base:
                os.unlink(image)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
