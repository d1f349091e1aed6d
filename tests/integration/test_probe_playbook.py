"""The probe through the real playbook on localhost: a 32-run sweep replicating a loop-mounted
filesystem fills the report's probe section; a probe SIGKILLed mid-sweep is cleaned up by the next run."""

import glob
import json
import os
import random
import re
import signal
import subprocess
import time

import pytest

from conftest import ROOT, VENV_BIN, check_run_against_schemas, load_json, needs_root

pytestmark = needs_root


def playbook_argv(reports, scratch_dir, *extra, playbook="audit.yml"):
    return [os.path.join(VENV_BIN, "ansible-playbook"), "playbooks/" + playbook,
            "-e", "ext4_audit_reports_dir=%s" % reports, "-e", "chopper_probe_scratch_dir=%s" % scratch_dir,
            "-e", "chopper_probe_keep_cache=false",  # nothing may be left behind
            "-e", "ext4_audit_fail_on=critical", "-e", "chopper_probe_poll_s=1"] + list(extra)


def run_playbook(argv):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    proc = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return proc.returncode, proc.stdout.decode(errors="replace")


def latest_host_report(reports):
    return load_json(os.path.join(str(reports), "latest", "hosts", "localhost.json"))


def leftovers(scratch_dir):
    with open("/proc/self/mountinfo") as handle:
        mounts = [line.split()[4] for line in handle if line.split()[4].startswith(scratch_dir)]
    loops = []
    for backing in glob.glob("/sys/block/loop*/loop/backing_file"):
        with open(backing) as handle:
            if handle.read().startswith(scratch_dir):
                loops.append(backing)
    return mounts, loops, os.path.exists(scratch_dir)


def async_status_files():
    """The async jobs' status files in ansible-core's default async directory (the probe's job runs
    as root here)."""
    folder = os.path.expanduser("~/.ansible_async")
    return set(os.listdir(folder)) if os.path.isdir(folder) else set()


@pytest.mark.parametrize("playbook", ["audit.yml", "probe.yml"])
def test_32_run_sweep_fills_the_probe_section(loopfs, tmp_path, playbook):
    target = loopfs.make("probed", size="2G", mkfs_args=["-J", "size=8", "-I", "256"])
    scratch_dir = "/dev/shm/ext4-audit-probe-pb-%d" % os.getpid()
    async_before = async_status_files()
    rc, out = run_playbook(playbook_argv(tmp_path / "reports", scratch_dir, "-e", "chopper_probe_runs=32",
                                         "-e", "chopper_probe_mountpoint=%s" % target["mountpoint"],
                                         "-e", "chopper_probe_repetitions=2", playbook=playbook))
    assert rc == 0, out
    probe = latest_host_report(tmp_path / "reports")["probe"]
    assert probe["status"] == "ran", probe
    assert probe["mountpoint"] == target["mountpoint"]
    # the replica is the audited filesystem's: 8 MiB journal, 256-byte inodes, its options
    assert "size=8" in probe["replica"]["mkfs_args"] and "256" in probe["replica"]["mkfs_args"]
    assert "data=ordered" in probe["replica"]["mount_options"].split(",")
    sweep = probe["sweep"]
    assert sweep["runs_planned"] == 32 and sweep["runs_completed"] == 32
    assert 0 < sweep["dspan"]["p50"] <= sweep["dspan"]["p90"] <= sweep["dspan"]["p99"]
    shares = [entry["s"] for entry in sweep["prioritization"]]
    assert len(shares) >= 10 and shares == sorted(shares, reverse=True), sweep["prioritization"]
    assert all(0 <= s <= 1 for s in shares)
    assert set(sweep["mapping"]["factors"]) >= {"DiskSize", "FreeSpaceLayout", "FileSize", "Fsync"}
    # chopper_probe_allocator is on by default: the four allocator issues, each with a verdict
    assert probe["allocator"]["status"] == "ran", probe["allocator"]
    assert [(i["id"], i["verdict"] in ("present", "absent", "inconclusive")) for i in probe["allocator"]["issues"]] == [
        ("scheduler_dependency", True), ("special_end", True), ("shared_global", True), ("normalization", True)]
    # the default confirm scope (own): the loop filesystem has ext4's defaults, so rename's option set
    # (data=ordered, delalloc, auto_da_alloc) is its own and buffered write's (nodelalloc) is not
    measured = [c for c in probe["confirmations"] if c["status"] == "measured"]
    assert sorted(c["id"] for c in measured) == ["rename_over_existing", "xattr_set"]
    assert all(c["ratio"] > 0 for c in measured)
    assert [(c["status"], c["reason"]) for c in probe["confirmations"] if c["id"] == "buffered_write_fsync"] == [
        ("skipped", "not your configuration: the replica of %s does not use nodelalloc (set "
                    "chopper_probe_confirm_scope: all to measure it)" % target["mountpoint"])]
    assert leftovers(scratch_dir) == ([], [], False)
    assert async_status_files() - async_before == set()  # the follow loop removed the job's status file
    summary = load_json(os.path.join(str(tmp_path / "reports"), "latest", "summary.json"))
    assert "localhost" in str(summary["probe"])
    markdown = open(os.path.join(str(tmp_path / "reports"), "latest", "summary.md")).read()
    assert "rename_over_existing" in markdown
    # the probe's record and plan match their published schemas too (schemas/, ext4audit/model/contract.py)
    checked = check_run_against_schemas(os.path.join(str(tmp_path / "reports"), "latest"))
    assert {"probe-plan.json", "probe-record.json", "host-report.json"} <= set(checked.values()), checked


