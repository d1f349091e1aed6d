#!/usr/bin/env python3
"""Benchmark: `python -m ext4audit merge` of sliced runs (issue 28: 10 slices of a 10,000-host
fleet in at most 30 s).

    .venv/bin/python bench/merge.py [--hosts 10000] [--slices 10] [--repeat 2] [--code DIR ...]

The fleet is bench/aggregate.py's (real fixtures through the real parsers, 1% unreachable, its
waiver file), cut into --slices consecutive slices. Each slice is a run folder as a `--limit` run
or an AWX job slice leaves it: facts/, probe/ and the slice's own report step (the real command,
untimed). Then the real merge command, as docs/scaling.md runs it (every default format, the
results store beside the run folders, as by default):

    python -m ext4audit merge OUT SLICE... --fail-on high --waivers W --inventory INV

is timed as a child process (aggregate.timed_report: wall, CPU of the tree, peak RSS) with the
code of each --code tree (a checkout; default: this one), the trees taken in turn on each
repetition so that both see the same moments of a busy machine. The merged folder is removed
after each run. A second, profiled run per tree (--profile) splits the wall time into merge's
staging (checking and copying the slices' records) and the report step's steps.
"""

import argparse
import fcntl
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TARGET_S = 30.0  # issue 28: merge of 10 slices of a 10,000-host fleet


def _aggregate():
    spec = importlib.util.spec_from_file_location("bench_aggregate", os.path.join(ROOT, "bench", "aggregate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


aggregate = _aggregate()


def make_slices(base: str, hosts: int, slices: int) -> tuple:
    """(slice folders, waiver file, inventory folder): the fleet cut into `slices` run folders,
    each reported on its own (summary.json: merge refuses a slice whose report step did not finish)."""
    inventory = os.path.join(base, "inventory")
    os.makedirs(inventory)
    specs = aggregate.fleet(hosts, 20261122, baseline=False)
    waivers = os.path.join(inventory, "waivers.yml")
    aggregate.write_waivers(waivers, specs)
    folders = []
    size = -(-len(specs) // slices)
    for number in range(slices):
        folder = os.path.join(base, "slices", "slice-%02d" % number)
        aggregate.write_run(folder, specs[number * size:(number + 1) * size])
        done = subprocess.run([sys.executable, "-m", "ext4audit", "report", folder, "--fail-on", "high", "--waivers",
                               waivers, "--formats", "tap", "--store", "off"], cwd=ROOT, stdout=subprocess.DEVNULL)
        if done.returncode not in (0, 1, 2):  # pass, fail, incomplete (1% of the hosts are unreachable)
            raise SystemExit("the report step of %s failed (rc=%d)" % (folder, done.returncode))
        folders.append(folder)
    return folders, waivers, inventory


def merge_argv(out: str, folders: list, waivers: str, inventory: str) -> list:
    return ["-m", "ext4audit", "merge", out] + folders + ["--fail-on", "high", "--waivers", waivers,
                                                          "--inventory", inventory]


def profiled(code: str, argv: list) -> dict:
    """One merge in a child that times merge.stage and the report step's steps (aggregate's
    --profile-child, with merge.stage wrapped too)."""
    script = ("import runpy, sys, time, json\n"
              "sys.path.insert(0, %r)\n"
              "from ext4audit.steps import merge\n"
              "stage, spent = merge.stage, {}\n"
              "def timed(*args, **kwargs):\n"
              "    start = time.perf_counter()\n"
              "    try:\n"
              "        return stage(*args, **kwargs)\n"
              "    finally:\n"
              "        spent['merge.stage: check and copy the slices'] = time.perf_counter() - start\n"
              "merge.stage = timed\n"
              "sys.argv = [%r, '--profile-child', '--'] + %r\n"
              "import io, contextlib\n"
              "out = io.StringIO()\n"
              "with contextlib.redirect_stdout(out):\n"
              "    runpy.run_path(%r, run_name='__main__')\n"
              "doc = json.loads(out.getvalue().strip().splitlines()[-1])\n"
              "doc['stage_s'] = spent.get('merge.stage: check and copy the slices')\n"
              "print(json.dumps(doc))\n") % (code, aggregate.__file__, argv, aggregate.__file__)
    result = subprocess.run([sys.executable, "-c", script], cwd=code, stdout=subprocess.PIPE, check=True)
    return json.loads(result.stdout.decode().strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=10000)
    parser.add_argument("--slices", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--code", nargs="+", default=[ROOT], help="checkouts whose ext4audit is measured, in turn")
    parser.add_argument("--profile", action="store_true", help="also one profiled run per checkout")
    parser.add_argument("--workdir", default="/var/tmp")
    parser.add_argument("--lock", default="/tmp/ext4audit-heavy.lock", help="held while measuring")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="merge-%d-" % args.hosts, dir=args.workdir)
    rows = []
    try:
        started = time.perf_counter()
        folders, waivers, inventory = make_slices(base, args.hosts, args.slices)
        print("%d slices of %d hosts made and reported in %.0f s" % (args.slices, args.hosts, time.perf_counter() - started),
              file=sys.stderr, flush=True)
        with open(args.lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            for rep in range(args.repeat):
                for code in args.code:
                    out = os.path.join(base, "merged")
                    subprocess.run(["sync"], check=True)
                    load = os.getloadavg()[0]
                    row = aggregate.timed_report(merge_argv(out, folders, waivers, inventory), cwd=code)
                    row.update(code=code, rep=rep + 1, load1=load, junit_bytes=os.path.getsize(os.path.join(out, "junit.xml")))
                    rows.append(row)
                    print("  %s rep %d: %.2f s wall, %.2f s CPU, %.0f MiB peak tree (load %.2f) %s" % (
                        code, rep + 1, row["wall_s"], row["cpu_s"], row["tree_peak_mib"], load, row["verdict"][:80]),
                        file=sys.stderr, flush=True)
                    shutil.rmtree(out)
                    os.remove(os.path.join(base, "slices", "history.sqlite")) if os.path.exists(
                        os.path.join(base, "slices", "history.sqlite")) else None
            profiles = {}
            for code in args.code if args.profile else ():
                out = os.path.join(base, "merged")
                profiles[code] = profiled(code, merge_argv(out, folders, waivers, inventory))
                shutil.rmtree(out)
    finally:
        shutil.rmtree(base, ignore_errors=True)
    print("| code | rep | hosts | slices | wall s | CPU s | peak RSS of the tree MiB | load | junit.xml bytes |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows:
        print("| %s | %d | %d | %d | %.2f | %.2f | %.0f | %.2f | %s |" % (
            row["code"], row["rep"], args.hosts, args.slices, row["wall_s"], row["cpu_s"], row["tree_peak_mib"],
            row["load1"], "{:,}".format(row["junit_bytes"])))
    for code, profile in profiles.items():
        steps = sorted(profile["steps"].items(), key=lambda item: -item[1]["wall_s"])
        print("\nSteps of %s (one profiled run, %.2f s; merge.stage %.2f s of it): %s" % (
            code, profile["wall_s"], profile["stage_s"] or 0, "; ".join(
                "%s %.2f s" % (name, step["wall_s"]) for name, step in steps)))
    print("\ntarget: %.0f s wall (issue 28)" % TARGET_S)


if __name__ == "__main__":
    main()
