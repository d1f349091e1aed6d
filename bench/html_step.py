#!/usr/bin/env python3
"""Benchmark: what report.html costs in the report step, per host (issue 28).

    .venv/bin/python bench/html_step.py [--sizes 1000 10000] [--repeat 2] [--code TREE]

bench/aggregate.py's synthetic fleet (no baseline) is reported by the real command twice, in
turns: with `--formats tap` and with `--formats tap,html`. The html step's cost is the
difference of the wall (and CPU) times, per host; its bytes are report.html and its data folder.
--code runs the report command of another source tree (e.g. an export of main) on the same fleet.

--direct: the report step runs once (`--formats tap`, for hosts/ and summary.json); then each tree
of --code (several may be given) times its html writer alone in one process, by CPU time (less
moved by other work on the machine than wall time): host() for every host and shard_end() as a
worker does (one shard), then finish() as the parent does.
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
sys.path[:0] = [os.path.join(ROOT, "bench")]

import aggregate  # noqa: E402  (its fleet, its run folders)


def timed(code, run, waivers, inventory, formats):
    """(wall s, CPU s of the command and its workers) of one report step."""
    env = dict(os.environ, PYTHONPATH=code)
    argv = [sys.executable, "-m", "ext4audit", "report", run, "--fail-on", "high", "--waivers", waivers,
            "--inventory", inventory, "--formats", formats]
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=code, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    err = proc.stderr.read()
    if os.waitstatus_to_exitcode(status) not in (0, 1, 2) or b"error:" in err:
        raise SystemExit("report failed: %s" % err.decode(errors="replace")[-3000:])
    return wall, usage.ru_utime + usage.ru_stime


def html_bytes(run):
    """report.html's bytes and those of the files it loads (report-data/), if any."""
    total = os.path.getsize(os.path.join(run, "report.html"))
    data = os.path.join(run, "report-data")
    extra = sum(os.path.getsize(os.path.join(data, n)) for n in os.listdir(data)) if os.path.isdir(data) else 0
    return total, extra


DIRECT = r"""
import glob, json, os, sys, time, types
from ext4audit.formats import writers
from ext4audit.report import reports
from ext4audit.rules import catalog
from ext4audit.html import Writer
run, staging = sys.argv[1:3]
summary = reports.read_json(os.path.join(run, "summary.json"), "summary")
hosts = [reports.read_json(path, "host") for path in sorted(glob.glob(os.path.join(run, "hosts", "*.json")))]
job = types.SimpleNamespace(fail_on="high", fail_on_new=False, catalog=catalog.load(), staging=staging, run_dir=run,
                            hosts=len(hosts), plotted=[], probes=None, plan=None, base=None)
writer = Writer(job)
digests = []
parts = writers.Parts(staging, "html", writer.separator)
start = time.process_time()
with open(parts.path(0), "w", encoding="utf-8") as part:
    started = False
    for index, report in enumerate(hosts):
        digest = dict(reports.digest(report, "high"), index=index)
        piece = writer.host(report, digest)
        if piece:
            part.write(writer.separator + piece if started else piece)
            started = True
        digests.append(digest)
    piece = writer.shard_end()
    if piece:
        part.write(writer.separator + piece if started else piece)
host_s = time.process_time() - start
start = time.process_time()
with open(os.path.join(run, "report.html"), "w", encoding="utf-8") as out:
    writer.finish(out, summary, digests, parts)
finish_s = time.process_time() - start
print(json.dumps({"host_s": host_s, "finish_s": finish_s}))
"""


def fleet_folder(count, workdir, run_name):
    """(base folder, run folder with facts/ and probe/, waivers file, inventory) of the fleet."""
    base = tempfile.mkdtemp(prefix="html-%d-" % count, dir=workdir)
    inventory = os.path.join(base, "inventory")
    os.makedirs(inventory)
    specs = aggregate.fleet(count, 20261122, baseline=False)
    waivers = os.path.join(inventory, "waivers.yml")
    aggregate.write_waivers(waivers, specs)
    aggregate.write_run(os.path.join(base, run_name), specs)
    return base, os.path.join(base, run_name), waivers, inventory


