#!/usr/bin/env python3
"""Benchmark: the report step (`python -m ext4audit report`) over 1,000 to 10,000 synthetic hosts.

    .venv/bin/python bench/aggregate.py [--sizes 1000 2500 5000 10000] [--repeat 2] [--workdir /var/tmp]

The hosts are made from the real fixtures in tests/fixtures (dumpe2fs -h, /proc/fs/ext4 options,
jbd2 info, mountinfo lines, the kernel strings of tests/unit/test_kernel_version.py), parsed by
the real parsers in plugins/module_utils/ and assembled into facts records the way library/ext4_facts.py
does: 3 to 9 filesystems per host, some network mounts, fstab entries with drift, odd mount
point names, read errors; 1% of the hosts unreachable; a waiver file (host, group and mount
point waivers, one expired). A baseline run (the same fleet a night earlier: 3% of the hosts
with a different filesystem, 1% removed, 1% added) is made and reported first, untimed.

Then the real command, as the playbook's report step runs it (every output format, --baseline):

    python -m ext4audit report RUN --fail-on high --waivers W --baseline BASE --inventory INV

is timed as a child process: wall time, CPU time of it and its worker processes (os.wait4), the
peak RSS of its largest process (ru_maxrss) and the peak of the summed RSS of its whole process
tree (sampled every 10 ms; pages the forked workers share with the parent count once per process,
so it is an upper bound). A second run of the same command under --profile-child splits the
parent's wall time by step (the pass over every host, which the workers do, and each fleet file)
and shows the parent's peak RSS after each step. A linear fit of each
measure against the host count is printed with R^2. Target (issue 6): 10,000 hosts in at most
10 s and 512 MiB.
"""

import argparse
import fcntl
import functools
import glob
import hashlib
import gzip
import json
import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import threading
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
PAGE = os.sysconf("SC_PAGE_SIZE")
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests", "unit")]

from ext4audit.parsers import kernel_version  # noqa: E402
from ext4audit.parsers.ext4_parsers.fstab import fstab_drift  # noqa: E402
from ext4audit.parsers.ext4_parsers.mounts import option_map, parse_ext4_options, parse_mountinfo  # noqa: E402
from ext4audit.parsers.ext4_parsers.superblock import parse_dumpe2fs, parse_jbd2_info  # noqa: E402
import test_kernel_version as kv_fixtures  # noqa: E402  (the real /proc/version strings)

