"""Faults in the probe, on real loop devices and real ext4.

- SIGKILL at seeded random points of sweeps, 24 times: after each, the next run's own sweep of
  stale resources leaves no loop device, mount or scratch file of the probe, and the decoy loop
  devices this test attached (one mounted in a sibling directory whose name starts with the scratch
  path) and every other loop device on the machine are untouched.
- The scratch filesystem fills up mid-sweep (a tmpfs this test mounts, big enough for the probe's
  pre-checks, too small for the sweep's image cache: no filler process, no timing window): the
  record says the sweep stopped because the scratch was full, after >= 1 run, and nothing is left.
  Once run directly, once through the real playbook (the audit completes, the report shows it).

A host whose sshd stops mid-run is covered by the Molecule fleet scenario (molecule/fleet: the
tripwire stops fleet-05's sshd during the audit; tests/fleet/test_molecule.py runs it).
"""

import glob
import hashlib
import json
import os
import re
import random
import subprocess
import sys
import time

import pytest

from conftest import ROOT, VENV_BIN, load_json, needs_root, run
from unit.test_probe_target import PROBE_PATH

pytestmark = needs_root

KILLS = 24
# Seeded kill points: a failure names its seed and points, and EXT4AUDIT_FAULT_SEED=<seed> replays them.
SEED = int(os.environ.get("EXT4AUDIT_FAULT_SEED", "20260515"))
MiB = 1 << 20


def make_job(scratch_dir, plan=None, confirmations=(), **extra):
    facts_fs = {"mountpoint": "/", "options": ["rw", "data=ordered", "delalloc", "auto_da_alloc", "barrier"],
                "superblock": {"block_size": 4096, "inode_size": 256, "journal_bytes": 16 << 20,
                               "features": ["has_journal", "extent", "flex_bg", "64bit"]}}
    job = {"schema": "ext4-fleet-audit/probe-job/v1", "plan": plan, "filesystem": facts_fs, "netfs": [],
           "scratch_dir": scratch_dir, "confirmations": list(confirmations), "repetitions": 2,
           "sweep_budget_s": 60, "confirm_budget_s": 60}
    job.update(extra)
    return job


def probe_argv(job_path, out_path):
    return [sys.executable, PROBE_PATH, "run", str(job_path), str(out_path)]