def direct(count, codes, workdir):
    """{code: (report.html bytes, report-data/ bytes, host() CPU s, finish() CPU s)} of one fleet."""
    base, run, waivers, inventory = fleet_folder(count, workdir, "run")
    try:
        timed(ROOT, run, waivers, inventory, "tap")
        results = {}
        for code in codes:
            staging = tempfile.mkdtemp(prefix=".html-", dir=run)
            out = subprocess.run([sys.executable, "-c", DIRECT, run, staging], cwd=code, env=dict(os.environ, PYTHONPATH=code),
                                 stdout=subprocess.PIPE, check=True).stdout
            times = json.loads(out.decode().strip().splitlines()[-1])
            results[code] = html_bytes(run) + (times["host_s"], times["finish_s"])
            shutil.rmtree(staging, ignore_errors=True)
            shutil.rmtree(os.path.join(run, "report-data"), ignore_errors=True)
        return results
    finally:
        shutil.rmtree(base, ignore_errors=True)


def one_size(count, repeat, code, workdir):
    base, _, waivers, inventory = fleet_folder(count, workdir, "template")
    try:
        times = {"tap": [], "tap,html": []}
        for rep in range(repeat):
            for formats in times:
                run = os.path.join(base, "run-%d-%s" % (rep, formats.replace(",", "-")))
                os.makedirs(run)
                for sub in ("facts", "probe"):
                    shutil.copytree(os.path.join(base, "template", sub), os.path.join(run, sub))
                subprocess.run(["sync"], check=True)
                times[formats].append(timed(code, run, waivers, inventory, formats))
                if formats == "tap,html":
                    page, data = html_bytes(run)
                shutil.rmtree(run)
        wall = min(w for w, _ in times["tap,html"]) - min(w for w, _ in times["tap"])
        cpu = min(c for _, c in times["tap,html"]) - min(c for _, c in times["tap"])
        return {"hosts": count, "page": page, "data": data, "wall_ms_per_host": 1000 * wall / count,
                "cpu_ms_per_host": 1000 * cpu / count, "times": times}
    finally:
        shutil.rmtree(base, ignore_errors=True)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--code", nargs="+", default=[ROOT], help="the source tree(s) whose report command runs")
    parser.add_argument("--direct", action="store_true", help="time the html writer alone, by CPU time")
    parser.add_argument("--workdir", default="/var/tmp")
    args = parser.parse_args()
    if args.direct:
        print("| hosts | code | report.html bytes | report-data/ bytes | bytes per host | host() CPU ms/host "
              "| finish() CPU ms/host | html CPU ms/host |")
        print("|---|---|---|---|---|---|---|---|")
        for count in args.sizes:
            for code, (page, data, host_s, finish_s) in direct(count, [os.path.abspath(c) for c in args.code],
                                                               args.workdir).items():
                print("| {:,} | {} | {:,} | {:,} | {:,.0f} | {:.3f} | {:.3f} | {:.3f} |".format(
                    count, code, page, data, (page + data) / count, 1000 * host_s / count, 1000 * finish_s / count,
                    1000 * (host_s + finish_s) / count), flush=True)
        return
    print("| hosts | report.html bytes | report-data/ bytes | bytes per host | html step wall ms/host | CPU ms/host |")
    print("|---|---|---|---|---|---|")
    for count in args.sizes:
        r = one_size(count, args.repeat, os.path.abspath(args.code[0]), args.workdir)
        print("| {:,} | {:,} | {:,} | {:,.0f} | {:.3f} | {:.3f} |".format(
            count, r["page"], r["data"], (r["page"] + r["data"]) / count, r["wall_ms_per_host"], r["cpu_ms_per_host"]),
            flush=True)
        print("  (min wall/CPU of %s)" % r["times"], file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
