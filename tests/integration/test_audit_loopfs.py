"""The real audit (ansible-playbook playbooks/audit.yml) against real loop-mounted ext4 filesystems."""

import glob
import os
import re
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, VENV_BIN, ansible_playbook, check_run_against_schemas, load_json, needs_root, run

pytestmark = needs_root

# Each filesystem and exactly the rules it must get on this machine's kernel (6.x, 4 KiB pages).
# Every one carries errors=continue, which mke2fs writes into the superblock by default.
CASES = {
    "clean": dict(kwargs={}, rules={"EXT4_AUTO_DA_ALLOC_RENAME": "info", "EXT4_ERRORS_CONTINUE": "info"}),
    "nodelalloc": dict(kwargs={"mount_options": "nodelalloc"},
                       # this kernel (>= 5.6.13) ignores dioread_nolock without delalloc: no finding
                       rules={"EXT4_ERRORS_CONTINUE": "info"}),
    "smalljournal": dict(kwargs={"size": "2G", "mkfs_args": ["-J", "size=4"]},
                         rules={"EXT4_SMALL_JOURNAL": "medium", "EXT4_AUTO_DA_ALLOC_RENAME": "info",
                                "EXT4_ERRORS_CONTINUE": "info"}),
    "inode128": dict(kwargs={"mkfs_args": ["-I", "128"]},
                     rules={"EXT4_INODE_128": "low", "EXT4_AUTO_DA_ALLOC_RENAME": "info",
                            "EXT4_ERRORS_CONTINUE": "info"}),
    "nobarrier-sb": dict(kwargs={"tune2fs_args": ["-o", "nobarrier"]},
                         rules={"EXT4_NOBARRIER": "high", "EXT4_AUTO_DA_ALLOC_RENAME": "info",
                                "EXT4_ERRORS_CONTINUE": "info"}),
    "datajournal": dict(kwargs={"mount_options": "data=journal"},
                        rules={"EXT4_DATA_JOURNAL": "low", "EXT4_ERRORS_CONTINUE": "info"}),
    "with space": dict(kwargs={}, rules={"EXT4_AUTO_DA_ALLOC_RENAME": "info", "EXT4_ERRORS_CONTINUE": "info",
                                         "EXT4_FSTAB_DRIFT": "low"}),
    # Host strings are data: markup, quotes, a command substitution and a newline in one name.
    "odd <script>'$(id)`\nname": dict(kwargs={}, rules={"EXT4_AUTO_DA_ALLOC_RENAME": "info",
                                                        "EXT4_ERRORS_CONTINUE": "info"}),
}


# The static rules alone (tests/integration/test_probe_playbook.py covers the probe's part).
PROBE_OFF = ("-e", "chopper_probe_enabled=false")


def mount_snapshot():
    with open("/proc/self/mountinfo") as handle:
        return sorted(" ".join(line.split()[2:]) for line in handle)


@pytest.fixture
def fleet(loopfs, tmp_path):
    made = {}
    for name, case in CASES.items():
        made[name] = loopfs.make("fs%d" % len(made), mountpoint=os.path.join(loopfs.base, "mnt", name),
                                 **case["kwargs"])
    fstab = tmp_path / "fstab"
    # fstab asks for errors=remount-ro on the space-named mount (escaped as fstab requires); it is
    # mounted without it, so that is drift. The clean one's fstab line matches what is in effect.
    fstab.write_text("# test fstab\n%s %s ext4 defaults,errors=remount-ro 0 2\n%s %s ext4 defaults 0 2\n" % (
        made["with space"]["device"], made["with space"]["mountpoint"].replace(" ", "\\040"),
        made["clean"]["device"], made["clean"]["mountpoint"]))
    return made, str(fstab)


