#!/usr/bin/env python3
"""Benchmark: junit.xml's size, test cases and writing time at fleet size, for each checkout given.

    .venv/bin/python bench/junit_step.py [--sizes 1000 10000] [--code DIR ...] [--repeat 2]

For each size, bench/aggregate.py's fleet is reported once by the real command (host reports
only: `--formats tap --store off`). Then, for each checkout in turn (main and this branch, say),
a child process with that checkout's ext4audit reads the run's host reports and runs its junit
Writer as the report step does (Writer.host on every host in one shard, shard_end, finish on the
parts), timing the writer alone (reading the host reports is not counted). Prints the file's
bytes, its test cases (ElementTree) and the CPU seconds of host() and of finish().
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import shutil

from merge import aggregate, ROOT  # bench/merge.py: bench/aggregate.py loaded once

CHILD = r"""
import glob, json, os, sys, time, types
import xml.etree.ElementTree as ET
sys.path.insert(0, os.getcwd())
from ext4audit.formats import writers
from ext4audit.report import reports
from ext4audit.rules import catalog
from ext4audit.junit import Writer
run, staging, out_path = sys.argv[1:4]
summary = reports.read_json(os.path.join(run, "summary.json"), "summary")
hosts = [reports.read_json(path, "host") for path in sorted(glob.glob(os.path.join(run, "hosts", "*.json")))]
job = types.SimpleNamespace(fail_on="high", catalog=catalog.load(), staging=staging)
writer = Writer(job)
start = time.process_time()
text = [writer.host(report, None) for report in hosts]
end = writer.shard_end()
host_s = time.process_time() - start
parts = writers.Parts(staging, "junit", writer.separator)
with open(parts.path(0), "w", encoding="utf-8") as part:
    part.write(writer.separator.join(t for t in text + [end] if t))
start = time.process_time()
with open(out_path, "w", encoding="utf-8") as out:
    writer.finish(out, summary, None, parts)
finish_s = time.process_time() - start
cases = sum(1 for _, element in ET.iterparse(out_path) if element.tag == "testcase")
print(json.dumps({"bytes": os.path.getsize(out_path), "cases": cases, "host_s": host_s, "finish_s": finish_s}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--code", nargs="+", default=[ROOT], help="checkouts whose junit writer is measured, in turn")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workdir", default="/var/tmp")
    args = parser.parse_args()
    print("| hosts | code | rep | junit.xml bytes | test cases | host() CPU s | finish() CPU s |")
    print("|---|---|---|---|---|---|---|")
    for count in args.sizes:
        base = tempfile.mkdtemp(prefix="junit-%d-" % count, dir=args.workdir)
        try:
            run, waivers = os.path.join(base, "run"), os.path.join(base, "waivers.yml")
            specs = aggregate.fleet(count, 20261122, baseline=False)
            aggregate.write_run(run, specs)
            aggregate.write_waivers(waivers, specs)
            done = subprocess.run([sys.executable, "-m", "ext4audit", "report", run, "--fail-on", "high", "--waivers",
                                   waivers, "--formats", "tap", "--store", "off"], cwd=ROOT, stdout=subprocess.DEVNULL)
            if done.returncode not in (0, 1, 2):
                raise SystemExit("the report step failed (rc=%d)" % done.returncode)
            for rep in range(args.repeat):
                for code in args.code:
                    staging = tempfile.mkdtemp(dir=base)
                    out = subprocess.run([sys.executable, "-c", CHILD, run, staging, os.path.join(base, "junit.xml")],
                                         cwd=code, stdout=subprocess.PIPE, check=True).stdout
                    row = json.loads(out.decode().strip().splitlines()[-1])
                    print("| {:,} | {} | {} | {:,} | {:,} | {:.2f} | {:.2f} |".format(
                        count, code, rep + 1, row["bytes"], row["cases"], row["host_s"], row["finish_s"]), flush=True)
                    shutil.rmtree(staging)
        finally:
            shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