def test_named_option_set_replaces_the_hosts_options(loopfs, tmp_path):
    """The named set is what the replica mounts, and what the default confirm scope (`own`) judges
    the confirmations by: it has neither rename's delalloc nor buffered write's dioread_nolock."""
    target = loopfs.make("probed", size="1G")
    scratch_dir = "/dev/shm/ext4-audit-probe-pbset-%d" % os.getpid()
    rc, out = run_playbook(playbook_argv(tmp_path / "reports", scratch_dir, "-e", "chopper_probe_runs=8",
                                         "-e", "chopper_probe_mountpoint=%s" % target["mountpoint"],
                                         "-e", '{"chopper_probe_confirmations": ["rename_over_existing", '
                                               '"buffered_write_fsync"], '
                                               '"chopper_probe_mount_options": ["data=ordered", "nodelalloc"]}'))
    assert rc == 0, out
    probe = latest_host_report(tmp_path / "reports")["probe"]
    assert probe["status"] == "ran" and probe["sweep"]["runs_completed"] == 8, probe
    assert probe["replica"]["mount_options"].split(",") == ["data=ordered", "nodelalloc", "noinit_itable"]
    assert any("given by the job" in a for a in probe["replica"]["adjustments"])
    replica = "the replica of %s with the job's mount options" % target["mountpoint"]
    assert [(c["id"], c["status"], c["reason"]) for c in probe["confirmations"]] == [
        ("rename_over_existing", "skipped", "not the job's option set: %s does not use delalloc,auto_da_alloc (set "
                                            "chopper_probe_confirm_scope: all to measure it)" % replica),
        ("buffered_write_fsync", "skipped", "not the job's option set: %s does not use dioread_nolock (set "
                                            "chopper_probe_confirm_scope: all to measure it)" % replica)]
    assert "confirmation buffered_write_fsync skipped: not the job's option set (no dioread_nolock)" in out


def ours(cmdline, scratch_dir):
    """Only the probe this test started: its job names this test's scratch directory."""
    try:
        with open(cmdline[cmdline.index(b"run") + 1]) as handle:
            return json.load(handle).get("scratch_dir") == scratch_dir
    except (OSError, ValueError, IndexError):
        return False


