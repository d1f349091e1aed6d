"""Verify molecule/default: the audit of this machine found exactly the risks prepare.yml made,
and changed nothing.

The host is this machine (Testinfra's local backend); the reports are read from the scenario's
folder. Runs under `molecule verify`, or by hand after converge: .venv/bin/pytest molecule/default/tests
"""

import json
import os
from pathlib import Path

from ext4audit.report import host_report

ROOT = Path(__file__).resolve().parents[3]
SCENARIO = ROOT / ".cache" / "molecule" / "default"   # prepare: expected.json; converge: reports/

testinfra_hosts = ["local://"]


def load(path):
    with open(path) as handle:
        return json.load(handle)


EXPECTED = load(SCENARIO / "expected.json")
REPORTS = SCENARIO / "reports"
RUNS = sorted(path for path in REPORTS.iterdir() if path.is_dir() and path.name != "latest")  # (not history.sqlite)


def by_mountpoint(report):
    """mount point -> {rule: severity}, from a host report's findings."""
    found = {}
    for finding in report["findings"]:
        found.setdefault(finding["mountpoint"], {})[finding["rule"]] = finding["severity"]
    return found


def latest_report():
    """The host report in full (v2 files refer to the run's shared file and facts record)."""
    return host_report.read(str(REPORTS / "latest" / "hosts" / "localhost.json"))


def test_each_filesystem_got_exactly_its_expected_rules():
    report = latest_report()
    assert report["schema"] == "ext4-fleet-audit/host-report/v1" and report["status"] == "audited"
    found = by_mountpoint(report)
    for mountpoint, filesystem in EXPECTED["filesystems"].items():
        assert found.get(mountpoint, {}) == filesystem["rules"], (filesystem["kind"], report["findings"])


def test_the_report_describes_the_filesystems_as_made():
    filesystems = {fs["mountpoint"]: fs for fs in latest_report()["filesystems"]}
    made = {filesystem["kind"]: mountpoint for mountpoint, filesystem in EXPECTED["filesystems"].items()}
    assert set(EXPECTED["filesystems"]) <= set(filesystems)
    assert filesystems[made["smalljournal"]]["superblock"]["journal_bytes"] == 4 * 1024 * 1024
    assert filesystems[made["inode128"]]["superblock"]["inode_size"] == 128
    assert "nodelalloc" in filesystems[made["nodelalloc"]]["options"]
    assert "data=journal" in filesystems[made["datajournal"]]["options"]
    for mountpoint, filesystem in EXPECTED["filesystems"].items():
        assert filesystems[mountpoint]["device"] == filesystem["device"]


def test_the_gate_passed_under_the_scenario_policy():
    summary = load(REPORTS / "latest" / "summary.json")
    assert summary["verdict"] == "pass", summary["reason"]
    assert summary["policy"]["fail_on"] == "critical"
    assert summary["hosts_not_audited"] == []


def test_every_audit_found_the_same():
    """converge and idempotence (under `molecule test`) each wrote a run folder; `latest` is the last."""
    assert RUNS and os.path.realpath(REPORTS / "latest") == str(RUNS[-1])
    first = by_mountpoint(host_report.read(str(RUNS[0] / "hosts" / "localhost.json")))
    for run in RUNS[1:]:
        again = by_mountpoint(host_report.read(str(run / "hosts" / "localhost.json")))
        for mountpoint in EXPECTED["filesystems"]:
            assert again.get(mountpoint) == first.get(mountpoint), (run.name, mountpoint)


def test_the_audit_changed_nothing(host):
    """Same mount options (mountinfo lines) and same superblocks (`dumpe2fs -h`) as before."""
    mountinfo = host.file("/proc/self/mountinfo").content_string.splitlines()
    assert [line for line in mountinfo if " %s/" % EXPECTED["image_dir"] in line] == EXPECTED["mountinfo"]
    for mountpoint, filesystem in EXPECTED["filesystems"].items():
        now = host.run("env LC_ALL=C dumpe2fs -h %s", filesystem["device"])
        assert now.rc == 0, now.stderr
        assert now.stdout.rstrip("\n") == filesystem["superblock"].rstrip("\n"), mountpoint
