#!/usr/bin/env python3
"""Benchmark: the default short sweep (256 runs) from plan to analysis, cold and warm image cache.

    sudo .venv/bin/python bench/probe_sweep.py [--runs 256] [--repeat 3]

Cold: an empty scratch directory (every pristine image is built). Warm: the images kept from the
previous run (chopper_probe_keep_cache). Prints one Markdown row per measurement; the numbers
recorded in bench/README.md come from this script. Targets (issue 3): warm <= 10 s wall and
>= 50 runs/s, probe peak RSS <= 64 MiB, scratch <= 128 MiB.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from ext4audit.probe import analysis as probe_mod  # noqa: E402
from ext4audit.parsers import probe_payload  # noqa: E402

PAYLOAD_DIR = tempfile.mkdtemp(prefix="ext4-probe-payload-")
PROBE = probe_payload.write(PAYLOAD_DIR)  # the probe as ext4_probe_run runs it
# A typical data filesystem: mke2fs defaults for a 100 GiB disk, default mount options.
FILESYSTEM = {"mountpoint": "/bench", "options": ["rw", "data=ordered", "delalloc", "auto_da_alloc", "barrier",
                                                  "dioread_nolock", "commit=5", "errors=remount-ro"],
              "superblock": {"block_size": 4096, "inode_size": 256, "journal_bytes": 128 << 20,
                             "features": ["has_journal", "ext_attr", "resize_inode", "dir_index", "filetype",
                                          "extent", "64bit", "flex_bg", "sparse_super", "large_file",
                                          "huge_file", "dir_nlink", "extra_isize", "metadata_csum"]}}


def one(runs, scratch, keep_cache, workdir, discard):
    start = time.perf_counter()
    plan = probe_mod.make_plan(20150216, runs)
    filesystem = dict(FILESYSTEM, options=FILESYSTEM["options"] + (["discard"] if discard else []))
    job = {"schema": "ext4-fleet-audit/probe-job/v1", "plan": plan, "filesystem": filesystem, "netfs": [],
           "scratch_dir": scratch, "keep_cache": keep_cache, "confirmations": [], "sweep_budget_s": 600}
    job_path, out_path = os.path.join(workdir, "job.json"), os.path.join(workdir, "out.json")
    with open(job_path, "w") as handle:
        json.dump(job, handle)
    subprocess.run([sys.executable, "-I", "-S", "-B", PROBE, "run", job_path, out_path], check=True, stderr=subprocess.DEVNULL)
    with open(out_path) as handle:
        result = json.load(handle)
    analysis = probe_mod.analyze(plan, result)
    wall = time.perf_counter() - start
    sweep = result["sweep"]
    assert analysis["runs_completed"] == runs, sweep["errors"]
    return {"runs": runs, "wall_s": round(wall, 2), "runs_per_s": round(runs / wall, 1),
            "images_built": sweep["images_built"], "images_s": sweep["images_seconds"],
            "runs_s": sweep["runs_seconds"], "peak_rss_mib": round(result["resources"]["peak_rss_bytes"] / 2 ** 20, 1),
            "scratch_peak_mib": round(result["resources"]["scratch_peak_bytes"] / 2 ** 20, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--runs", type=int, default=256)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--discard", action="store_true",
                        help="replicate a filesystem mounted with discard (hole punching becomes discards)")
    args = parser.parse_args()
    scratch = "/dev/shm/ext4-audit-probe-bench"
    workdir = tempfile.mkdtemp()
    print("| cache | runs | wall s | runs/s | images built | images s | runs s | probe peak RSS MiB | scratch peak MiB |")
    print("|---|---|---|---|---|---|---|---|---|")
    try:
        for i in range(args.repeat):
            for cache, keep in (("cold", True), ("warm", False)):
                if cache == "cold" and os.path.exists(scratch):
                    subprocess.run([sys.executable, PROBE, "sweep-stale", scratch], check=True)
                    shutil.rmtree(scratch, ignore_errors=True)  # sweep-stale removes it when nothing else is in it
                r = one(args.runs, scratch, keep, workdir, args.discard)
                print("| %s | %d | %.2f | %.1f | %d | %.2f | %.2f | %.1f | %.1f |" % (
                    cache, r["runs"], r["wall_s"], r["runs_per_s"], r["images_built"], r["images_s"],
                    r["runs_s"], r["peak_rss_mib"], r["scratch_peak_mib"]), flush=True)
    finally:
        shutil.rmtree(workdir)
        shutil.rmtree(PAYLOAD_DIR)
        if os.path.exists(scratch):
            subprocess.run([sys.executable, PROBE, "sweep-stale", scratch], check=False)
            shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