# A filesystem kind: (mountinfo line of tests/fixtures/mountinfo/ext4-loop-options-6.18.txt,
# /proc/fs/ext4 options file, dumpe2fs -h output or None (unreadable: the error as on this
# machine's root), jbd2 info or None).
CASES = {
    "defaults": ("m-defaults", "kernel-6.18-defaults.txt", "e2fsprogs-1.47-default-2g.txt", "kernel-6.18-loop.txt"),
    "nodelalloc": ("m-nodelalloc", "kernel-6.18-nodelalloc.txt", "e2fsprogs-1.47-default-2g.txt", "kernel-6.18-loop.txt"),
    "data-journal": ("m-data-journal", "kernel-6.18-data-journal.txt", "e2fsprogs-1.47-default-2g.txt",
                     "kernel-6.18-loop-data-journal-fsync.txt"),
    "dioread-lock": ("m-dioread-lock", "kernel-6.18-dioread-lock.txt", "e2fsprogs-1.45-image-metadata-csum.txt",
                     "kernel-6.18-loop-fresh-mount.txt"),
    "writeback": ("m-nobarrier-commit60-writeback", "kernel-6.18-nobarrier-commit60-writeback.txt",
                  "e2fsprogs-1.42-centos7-root-orphan.txt", "kernel-6.18-loop.txt"),
    "ext3": ("m-ext3-mount", "kernel-6.18-ext3-mount.txt", "e2fsprogs-1.47-ext3.txt", "kernel-6.18-loop.txt"),
    "sb-defaults": ("m-tune2fs-sb-defaults", "kernel-6.18-tune2fs-sb-defaults.txt",
                    "e2fsprogs-1.47-tune2fs-nobarrier-mountopts.txt", "kernel-6.18-loop.txt"),
    "fast-commit": ("m-fast-commit-stride", "kernel-6.18-fast-commit-stride.txt", "e2fsprogs-1.47-fast-commit-stride.txt",
                    "kernel-6.18-loop-fast-commit.txt"),
    "nojournal": ("m-nojournal", "kernel-6.18-nojournal.txt", "e2fsprogs-1.47-nojournal.txt", None),
    "small-journal": ("m-defaults", "kernel-6.18-defaults.txt", "e2fsprogs-1.47-small-journal-inode128.txt",
                      "kernel-6.18-loop.txt"),
    "nvme-2tb": ("m-defaults", "kernel-6.5.5-nvme1n1p1.txt", "e2fsprogs-1.47-real-nvme-2tb-journal-1024m-csum.txt",
                 "kernel-5.10.162-nvme1n1-mail-indent-stripped.txt"),
    "1k-blocks": ("m-defaults", "kernel-6.18-defaults.txt", "e2fsprogs-1.47-1k-blocks.txt", "kernel-6.18-loop.txt"),
    "luks-128m": ("m-defaults", "kernel-6.18-defaults.txt", "e2fsprogs-1.45-luks-music-journal-128m.txt",
                  "kernel-6.18-loop.txt"),
    "unreadable-sb": ("m-defaults", "kernel-6.18-vda.txt", None, None),
}
# Relative frequency of each kind: mostly the fleet's standard images; the kinds with a high
# finding (small-journal, luks-128m, writeback, sb-defaults) are 3% of the filesystems, so about
# a fifth of the hosts fail the policy (with the 2% on a kernel with a critical issue).
WEIGHTS = {"defaults": 40, "nvme-2tb": 25, "nodelalloc": 4, "data-journal": 2, "dioread-lock": 3, "ext3": 2,
           "fast-commit": 3, "nojournal": 2, "1k-blocks": 2, "unreadable-sb": 4,
           "small-journal": 1, "luks-128m": 1, "writeback": 0.5, "sb-defaults": 0.5}
# Kernels (release, /proc/version, version_signature, os-release): Debian 6.1.69, Debian 6.1.64
# (a known O_DIRECT corruption: critical), Ubuntu 22.04 AWS, Ubuntu 20.04, RHEL 9, Amazon Linux 2,
# this machine's kernel.
KERNELS = [
    ("6.1.0-17-amd64", kv_fixtures.PV_DEB_6_1_69, "", {"ID": "debian", "VERSION_ID": "12"}),
    ("6.1.0-14-amd64", kv_fixtures.PV_DEB_6_1_64, "", {"ID": "debian", "VERSION_ID": "12"}),
    ("6.8.0-1015-aws", kv_fixtures.PV_U2204_AWS, kv_fixtures.SIG_U2204_AWS, {"ID": "ubuntu", "VERSION_ID": "22.04"}),
    ("5.4.0-166-generic", kv_fixtures.PV_U2004_GENERIC, kv_fixtures.SIG_U2004_GENERIC,
     {"ID": "ubuntu", "VERSION_ID": "20.04"}),
    ("5.14.0-362.24.1.el9_3.x86_64", "", "", {"ID": "rhel", "ID_LIKE": "fedora", "VERSION_ID": "9.3"}),
    ("5.10.201-191.748.amzn2.x86_64", "", "", {"ID": "amzn", "ID_LIKE": "centos rhel fedora", "VERSION_ID": "2"}),
    ("6.18.44-fc-v669", kv_fixtures.PV_THIS_HOST, "", {"ID": "debian", "VERSION_ID": "12"}),
]
GROUPS = ["web", "db", "tikv", "cache", "batch"]
ODD_MOUNTS = []  # filled from tests/fixtures/mountinfo/escaped-names.txt