def audit(tmp_path, fstab, *extra):
    reports = tmp_path / "reports"
    rc, out = ansible_playbook("playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                               "-e", "ext4_audit_fstab_path=%s" % fstab, *(extra or PROBE_OFF))
    runs = sorted(p for p in glob.glob(str(reports / "*")) if os.path.isdir(p) and not p.endswith("latest"))
    return rc, out, reports, runs


def by_mountpoint(report):
    result = {}
    for finding in report["findings"]:
        result.setdefault(finding["mountpoint"], {})[finding["rule"]] = finding["severity"]
    return result


def test_audit_finds_exactly_the_expected_rules(fleet, tmp_path):
    made, fstab = fleet
    before = mount_snapshot()
    sb_before = dict((n, run(["dumpe2fs", "-h", m["device"]], env=dict(os.environ, LC_ALL="C"))) for n, m in made.items())

    rc, out, reports, runs = audit(tmp_path, fstab)

    assert rc != 0, "nobarrier on a write-back cache and a 4 MiB journal are high: the gate must fail\n" + out
    assert "verdict: fail" in out
    assert len(runs) == 1
    assert os.path.realpath(str(reports / "latest")) == os.path.realpath(runs[0])
    report = load_json(os.path.join(runs[0], "hosts", "localhost.json"))
    assert report["schema"] == "ext4-fleet-audit/host-report/v1"
    found = by_mountpoint(report)
    for name, case in CASES.items():
        assert found.get(made[name]["mountpoint"], {}) == case["rules"], (name, report["findings"])

    filesystems = dict((fs["mountpoint"], fs) for fs in report["filesystems"])
    spaced = filesystems[made["with space"]["mountpoint"]]
    assert spaced["fstab"]["options"] == ["defaults", "errors=remount-ro"]
    assert spaced["fstab_drift"] == [{"option": "errors=remount-ro", "wanted": "remount-ro", "effective": "continue"}]
    assert filesystems[made["clean"]["mountpoint"]]["fstab_drift"] == []
    small = filesystems[made["smalljournal"]["mountpoint"]]["superblock"]
    assert small["journal_bytes"] == 4 * 1024 * 1024 and small["block_count"] == 524288
    assert filesystems[made["inode128"]["mountpoint"]]["superblock"]["inode_size"] == 128
    nobarrier = filesystems[made["nobarrier-sb"]["mountpoint"]]
    assert "nobarrier" in nobarrier["superblock"]["default_mount_options"]
    assert "nobarrier" in nobarrier["options"] and "nobarrier" not in nobarrier["super_options"]
    assert filesystems[made["datajournal"]["mountpoint"]]["jbd2"]["max_transaction_blocks"] > 0

    summary = load_json(os.path.join(runs[0], "summary.json"))
    assert summary["verdict"] == "fail"
    assert summary["counts"]["by_rule"]["EXT4_NOBARRIER"] == 1
    junit = open(os.path.join(runs[0], "junit.xml")).read()
    failure = ET.fromstring(junit.encode()).find("testsuite[@name='EXT4_NOBARRIER']/testcase/failure")
    assert "Hosts (1): localhost [%s]." % made["nobarrier-sb"]["mountpoint"] in failure.text
    assert "<failure" in junit and "Remediation:" in junit
    markdown = open(os.path.join(runs[0], "summary.md")).read()
    assert markdown.startswith("## ext4 fleet audit: FAIL")
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown and "\\$\\(id\\)" in markdown
    assert "<script>" not in junit

    # Every JSON file of the run matches its published schema (schemas/, ext4audit/model/contract.py).
    checked = check_run_against_schemas(runs[0])
    assert set(checked.values()) == {"summary.json", "findings-index.json", "host-report.json", "facts-record.json",
                                     "play-hosts.json"}, checked

    # The audit changed nothing: same mounts, same superblocks.
    assert mount_snapshot() == before
    for name, mounted in made.items():
        assert run(["dumpe2fs", "-h", mounted["device"]], env=dict(os.environ, LC_ALL="C")) == sb_before[name], name

    # The gate re-evaluates the folder offline with other policies.
    gate = [os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "gate", str(reports / "latest")]
    assert subprocess.run(gate, cwd=ROOT).returncode == 1
    assert subprocess.run(gate + ["--fail-on", "critical"], cwd=ROOT).returncode == 0


def test_check_mode_changes_nothing(fleet, tmp_path):
    made, fstab = fleet
    before = mount_snapshot()
    rc, out, reports, runs = audit(tmp_path, fstab, "--check", "-e", "ext4_audit_fail_on=critical")
    assert rc == 0, out
    # the probe is enabled in this inventory: under --check it says why it does not run
    assert "chopper_probe: not run in check mode" in out
    recap = re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)", out, re.M)
    assert recap and all(changed == "0" for _, changed in recap), out
    assert mount_snapshot() == before
    report = load_json(os.path.join(runs[0], "hosts", "localhost.json"))
    assert by_mountpoint(report)[made["smalljournal"]["mountpoint"]]["EXT4_SMALL_JOURNAL"] == "medium"
    assert report["probe"]["status"] == "skipped" and report["probe"]["reason"] == "check mode"