def run_probe(tmp_path, job, name="job"):
    job_path, out_path = tmp_path / (name + ".json"), tmp_path / (name + "-out.json")
    job_path.write_text(json.dumps(job))
    proc = subprocess.run(probe_argv(job_path, out_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=300)
    assert proc.returncode in (0, 1), "probe exited %d:\n%s" % (proc.returncode, proc.stderr[-3000:])
    return json.loads(out_path.read_text()), proc.stderr


def inside(path, root):
    return path == root or path.startswith(root + "/")


def leftovers(scratch_dir):
    """What of the probe's own is left: mounts and loop devices under its directory, and its files.
    Read here independently of the probe's own helpers (exact prefix: a sibling named
    '<scratch>-decoy' is not the probe's)."""
    with open("/proc/self/mountinfo") as handle:
        mounts = [line.split()[4] for line in handle if inside(line.split()[4], scratch_dir)]
    loops = []
    for backing in sorted(glob.glob("/sys/block/loop*/loop/backing_file")):
        try:
            with open(backing) as handle:
                if inside(handle.read().rstrip("\n").replace(" (deleted)", ""), scratch_dir):
                    loops.append(backing.split("/")[3])
        except OSError:
            pass  # detached while we looked
    files = sorted(os.listdir(scratch_dir)) if os.path.isdir(scratch_dir) else []
    return {"mounts": mounts, "loops": loops, "files": files}


NOTHING = {"mounts": [], "loops": [], "files": []}


def probe_mounts(pid, scratch_dir):
    """The mounts under the scratch directory that the probe `pid` sees (its own namespace)."""
    try:
        with open("/proc/%d/mountinfo" % pid) as handle:
            return [line.split()[4] for line in handle if inside(line.split()[4], scratch_dir)]
    except OSError:
        return []


def gone_with_the_probe(scratch_dir, wait_s=5.0):
    """leftovers() once the killed probe's mounts and loop devices are gone (the kernel drops its
    namespace and autoclear detaches the devices as the process is reaped), or after wait_s."""
    deadline = time.monotonic() + wait_s
    left = leftovers(scratch_dir)
    while (left["mounts"] or left["loops"]) and time.monotonic() < deadline:
        time.sleep(0.05)
        left = leftovers(scratch_dir)
    return left


def test_a_probe_killed_mid_sweep_takes_its_mounts_and_loop_devices_with_it(tmp_path):
    """SIGKILL while the probe has scratch filesystems mounted: no mount of it in this namespace,
    no loop device of its images attached (losetup -J), without any later probe run."""
    from ext4audit.probe import analysis as plan_mod
    scratch_dir = "/dev/shm/ext4-audit-probe-kill-%d" % os.getpid()
    job_path = tmp_path / "sweep.json"
    job_path.write_text(json.dumps(make_job(scratch_dir, plan=plan_mod.make_plan(7, 512), confirmations=[])))
    try:
        for number in range(3):
            proc = subprocess.Popen(probe_argv(job_path, tmp_path / "sweep-out.json"),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            deadline = time.monotonic() + 60
            while len(probe_mounts(proc.pid, scratch_dir)) < 2 and time.monotonic() < deadline:
                time.sleep(0.02)
            had = probe_mounts(proc.pid, scratch_dir)
            assert had, "the probe mounted nothing within 60 s"
            proc.kill()
            assert proc.wait(timeout=60) == -9
            left = gone_with_the_probe(scratch_dir)
            attached = [d for d in json.loads(run(["losetup", "-J"]) or '{"loopdevices": []}')["loopdevices"]
                        if inside((d.get("back-file") or "").replace(" (deleted)", ""), scratch_dir)]
            print("kill %d: the probe had %d mounts; left: %s, attached: %s" % (number + 1, len(had), left, attached))
            assert left["mounts"] == [] and left["loops"] == [] and attached == [], (had, left, attached)
    finally:
        run_probe(tmp_path, make_job(scratch_dir), name="cleanup")


def loop_devices(scratch_dir):
    """Every loop device not backed by the scratch directory: name -> its attributes."""
    out = run(["losetup", "--json", "--list", "--output", "NAME,BACK-FILE,OFFSET,SIZELIMIT,AUTOCLEAR,RO,DIO,LOG-SEC"])
    devices = json.loads(out or '{"loopdevices": []}')["loopdevices"] if out.strip() else []
    return dict((d["name"], d) for d in devices if not inside((d["back-file"] or "").replace(" (deleted)", ""),
                                                              scratch_dir))


def mounts_of(device):
    with open("/proc/self/mountinfo") as handle:
        return sorted(line.split()[4] for line in handle if line.split(" - ")[1].split()[1] == device)


class Decoys:
    """Loop devices this test attaches itself, outside the probe's directory: one mounted in a
    sibling directory whose path starts with the scratch path, one attached but not mounted
    (its image's bytes must not change)."""

    def __init__(self, base):
        self.base = base
        self.devices, self.mounted = [], []

    def make(self):
        os.makedirs(self.base)
        mounted_img, idle_img = os.path.join(self.base, "mounted.img"), os.path.join(self.base, "idle.img")
        for image in (mounted_img, idle_img):
            run(["truncate", "-s", "64M", image])
            run(["mkfs.ext4", "-F", "-q", image])
        self.mounted_dev = run(["losetup", "--find", "--show", mounted_img]).strip()
        self.devices.append(self.mounted_dev)
        self.target = os.path.join(self.base, "mnt")
        os.makedirs(self.target)
        run(["mount", "-t", "ext4", self.mounted_dev, self.target])
        self.mounted.append(self.target)
        with open(os.path.join(self.target, "sentinel"), "w") as handle:
            handle.write("decoy data\n")
        self.idle_dev = run(["losetup", "--find", "--show", idle_img]).strip()
        self.devices.append(self.idle_dev)
        self.idle_img = idle_img
        self.idle_sum = self.digest()
        return self

    def digest(self):
        with open(self.idle_img, "rb") as handle:
            return hashlib.sha256(handle.read()).hexdigest()

    def check(self):
        assert mounts_of(self.mounted_dev) == [self.target], "the mounted decoy lost its mount"
        with open(os.path.join(self.target, "sentinel")) as handle:
            assert handle.read() == "decoy data\n"
        assert run(["losetup", "--noheadings", "--output", "BACK-FILE", self.idle_dev]).strip() == self.idle_img
        assert self.digest() == self.idle_sum, "the idle decoy's image changed"

    def cleanup(self):
        for target in self.mounted:
            subprocess.run(["umount", target], check=False)
        for device in self.devices:
            subprocess.run(["losetup", "-d", device], check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", self.base], check=False)


@pytest.fixture
def decoys():
    holder = {}

    def make(scratch_dir):
        holder["decoys"] = Decoys(scratch_dir + "-decoy").make()
        return holder["decoys"]
    yield make
    if "decoys" in holder:
        holder["decoys"].cleanup()


def test_24_sigkills_at_seeded_points_leave_nothing_and_touch_no_other_loop_device(tmp_path, decoys):
    from ext4audit.probe import analysis as plan_mod
    scratch_dir = "/dev/shm/ext4-audit-probe-faults-%d" % os.getpid()
    decoy = decoys(scratch_dir)
    others = loop_devices(scratch_dir)
    assert decoy.mounted_dev.split("/")[-1] in [n.split("/")[-1] for n in others]
    # A cold 512-run sweep (image builds, then runs) and one confirmation: 9-12 s on this machine,
    # so the probe is still at work at the last kill point.
    job_path = tmp_path / "sweep.json"
    job_path.write_text(json.dumps(make_job(scratch_dir, plan=plan_mod.make_plan(7, 512),
                                            confirmations=["rename_over_existing"])))
    rng = random.Random(SEED)
    points = [round(rng.uniform(0.1, 3.5), 3) for _ in range(KILLS)]
    print("SIGKILL seed %d, points (s after start): %s" % (SEED, points))
    log = []
    try:
        for number, point in enumerate(points, 1):
            proc = subprocess.Popen(probe_argv(job_path, tmp_path / "sweep-out.json"),
                                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            time.sleep(point)
            had = probe_mounts(proc.pid, scratch_dir)
            proc.kill()
            assert proc.wait(timeout=60) == -9, "kill %d at %.3f s: the probe ended before it (rc %s)" % (
                number, point, proc.returncode)
            left = gone_with_the_probe(scratch_dir)
            assert left["mounts"] == [] and left["loops"] == [], "kill %d at %.3f s: %s" % (number, point, left)
            # The next run (no plan: the stale sweep, the replica check mount, cleanup) releases it.
            result, stderr = run_probe(tmp_path, make_job(scratch_dir), name="next")
            assert result["status"] == "ok", "kill %d at %.3f s: next run %s: %s" % (number, point, result["reason"],
                                                                                   stderr[-1000:])
            released = result["released_stale"]
            log.append((number, point, len(had), len(left["loops"]), len(released)))
            assert leftovers(scratch_dir) == NOTHING, "kill %d at %.3f s (seed %d)" % (number, point, SEED)
            assert not os.path.exists(scratch_dir)
            decoy.check()
            now = loop_devices(scratch_dir)
            for name, attrs in others.items():  # a loop device that was there is there, unchanged
                assert now.get(name) == attrs, "kill %d at %.3f s: loop device %s changed: %s -> %s" % (
                    number, point, name, attrs, now.get(name))
    finally:
        print("kill, point s, mounts of the probe at the kill, loops left, released by the next run:")
        for row in log:
            print("  %2d  %6.3f  %d  %d  %d" % row)
    assert len(log) == KILLS
    # Most kill points fall inside the sweep, where a scratch filesystem is mounted (in the probe's
    # own namespace): the kernel really had something to drop (a run that never mounted proves little).
    with_mounts = sum(1 for row in log if row[2])
    print("%d of %d kills hit the probe with a mount, none left after" % (with_mounts, KILLS))
    assert with_mounts >= KILLS // 3, log  # measured 15-23 of 24


@pytest.fixture
def small_tmpfs(tmp_path):
    """A tmpfs of 8 MiB: the probe's pre-checks need free space >= its cap (8 MiB here) and memory
    >= twice that; a cold 256-run sweep caches about 30 MiB of images (26-31 MiB measured), so
    the filesystem fills after some images, always, wherever the runs happen to be."""
    base = str(tmp_path / "small")
    os.makedirs(base)
    run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0755", "ext4audit-small", base])
    try:
        yield base
    finally:
        subprocess.run(["umount", "-l", base], check=False)


def test_scratch_filesystem_full_mid_sweep_stops_with_the_reason(tmp_path, small_tmpfs):
    from ext4audit.probe import analysis as plan_mod
    scratch_dir = os.path.join(small_tmpfs, "probe")
    result, stderr = run_probe(tmp_path, make_job(scratch_dir, plan=plan_mod.make_plan(7, 256),
                                                  confirmations=["rename_over_existing"],
                                                  scratch_cap_bytes=8 * MiB))
    sweep = result["sweep"]
    print("scratch full after %d of %d runs: %s" % (sweep["completed"], sweep["planned"], sweep["errors"]))
    assert result["status"] == "partial", (result["reason"], sweep["errors"], stderr[-1000:])
    assert result["reason"] == "sweep stopped by scratch full after %d of 256 runs (%d missing)" % (
        sweep["completed"], 256 - sweep["completed"])
    assert sweep["stopped_by"] == "scratch full", sweep["errors"]
    assert 1 <= sweep["completed"] < sweep["planned"] == 256
    assert len(sweep["errors"]) == 1 and "no space left on the scratch filesystem" in sweep["errors"][0]
    (confirmation,) = result["confirmations"]
    assert confirmation["status"] == "error" and "no space left on the scratch filesystem" in confirmation["reason"]
    assert leftovers(scratch_dir) == NOTHING and not os.path.exists(scratch_dir)
    assert os.listdir(small_tmpfs) == []


def test_scratch_full_through_the_playbook_audit_completes_and_reports_it(loopfs, tmp_path, small_tmpfs):
    target = loopfs.make("replicated", size="1G")
    scratch_dir = os.path.join(small_tmpfs, "probe")
    reports = tmp_path / "reports"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(
        [os.path.join(VENV_BIN, "ansible-playbook"), "playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
         "-e", "ext4_audit_fail_on=critical", "-e", "chopper_probe_poll_s=1",
         "-e", "chopper_probe_scratch_dir=%s" % scratch_dir, "-e", "chopper_probe_scratch_cap_mib=8", "-e", "chopper_probe_keep_cache=false",
         "-e", "chopper_probe_mountpoint=%s" % target["mountpoint"],
         "-e", '{"chopper_probe_confirmations": ["rename_over_existing"]}'],
        cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = proc.stdout.decode(errors="replace")
    assert proc.returncode == 0, out[-6000:]
    assert "verdict: pass" in out
    report = load_json(os.path.join(str(reports), "latest", "hosts", "localhost.json"))
    probe = report["probe"]
    # partial, not ran: what is missing is in the reason, and it confirms nothing
    assert probe["status"] == "partial", probe["status"]
    assert re.match(r"sweep stopped by scratch full after \d+ of \d+ runs \(\d+ missing\)$", probe["reason"]), probe["reason"]
    assert all(finding["confirmation"]["status"] == "not_measured" and "probe partial" in finding["confirmation"]["reason"]
               for finding in report["findings"] if finding.get("confirmation")), report["findings"]
    assert probe["sweep"]["stopped_by"] == "scratch full"
    assert 1 <= probe["sweep"]["runs_completed"] < probe["sweep"]["runs_planned"]
    assert any("no space left on the scratch filesystem" in e for e in probe["errors"]), probe["errors"]
    summary = load_json(os.path.join(str(reports), "latest", "summary.json"))
    assert summary["verdict"] == "pass" and summary["counts"]["hosts_audited"] == 1
    markdown = open(os.path.join(str(reports), "latest", "summary.md")).read()
    assert "stopped by scratch full" in markdown and "no space left on the scratch filesystem" in markdown
    assert leftovers(scratch_dir) == NOTHING and os.listdir(small_tmpfs) == []


HOLDER = r"""
import os, sys, time
target = sys.argv[1]
deadline = time.monotonic() + 120
while time.monotonic() < deadline:  # until this process's cwd is inside a mounted run
    try:
        os.chdir(target)
        if os.stat(".").st_dev != os.stat("..").st_dev:
            print("holding", flush=True)
            time.sleep(600)
        os.chdir("/")
    except OSError:
        pass
"""


def test_a_process_of_the_host_cannot_hold_a_runs_mount(tmp_path):
    """The sweep unmounts each run in the background while the next one plays (two run slots). A
    process that keeps its working directory inside a run's mount point made that umount fail
    (EBUSY) and stopped the sweep while the probe mounted in the host's namespace; its mounts are
    now in a private mount namespace, so such a process only sits in the empty folder underneath:
    the sweep runs to its end and nothing of the probe's is left."""
    from ext4audit.probe import analysis as plan_mod
    scratch_dir = str(tmp_path / "probe")
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, os.path.join(scratch_dir, "mnt", "run1")],
                              stdout=subprocess.PIPE, universal_newlines=True)
    try:
        result, stderr = run_probe(tmp_path, make_job(scratch_dir, plan=plan_mod.make_plan(7, 256)))
    finally:
        holder.kill()
        holder.wait()
    sweep = result["sweep"]
    assert sweep["stopped_by"] is None and sweep["errors"] == [], (sweep, stderr[-1000:])
    assert result["status"] == "ok" and sweep["completed"] == sweep["planned"] == 256
    deadline = time.monotonic() + 10
    while leftovers(scratch_dir) != NOTHING and time.monotonic() < deadline:
        time.sleep(0.1)
    assert leftovers(scratch_dir) == NOTHING and not os.path.exists(scratch_dir)