def fixture(*parts):
    with open(os.path.join(FIXTURES, *parts), "rb") as handle:
        return handle.read().decode("utf-8", "surrogateescape")


@functools.lru_cache(maxsize=None)
def templates():
    """Each kind's filesystem entry (without device and mount point), parsed once."""
    mounts = {os.path.basename(m["mountpoint"]): m
              for m in parse_mountinfo(fixture("mountinfo", "ext4-loop-options-6.18.txt"))}
    ODD_MOUNTS.extend(m["mountpoint"] for m in parse_mountinfo(fixture("mountinfo", "escaped-names.txt"))
                      if m["mountpoint"] != "/")
    result = {}
    for name, (mount_key, options_file, dumpe2fs_file, jbd2_file) in CASES.items():
        mount = mounts[mount_key]
        superblock = parse_dumpe2fs(fixture("dumpe2fs", dumpe2fs_file)) if dumpe2fs_file else None
        result[name] = {
            "fstype": mount["fstype"], "bind_mounts": [], "mount_options": mount["mount_options"],
            "super_options": mount["super_options"], "superblock": superblock,
            "options": parse_ext4_options(fixture("ext4_options", options_file)), "options_source": "proc",
            "jbd2": parse_jbd2_info(fixture("jbd2", jbd2_file)) if jbd2_file else None,
        }
    netfs = [{"mountpoint": m["mountpoint"], "fstype": m["fstype"], "source": m["source"],
              "options": m["mount_options"] + m["super_options"]}
             for m in parse_mountinfo(fixture("mountinfo", "netfs.txt"))]
    return result, netfs


def host_spec(rng, index):
    """What a host has: its kinds of filesystem (3 to 9), kernel, groups, and the odd cases."""
    kinds = list(CASES)
    weights = [WEIGHTS[k] for k in kinds]
    return {"name": "host-%05d.dc%d.example.org" % (index, index % 4), "index": index,
            "kinds": rng.choices(kinds, weights=weights, k=rng.randint(3, 9)),
            "kernel": rng.choices(range(len(KERNELS)), weights=[30, 2, 20, 10, 15, 15, 8])[0],
            "groups": sorted(set(rng.sample(GROUPS, rng.randint(1, 2)))),
            "netfs": rng.random() < 0.15, "odd": rng.random() < 0.02, "fstab_drift": rng.random() < 0.3,
            "unreachable": rng.random() < 0.01}


def facts_record(spec):
    """The facts record the playbook writes for this host (ext4-fleet-audit/facts/v1 inside)."""
    if spec["unreachable"]:
        return {"host": spec["name"], "groups": spec["groups"], "status": "unreachable", "facts": None,
                "reason": "Task failed: Failed to connect to the host via ssh: ssh: connect to host %s port 22: "
                          "Connection timed out" % spec["name"]}
    kinds, netfs = templates()
    release, proc_version, signature, os_release = KERNELS[spec["kernel"]]
    kernel = kernel_version.identify(release, proc_version, signature, os_release)
    kernel.update(proc_version=proc_version, version_signature=signature or None, os_release=os_release, page_size=4096)
    filesystems, errors = [], []
    for number, kind in enumerate(spec["kinds"]):
        fs = dict(kinds[kind])
        mountpoint = "/" if number == 0 else "/srv/data%d" % number
        if spec["odd"] and number == 1:
            mountpoint = ODD_MOUNTS[spec["index"] % len(ODD_MOUNTS)]
        device = "/dev/nvme%dn1" % number
        fs.update(device=device, kernel_name="nvme%dn1" % number, major=259, minor=number, mountpoint=mountpoint,
                  queue={"device": "nvme%dn1" % number, "rotational": 0, "write_cache": "write back",
                         "discard_max_bytes": 2199023255040}, fstab=None, fstab_drift=[])
        if fs["superblock"] is None:
            errors.append({"where": "filesystem %s" % mountpoint,
                           "reason": "dumpe2fs -h %s failed (rc=1): dumpe2fs: Operation not permitted while "
                                     "trying to open %s Couldn't find valid filesystem superblock." % (device, device)})
        if spec["fstab_drift"] and number == 0:
            wanted = ["defaults", "errors=remount-ro", "noatime"]
            fs["fstab"] = {"spec": "UUID=0a1b2c3d-0000-4000-8000-%012d" % spec["index"], "fstype": "ext4",
                           "options": wanted, "line": 12}
            fs["fstab_drift"] = fstab_drift(wanted, option_map(fs["options"]),
                                                    set(fs["mount_options"]) | set(fs["super_options"]))
        filesystems.append(fs)
    facts = {"schema": "ext4-fleet-audit/facts/v1", "kernel": kernel, "filesystems": filesystems,
             "netfs": netfs[spec["index"] % len(netfs):][:2] if spec["netfs"] else [], "errors": errors}
    return {"host": spec["name"], "groups": spec["groups"], "status": "audited", "reason": None, "facts": facts}


