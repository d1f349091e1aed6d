#!/usr/bin/env python3
"""Benchmark: the audit over loopback SSH fleets against `ansible -m ping` and `-m setup`.

    sudo .venv/bin/python bench/fleet_scale.py [--sizes 10 50 100] [--repeat 3] [--forks 20]

For each fleet size: start a loopback SSH fleet (playbooks/testhosts/fleet_up.yml: one sshd per
host in its own mount and UTS namespace, 3 loop-mounted ext4 filesystems each) on 127.0.2.N with
its own state and image folders, so it never meets the Molecule fleet on 127.0.1.N. Then, per
repetition, time four commands over the same hosts at the same forks:

    ansible all -m ping            the floor: one SSH round trip and a trivial module per host
    ansible all -m setup           Ansible's own fact gathering
    ansible all -m ext4_facts      the audit's module alone
    ansible-playbook audit.yml     the whole audit (facts, rules, reports), probe off

Every command starts with cold SSH connections (its own ControlPath folder), as a nightly scan
does. The ad-hoc commands print one line per host (--one-line) so that the callback's YAML
rendering of large fact sets does not count against `setup`. Each command must succeed on every
host (the audit: every host audited, verdict pass with fail_on=critical), or the run stops.
Then the fleet is torn down (fleet_down.yml checks nothing is left) before the next size.

The shared lock (/tmp/ext4audit-heavy.lock) is held per fleet size, not for the whole series.
Prints Markdown tables; bench/README.md has the recorded numbers.
"""

import argparse
import fcntl
import json
import os
import re
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
VENV_BIN = os.path.dirname(sys.executable)
HELPER = os.path.join(ROOT, "testhosts", "fleet", "fleet_host.py")
STATE_DIR = os.path.join(ROOT, ".cache", "bench", "fleet")
IMAGE_DIR = "/dev/shm/ext4audit-bench-fleet"
ADDRESS_PREFIX = "127.0.2"
COMMANDS = ("ping", "setup", "ext4_facts", "audit")


def environment(control_dir=None):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    if control_dir:
        env["ANSIBLE_SSH_CONTROL_PATH_DIR"] = control_dir
    return env


def fleet_vars(size):
    return json.dumps({"fleet_size": size, "fleet_state_dir": STATE_DIR, "fleet_image_dir": IMAGE_DIR,
                       "fleet_address_prefix": ADDRESS_PREFIX})


def playbook(name, size):
    """fleet_up.yml or fleet_down.yml with this benchmark's folders and addresses; output on failure."""
    result = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "playbooks/testhosts/" + name,
                             "-e", fleet_vars(size)], cwd=ROOT, env=environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        raise SystemExit("%s failed (rc=%d):\n%s" % (name, result.returncode, result.stdout.decode(errors="replace")[-6000:]))


def leftovers():
    out = subprocess.run([sys.executable, HELPER, "status", "--state", STATE_DIR, "--images", IMAGE_DIR],
                         check=True, stdout=subprocess.PIPE).stdout
    return {key: value for key, value in json.loads(out).items() if value}


def timed(argv, log_path, control_dir):
    """Run argv, stamping each output line as it arrives; return (wall s, CPU s of the process
    tree, rc, [(seconds since start, line)])."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    proc = subprocess.Popen(argv, cwd=ROOT, env=environment(control_dir), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT)
    lines = []
    with open(log_path, "w") as log:
        for raw in proc.stdout:
            line = raw.decode(errors="replace").rstrip("\n")
            lines.append((time.perf_counter() - start, line))
            log.write(line + "\n")
    rc = proc.wait()
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return wall, cpu, rc, lines


def task_times(lines, wall):
    """Seconds from each PLAY/TASK banner to the next (the default callback prints a banner when a
    task starts), for the audit's breakdown."""
    banners = [(t, re.sub(r"\s*\*+$", "", line)) for t, line in lines if re.match(r"^(PLAY|TASK) \[", line)]
    ends = [t for t, _ in banners[1:]] + [wall]
    return [(name, end - t) for (t, name), end in zip(banners, ends)]


def check(command, size, rc, lines, reports_dir):
    """The command did its job on every host, or the benchmark stops with the output's tail."""
    text = "\n".join(line for _, line in lines)
    if command == "audit":
        runs = [p for p in os.listdir(reports_dir) if p != "latest"]
        summary = json.load(open(os.path.join(reports_dir, runs[-1], "summary.json"))) if runs else {}
        ok = rc == 0 and summary.get("counts", {}).get("hosts_audited") == size and summary.get("verdict") == "pass"
    else:
        ok = rc == 0 and len(re.findall(r"^fleet-\d+ \| SUCCESS", text, re.M)) == size
    if not ok:
        raise SystemExit("%s did not succeed on all %d hosts (rc=%d):\n%s" % (command, size, rc, text[-6000:]))