def test_probe_killed_mid_sweep_is_cleaned_up_by_the_next_run(tmp_path):
    scratch_dir = "/dev/shm/ext4-audit-probe-pbkill-%d" % os.getpid()
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    player = subprocess.Popen(playbook_argv(tmp_path / "r1", scratch_dir, "-e", "chopper_probe_runs=256"),
                              cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    victim = None
    for _ in range(600):  # find the probe process the playbook started
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                cmdline = open("/proc/%s/cmdline" % pid, "rb").read().split(b"\0")
            except OSError:
                continue
            if any(arg.endswith(b"ext4_probe.pyz") for arg in cmdline) and b"run" in cmdline and \
                    ours(cmdline, scratch_dir):
                victim = int(pid)
        if victim:
            break
        time.sleep(0.05)
    assert victim, "the probe never started"
    time.sleep(random.Random(3).uniform(0.5, 1.5))
    os.kill(victim, signal.SIGKILL)
    out = player.communicate(timeout=300)[0].decode(errors="replace")
    report = latest_host_report(tmp_path / "r1")
    assert report["probe"]["status"] == "failed", out
    assert os.path.exists(scratch_dir), "a SIGKILLed probe cannot clean up; the next run must"

    rc, out = run_playbook(playbook_argv(tmp_path / "r2", scratch_dir, "-e", "chopper_probe_runs=32",
                                         "-e", '{"chopper_probe_confirmations": []}'))
    assert rc == 0, out
    probe = latest_host_report(tmp_path / "r2")["probe"]
    assert probe["status"] == "ran" and probe["sweep"]["runs_completed"] == 32
    assert leftovers(scratch_dir) == ([], [], False)


def test_two_probes_at_once_one_runs_the_other_is_refused_and_both_reports_say_so(tmp_path):
    """Two playbook runs started together on one host (the same scratch directory, different
    report folders): the probe that gets the lock runs; the other is refused at once
    (chopper_probe_lock_wait_s 0) and its report says so. The sweep is held for 15 s (a plan of
    8,192 runs, some 40 s at this machine's 200 runs/s, cut by its time budget) so the second
    run's probe arrives while the first one runs. (2,048 runs were enough until the runs were
    set up in the background: the sweep then finished them in 13 s, inside its budget.)"""
    scratch_dir = "/dev/shm/ext4-audit-probe-pbtwo-%d" % os.getpid()
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    players = [subprocess.Popen(playbook_argv(tmp_path / name, scratch_dir, "-e", "chopper_probe_runs=8192",
                                              "-e", "chopper_probe_sweep_budget_s=15",
                                              "-e", '{"chopper_probe_confirmations": []}', playbook="probe.yml"),
                                cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
               for name in ("r1", "r2")]
    outs = [player.communicate(timeout=600)[0].decode(errors="replace") for player in players]
    assert [player.returncode for player in players] == [0, 0], outs
    probes = dict((latest_host_report(tmp_path / name)["probe"]["status"], (name, out))
                  for name, out in zip(("r1", "r2"), outs))
    assert sorted(probes) == ["partial", "refused"], outs
    ran = latest_host_report(tmp_path / probes["partial"][0])["probe"]
    assert ran["sweep"]["runs_completed"] > 0 and ran["reason"].startswith("sweep stopped by time budget after "), ran
    refused = latest_host_report(tmp_path / probes["refused"][0])["probe"]
    assert re.match(r"another probe is running on this host \(pid \d+\); it holds %s$" % re.escape(scratch_dir),
                    refused["reason"]), refused
    assert refused["sweep"] is None and refused["errors"] == []
    summary = load_json(os.path.join(str(tmp_path / probes["refused"][0]), "latest", "summary.json"))
    assert summary["probe"]["failed"] == [{"host": "localhost", "status": "refused", "reason": refused["reason"]}]
    assert leftovers(scratch_dir) == ([], [], False)


def test_probe_that_stops_on_an_error_is_recorded_failed_not_ran(tmp_path):
    """The probe writes a result when it stops on an error (exit 1); the record's status comes
    from the exit code, not from the result file being there."""
    scratch_dir = "/dev/shm/ext4-audit-probe-pberr-%d" % os.getpid()
    rc, out = run_playbook(playbook_argv(tmp_path / "reports", scratch_dir, "-e", "chopper_probe_runs=8",
                                         "-e", "chopper_probe_scratch_cap_mib=100000000", playbook="probe.yml"))
    assert rc == 0, out
    probe = latest_host_report(tmp_path / "reports")["probe"]
    assert probe["status"] == "failed", probe
    assert probe["reason"].startswith("not enough free space in /dev/shm"), probe["reason"]
    summary = load_json(os.path.join(str(tmp_path / "reports"), "latest", "summary.json"))
    assert [p["status"] for p in summary["probe"]["failed"]] == ["failed"]
    assert leftovers(scratch_dir) == ([], [], False)