def fleet(count, seed, baseline):
    """The host specs of a fleet; baseline: the same fleet a night earlier (3% of the hosts with a
    different filesystem, 1% of today's hosts not there yet, 1% there that are gone today)."""
    rng = random.Random(seed)
    specs = [host_spec(rng, i) for i in range(count + count // 100)]
    today, earlier = specs[:count], specs[:count - count // 100] + specs[count:]
    if baseline:
        drift = random.Random(seed + 1)
        earlier = [dict(s, kinds=["defaults"] + s["kinds"][1:]) if drift.random() < 0.03 else s for s in earlier]
        return earlier
    return today


def write_run(folder, specs):
    """facts/<host>-<hash>.json as the playbook names and formats them (to_nice_json), and an
    empty probe/ as its prepare step makes it."""
    os.makedirs(os.path.join(folder, "facts"))
    os.makedirs(os.path.join(folder, "probe"))
    for spec in specs:
        name = re.sub(r"[^A-Za-z0-9._-]", "_", spec["name"]) + "-" + hashlib.sha1(spec["name"].encode()).hexdigest()[:8]
        with open(os.path.join(folder, "facts", name + ".json"), "w") as out:
            out.write(json.dumps(facts_record(spec), indent=4, sort_keys=True, separators=(",", ": ")) + "\n")


def write_waivers(path, specs):
    hosts = [s["name"] for s in specs[::97]][:20]
    waivers = [
        {"rule": "EXT4_DIOREAD_NOLOCK_NODELALLOC", "groups": ["tikv"], "justification": "TiKV requires nodelalloc",
         "approver": "storage-team", "expires": "2099-06-30"},
        {"rule": "EXT4_SMALL_JOURNAL", "hosts": hosts, "mountpoints": ["/srv/data*"],
         "justification": "journal resize planned", "approver": "storage-team", "expires": "2099-01-31"},
        {"rule": "EXT4_INODE_128", "groups": ["batch"], "justification": "scratch data only",
         "approver": "batch-team", "expires": "2099-12-31"},
        {"rule": "EXT4_NO_JOURNAL", "hosts": hosts[:5], "justification": "expired on purpose",
         "approver": "storage-team", "expires": "2020-01-01"},
    ]
    with open(path, "w") as out:
        json.dump({"waivers": waivers}, out, indent=1)


# ---------------------------------------------------------------------------- measuring
def report_argv(run, waivers, baseline, inventory):
    return ["-m", "ext4audit", "report", run, "--fail-on", "high", "--waivers", waivers,
            "--baseline", baseline or "", "--inventory", inventory]


def _tree(pid):
    """pid and its descendants (/proc/<pid>/task/<tid>/children)."""
    found, todo = [], [pid]
    while todo:
        current = todo.pop()
        found.append(current)
        for task in glob.glob("/proc/%d/task/*/children" % current):
            try:
                with open(task) as handle:
                    todo.extend(int(child) for child in handle.read().split())
            except OSError:
                pass
    return found


def _rss_bytes(pid):
    try:
        with open("/proc/%d/statm" % pid) as handle:
            return int(handle.read().split()[1]) * PAGE
    except (OSError, IndexError, ValueError):
        return 0


def timed_report(argv, interval=0.01, cwd=ROOT):
    """The report command as a child: wall time; CPU time of the child and its worker processes
    (wait4 counts the children it waited for); peak RSS of the largest process (ru_maxrss); and
    the peak of the summed RSS of the whole process tree, sampled every `interval` s (pages the
    forked workers share with the parent count once per process: an upper bound). cwd: the
    checkout whose ext4audit `python -m` runs (bench/merge.py measures main's too)."""
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable] + argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    peak, done = [0], threading.Event()

    def sample():
        while not done.is_set():
            peak[0] = max(peak[0], sum(_rss_bytes(pid) for pid in _tree(proc.pid)))
            done.wait(interval)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # The outputs are small (the terminal table is capped): read them after the child has ended,
    # through wait4, which returns that child's own rusage.
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    done.set()
    sampler.join()
    out, err = proc.stdout.read(), proc.stderr.read()
    proc.returncode = os.waitstatus_to_exitcode(status)
    if proc.returncode not in (0, 1, 2) or b"error:" in err:
        raise SystemExit("report failed (rc=%d): %s" % (proc.returncode, err.decode(errors="replace")[-3000:]))
    return {"wall_s": wall, "cpu_s": usage.ru_utime + usage.ru_stime, "peak_mib": usage.ru_maxrss / 1024,
            "tree_peak_mib": peak[0] / 2 ** 20, "rc": proc.returncode,
            "verdict": out.decode(errors="replace").splitlines()[-1]}


def profile_child(argv):
    """In this process: the report command with its steps timed (--profile-child). Prints JSON."""
    from ext4audit.cli import commands as cli
    from ext4audit.formats import terminal
    from ext4audit.formats import writers
    from ext4audit.report import baseline, reports
    from ext4audit.steps import fleet
    from ext4audit.rules import catalog, waivers
    steps, depth = {}, [0]

    def hwm():
        with open("/proc/self/status") as handle:
            return int(re.search(r"VmHWM:\s+(\d+)", handle.read()).group(1)) / 1024

    def wrap(module, name, label=None):
        func = getattr(module, name, None)
        if func is None:
            return

        @functools.wraps(func)
        def timed(*args, **kwargs):
            if depth[0]:
                return func(*args, **kwargs)
            key = label or name
            if name in ("write_json", "write_atomic"):
                path = args[0]
                key = "write hosts/*.json" if os.sep + "hosts" + os.sep in path else "write " + os.path.basename(path)
            depth[0] += 1
            wall, cpu = time.perf_counter(), time.process_time()
            try:
                return func(*args, **kwargs)
            finally:
                depth[0] -= 1
                entry = steps.setdefault(key, {"wall_s": 0.0, "cpu_s": 0.0, "calls": 0})
                entry["wall_s"] += time.perf_counter() - wall
                entry["cpu_s"] += time.process_time() - cpu
                entry["calls"] += 1
                entry["peak_mib_after"] = hwm()
        setattr(module, name, timed)

    for module, name, label in ((catalog, "load", "load catalog"), (waivers, "load", "load waivers"),
                                (baseline, "load", "load baseline (summary)"), (cli, "plotted_hosts", "choose plotted hosts"),
                                (fleet, "report_hosts", "every host: read facts, evaluate, compare, write hosts/ and parts"),
                                (reports, "summarize_digests", "summarize"), (fleet, "put_hosts_in_place", "move hosts/"),
                                (reports, "write_json", None), (reports, "finish_run", "flush, write summary.json"),
                                (reports, "point_latest", "move latest"), (terminal, "table", "table")) + tuple(
                                    (writers.writer_class(name), "finish", "write " + writers.writer_class(name).file)
                                    for name in writers.FORMATS):
        wrap(module, name, label)
    start = time.perf_counter()
    with open(os.devnull, "w") as devnull:
        stdout, sys.stdout = sys.stdout, devnull
        try:
            rc = cli.main(argv[2:])
        finally:
            sys.stdout = stdout
    wall = time.perf_counter() - start
    # What no step holds: arguments and set-up, and the wait for hosts/ to reach the disk (flushed
    # in a thread while the fleet files are written, reports.flushing).
    steps["other: set-up, the wait for the flush of hosts/"] = {
        "wall_s": wall - sum(step["wall_s"] for step in steps.values()), "calls": 1, "peak_mib_after": hwm()}
    print(json.dumps({"rc": rc, "wall_s": wall, "steps": steps}))


def fit(xs, ys):
    """Least-squares line y = a + b x and its R^2."""
    n = len(xs)
    mx, my = sum(xs) / n, sum(ys) / n
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, 1 - ss_res / ss_tot if ss_tot else 1.0


def sizes_of(run):
    """Bytes of each output: each folder (hosts/, and any other the report step writes) as a whole,
    the fleet files one by one; not the inputs (facts/, probe/)."""
    result = {}
    for name in sorted(os.listdir(run)):
        path = os.path.join(run, name)
        if name in ("facts", "probe") or os.path.islink(path):
            continue
        if os.path.isdir(path):
            result[name + "/"] = sum(os.path.getsize(os.path.join(top, f)) for top, _, files in os.walk(path) for f in files)
        else:
            result[name] = os.path.getsize(path)
    return result


def sarif_limits(run):
    """report.sarif against GitHub code scanning's limits (ext4audit/formats/sarif.py): its results, its
    gzipped bytes and what it had to leave out."""
    with open(os.path.join(run, "report.sarif"), "rb") as handle:
        data = handle.read()
    run_ = json.loads(data)["runs"][0]
    return {"results": len(run_["results"]), "gzipped": len(gzip.compress(data, 6)), "cut": run_["properties"].get("cut")}


def one_size(count, repeat, workdir):
    base = tempfile.mkdtemp(prefix="agg-%d-" % count, dir=workdir)
    inventory = os.path.join(base, "inventory")
    os.makedirs(inventory)
    today = fleet(count, 20261122, baseline=False)
    waivers = os.path.join(inventory, "waivers.yml")
    write_waivers(waivers, today)
    started = time.perf_counter()
    write_run(os.path.join(base, "baseline"), fleet(count, 20261122, baseline=True))
    made = time.perf_counter() - started
    timed_report(report_argv(os.path.join(base, "baseline"), waivers, None, inventory))  # untimed: the baseline
    write_run(os.path.join(base, "template"), today)
    rows = []
    for rep in range(repeat):
        run = os.path.join(base, "run-%d" % rep)
        os.makedirs(run)
        for sub in ("facts", "probe"):
            shutil.copytree(os.path.join(base, "template", sub), os.path.join(run, sub))
        subprocess.run(["sync"], check=True)  # the input copy's write-back does not count
        load = os.getloadavg()[0]
        row = timed_report(report_argv(run, waivers, os.path.join(base, "baseline"), inventory))
        row.update(hosts=count, rep=rep + 1, load1=load, sizes=sizes_of(run), sarif=sarif_limits(run))
        rows.append(row)
        print("  %5d hosts, rep %d: %.2f s wall, %.2f s CPU, %.0f MiB peak process, %.0f MiB peak tree (load %.2f) %s" % (
            count, rep + 1, row["wall_s"], row["cpu_s"], row["peak_mib"], row["tree_peak_mib"], load, row["verdict"][:100]),
            file=sys.stderr, flush=True)
    run = os.path.join(base, "profiled")
    os.makedirs(run)
    for sub in ("facts", "probe"):
        shutil.copytree(os.path.join(base, "template", sub), os.path.join(run, sub))
    out = subprocess.run([sys.executable, os.path.abspath(__file__), "--profile-child", "--"]
                         + report_argv(run, waivers, os.path.join(base, "baseline"), inventory),
                         cwd=ROOT, stdout=subprocess.PIPE, check=True).stdout
    profile = json.loads(out.decode().strip().splitlines()[-1])
    filesystems = sum(len(s["kinds"]) for s in today if not s["unreachable"])
    shutil.rmtree(base)
    return {"hosts": count, "filesystems": filesystems, "rows": rows, "profile": profile, "input_s": made}


def report(results):
    print("| hosts | filesystems | rep | wall s | CPU s | peak RSS of a process MiB | peak RSS of the tree MiB | load "
          "| output MB | hosts/ MB | report.html MB | report.sarif MB | junit.xml MB | SARIF results | SARIF gzipped MB "
          "| summary.md KiB | KB per host |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|")
    for result in results:
        for row in result["rows"]:
            sizes = row["sizes"]
            print("| %d | %d | %d | %.2f | %.2f | %.0f | %.0f | %.2f | %.0f | %.0f | %.1f | %.1f | %.1f | %d%s | %.2f | %.0f | %.1f |" % (
                result["hosts"], result["filesystems"], row["rep"], row["wall_s"], row["cpu_s"], row["peak_mib"],
                row["tree_peak_mib"],
                row["load1"], sum(sizes.values()) / 1e6, sizes["hosts/"] / 1e6, sizes.get("report.html", 0) / 1e6,
                sizes.get("report.sarif", 0) / 1e6, sizes.get("junit.xml", 0) / 1e6, row["sarif"]["results"],
                " (cut)" if row["sarif"]["cut"] else "", row["sarif"]["gzipped"] / 1e6,
                sizes.get("summary.md", 0) / 1024,  # GitHub's job summary takes at most 1,024 KiB
                sum(sizes.values()) / 1e3 / result["hosts"]))  # issue 28: about 15 KB a host at most
    xs = [r["hosts"] for result in results for r in result["rows"]]
    print()
    for key, unit in (("wall_s", "s"), ("cpu_s", "s"), ("peak_mib", "MiB"), ("tree_peak_mib", "MiB")):
        ys = [r[key] for result in results for r in result["rows"]]
        a, b, r2 = fit(xs, ys) if len(set(xs)) > 1 else (0, 0, float("nan"))
        print("- %s: %.3g %s + %.3g %s per 1,000 hosts (R^2 = %.4f)" % (key, a, unit, b * 1000, unit, r2))
    print()
    for result in results:
        steps = sorted(result["profile"]["steps"].items(), key=lambda item: -item[1]["wall_s"])
        print("Steps at %d hosts (one profiled run, %.2f s): %s" % (result["hosts"], result["profile"]["wall_s"], "; ".join(
            "%s %.2f s (peak %.0f MiB after)" % (name, s["wall_s"], s["peak_mib_after"]) for name, s in steps)))


def main():
    if sys.argv[1:2] == ["--profile-child"]:
        return profile_child(sys.argv[3:])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 2500, 5000, 10000])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--workdir", default="/var/tmp", help="where the run folders go (a disk, as reports/ is)")
    parser.add_argument("--json", help="also write every measurement to this file")
    parser.add_argument("--lock", default="/tmp/ext4audit-heavy.lock", help="held while one size is measured")
    args = parser.parse_args()
    results = []
    for count in args.sizes:  # the shared lock per size: other heavy work waits minutes, not the whole series
        with open(args.lock, "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                results.append(one_size(count, args.repeat, args.workdir))
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    report(results)


if __name__ == "__main__":
    main()
