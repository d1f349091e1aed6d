#!/usr/bin/env python3
"""Benchmark: what report.html costs in the report step, per host (issue 28).

    .venv/bin/python bench/html_step.py [--sizes 1000 10000] [--repeat 2] [--code TREE]

bench/aggregate.py's synthetic fleet (no baseline) is reported by the real command twice, in
turns: with `--formats tap` and with `--formats tap,html`. The html step's cost is the
difference of the wall (and CPU) times, per host; its bytes are report.html and its data folder.
--code runs the report command of another source tree (e.g. an export of main) on the same fleet.
"""

import argparse
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


def one_size(count, repeat, code, workdir):
    base = tempfile.mkdtemp(prefix="html-%d-" % count, dir=workdir)
    try:
        inventory = os.path.join(base, "inventory")
        os.makedirs(inventory)
        specs = aggregate.fleet(count, 20261122, baseline=False)
        waivers = os.path.join(inventory, "waivers.yml")
        aggregate.write_waivers(waivers, specs)
        aggregate.write_run(os.path.join(base, "template"), specs)
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
    parser.add_argument("--code", default=ROOT, help="the source tree whose report command runs")
    parser.add_argument("--workdir", default="/var/tmp")
    args = parser.parse_args()
    print("| hosts | report.html bytes | report-data/ bytes | bytes per host | html step wall ms/host | CPU ms/host |")
    print("|---|---|---|---|---|---|")
    for count in args.sizes:
        r = one_size(count, args.repeat, os.path.abspath(args.code), args.workdir)
        print("| {:,} | {:,} | {:,} | {:,.0f} | {:.3f} | {:.3f} |".format(
            count, r["page"], r["data"], (r["page"] + r["data"]) / count, r["wall_ms_per_host"], r["cpu_ms_per_host"]),
            flush=True)
        print("  (min wall/CPU of %s)" % r["times"], file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