def measure(size, forks, repeat, workdir):
    inventory = os.path.join(STATE_DIR, "inventory.yml")
    adhoc = [os.path.join(VENV_BIN, "ansible"), "all", "-i", inventory, "--forks", str(forks), "--one-line", "-m"]
    rows, breakdown = [], None
    for rep in range(repeat):
        for command in COMMANDS:
            control_dir = tempfile.mkdtemp(prefix="cp-", dir=workdir)  # cold SSH connections
            reports_dir = os.path.join(workdir, "reports-%d-%d" % (size, rep))
            if command == "audit":
                argv = [os.path.join(VENV_BIN, "ansible-playbook"), "-i", inventory, "--forks", str(forks),
                        "playbooks/audit.yml", "-e", json.dumps({
                            "ext4_audit_reports_dir": reports_dir, "chopper_probe_enabled": False,
                            "ext4_audit_fail_on": "critical"})]
            else:
                argv = adhoc + [command]
            load = os.getloadavg()[0]
            wall, cpu, rc, lines = timed(argv, os.path.join(workdir, "%d-%d-%s.log" % (size, rep, command)), control_dir)
            check(command, size, rc, lines, reports_dir)
            rows.append({"hosts": size, "rep": rep + 1, "command": command, "wall_s": wall, "cpu_s": cpu,
                         "load1": load})
            print("  %3d hosts, rep %d, %-10s %6.2f s wall, %6.2f s CPU (load %.2f)" % (
                size, rep + 1, command, wall, cpu, load), file=sys.stderr, flush=True)
            if command == "audit":
                breakdown = task_times(lines, wall)
    return rows, breakdown


def one_size(size, forks, repeat, workdir, lock_path):
    with open(lock_path, "a") as lock:
        print("%d hosts: waiting for %s" % (size, lock_path), file=sys.stderr, flush=True)
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            if leftovers():
                raise SystemExit("a benchmark fleet or its leftovers exist: %s" % leftovers())
            uptime_before = subprocess.run(["uptime"], stdout=subprocess.PIPE).stdout.decode().strip()
            start = time.perf_counter()
            try:
                playbook("fleet_up.yml", size)
                up_s = time.perf_counter() - start
                rows, breakdown = measure(size, forks, repeat, workdir)
            finally:
                playbook("fleet_down.yml", size)
                left = leftovers()
                if left:
                    raise SystemExit("left behind by the %d-host fleet: %s" % (size, left))
            uptime_after = subprocess.run(["uptime"], stdout=subprocess.PIPE).stdout.decode().strip()
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
    return {"hosts": size, "fleet_up_s": up_s, "rows": rows, "breakdown": breakdown,
            "uptime_before": uptime_before, "uptime_after": uptime_after}


def report(results, forks):
    repeat = max(r["rep"] for r in results[0]["rows"])
    print("| hosts | command | wall s (median of %d) | min | max | controller CPU s (median) | per host ms | vs ping |"
          % repeat)
    print("|---|---|---|---|---|---|---|---|")
    for result in results:
        size = result["hosts"]
        walls = {c: [r["wall_s"] for r in result["rows"] if r["command"] == c] for c in COMMANDS}
        cpus = {c: [r["cpu_s"] for r in result["rows"] if r["command"] == c] for c in COMMANDS}
        ping = statistics.median(walls["ping"])
        for command in COMMANDS:
            median = statistics.median(walls[command])
            print("| %d | %s | %.2f | %.2f | %.2f | %.2f | %.0f | %.2fx |" % (
                size, command, median, min(walls[command]), max(walls[command]), statistics.median(cpus[command]),
                1000 * median / size, median / ping))
    print()
    print("| hosts | audit / ping (each repetition) | ext4_facts / setup (each repetition) | fleet up s | load before -> after |")
    print("|---|---|---|---|---|")
    for result in results:
        by = {}
        for row in result["rows"]:
            by.setdefault(row["rep"], {})[row["command"]] = row["wall_s"]
        audit_ratio = ", ".join("%.2f" % (v["audit"] / v["ping"]) for _, v in sorted(by.items()))
        facts_ratio = ", ".join("%.2f" % (v["ext4_facts"] / v["setup"]) for _, v in sorted(by.items()))
        loads = [re.search(r"load average: (.*)$", u).group(1) for u in (result["uptime_before"], result["uptime_after"])]
        print("| %d | %s | %s | %.0f | %s -> %s |" % (result["hosts"], audit_ratio, facts_ratio, result["fleet_up_s"],
                                                    loads[0], loads[1]))
    print()
    for result in results:
        slow = sorted(result["breakdown"], key=lambda item: -item[1])[:8]
        print("Audit at %d hosts (forks %d), last repetition, slowest steps: %s" % (
            result["hosts"], forks, "; ".join("%s %.2f s" % (name, seconds) for name, seconds in slow)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[10, 50, 100])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--forks", type=int, default=20)
    parser.add_argument("--lock", default="/tmp/ext4audit-heavy.lock", help="held while a fleet is up")
    parser.add_argument("--json", help="also write every measurement to this file")
    args = parser.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("run as root (the fleet's namespaces, loop devices and mounts)")
    workdir = tempfile.mkdtemp(prefix="ext4audit-fleet-bench-")
    try:
        results = [one_size(size, args.forks, args.repeat, workdir, args.lock) for size in args.sizes]
    except BaseException:
        print("logs of each command are in %s" % workdir, file=sys.stderr)
        raise
    shutil.rmtree(workdir)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=1)
    report(results, args.forks)


if __name__ == "__main__":
    main()
