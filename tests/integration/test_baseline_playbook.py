"""The nightly diff through the real playbook: two audits of real loop-mounted ext4, the second after
one filesystem was remounted with a risky option, compared with the first as the baseline."""

import json
import os
import re
import shutil
import subprocess

from conftest import ROOT, VENV_BIN, ansible_playbook, load_host_report, load_json, needs_root, run

pytestmark = needs_root

# The probe is tested elsewhere; the write-back cache of loop devices makes nobarrier high.
PROBE_OFF = ("-e", "chopper_probe_enabled=false")


def audit(reports, fstab, run_id, *extra):
    rc, out = ansible_playbook("playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                               "-e", "ext4_audit_fstab_path=%s" % fstab, "-e", "ext4_audit_run_id=%s" % run_id,
                               *(PROBE_OFF + extra))
    return rc, out


def latest(reports):
    return os.path.basename(os.path.realpath(os.path.join(str(reports), "latest")))


def test_nightly_diff_and_fail_on_new(loopfs, tmp_path):
    steady = loopfs.make("steady")
    changing = loopfs.make("changing")
    fstab = tmp_path / "fstab"
    fstab.write_text("# empty: no drift findings\n")
    reports = tmp_path / "reports"

    rc, out = audit(reports, fstab, "run-1")
    first = load_json(str(reports / "run-1" / "summary.json"))
    assert first["baseline"] is None and latest(reports) == "run-1", out

    run(["mount", "-o", "remount,nobarrier", changing["mountpoint"]])
    baseline = str(reports / "latest")  # the nightly way: whatever ran last
    rc, out = audit(reports, fstab, "run-2", "-e", "ext4_audit_baseline=%s" % baseline,
                    "-e", "ext4_audit_fail_on_new=true")
    summary = load_json(str(reports / "run-2" / "summary.json"))
    diff = summary["baseline"]
    assert [(e["host"], e["rule"], e["severity"], e["device"], e["mountpoint"], e["why"]) for e in diff["new"]] == [
        ("localhost", "EXT4_NOBARRIER", "high", changing["device"], changing["mountpoint"], "new")], out
    assert diff["run_id"] == "run-1" and diff["resolved"] == [] and diff["hosts_added"] == diff["hosts_removed"] == []
    assert diff["persisting"] == sum(h["findings"] + h["waived"] for h in first["hosts"])
    assert rc != 0 and summary["verdict"] == "fail", out
    assert summary["reason"].startswith("1 new finding(s) at or above high on 1 host(s), e.g. EXT4_NOBARRIER high")
    assert "since baseline run-1: 1 new, 0 resolved, %d persisting" % diff["persisting"] in out
    assert re.search(r"new: localhost EXT4_NOBARRIER high on %s" % re.escape(changing["mountpoint"]), out), out
    assert latest(reports) == "run-2"
    markdown = open(str(reports / "run-2" / "summary.md")).read()
    assert "### Since baseline run\\-1" in markdown and "**1 new**, 0 resolved" in markdown
    sarif = load_json(str(reports / "run-2" / "report.sarif"))
    states = [(r["ruleId"], loc["logicalLocations"][0]["name"]) for r in sarif["runs"][0]["results"]
              if r["baselineState"] == "new" for loc in r["locations"]]
    assert states == [("EXT4_NOBARRIER", changing["mountpoint"])]
    prom = open(str(reports / "run-2" / "ext4audit.prom")).read()
    assert 'ext4audit_baseline_findings{change="new"} 1.0' in prom

    # The next night nothing changed: the nobarrier finding persists, and fail_on_new passes...
    rc, out = audit(reports, fstab, "run-3", "-e", "ext4_audit_baseline=%s" % baseline,
                    "-e", "ext4_audit_fail_on_new=true")
    third = load_json(str(reports / "run-3" / "summary.json"))
    assert rc == 0 and third["verdict"] == "pass" and third["baseline"]["new"] == [], out
    assert third["baseline"]["run_id"] == "run-2"
    # ...while the plain policy still fails on it.
    rc, out = audit(reports, fstab, "run-4", "-e", "ext4_audit_baseline=%s" % baseline)
    assert rc != 0 and load_json(str(reports / "run-4" / "summary.json"))["verdict"] == "fail", out

    # A corrupt (truncated) baseline: a clear error, exit 2 from the report step, nothing written
    # and `latest` not moved.
    corrupt = tmp_path / "corrupt"
    shutil.copytree(str(reports / "run-4"), str(corrupt))
    text = (corrupt / "summary.json").read_text()
    (corrupt / "summary.json").write_text(text[:len(text) // 3])
    rc, out = audit(reports, fstab, "run-5", "-e", "ext4_audit_baseline=%s" % corrupt)
    # refused before any host is contacted (`ext4audit check --baseline`): no run folder is made
    assert rc != 0 and "baseline summary %s/summary.json is not valid JSON" % corrupt in out, out
    assert latest(reports) == "run-4" and not (reports / "run-5").exists()
    # The report step refuses it as well, writing nothing beside a run's inputs.
    inputs = reports / "inputs"
    os.makedirs(str(inputs))
    for sub in ("facts", "probe"):
        if (reports / "run-4" / sub).exists():
            shutil.copytree(str(reports / "run-4" / sub), str(inputs / sub))
    command = [os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "report", str(inputs), "--baseline", str(corrupt)]
    result = subprocess.run(command, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    assert result.returncode == 2 and result.stderr.startswith("error: baseline summary"), result
    assert set(os.listdir(str(inputs))) <= {"facts", "probe"} and latest(reports) == "run-4"
    # A baseline that is not there stops the play before any host is audited.
    rc, out = audit(reports, fstab, "run-6", "-e", "ext4_audit_baseline=%s" % (tmp_path / "nope"))
    assert rc != 0 and "has no summary.json" in out and not (reports / "run-6").exists(), out
    assert steady["mountpoint"] in json.dumps(load_host_report(str(reports / "run-4" / "hosts" / "localhost.json")))
