"""Bad configuration stops the audit before any host is contacted (issue 27 §4), naming the variable
or file and field: the prepare play's checks and `ext4audit check`. A host that was contacted would
have a facts record; none is written, and no run folder is made."""

import json
import os

import pytest
from conftest import ROOT, ansible_playbook

HOST_READ = "Read ext4 filesystems, superblocks and kernel"
ENV = {"PYTHONPATH": ROOT}  # the playbook's ext4audit commands run this checkout's package


def bad_files(tmp_path):
    fifo = tmp_path / "waivers-fifo.yml"
    os.mkfifo(fifo)
    bad_date = tmp_path / "waivers-date.yml"
    bad_date.write_text("waivers:\n  - rule: EXT4_X\n    reason: r\n    approver: a\n    expires: 2027-13-01\n")
    baseline = tmp_path / "baseline"
    baseline.mkdir()
    (baseline / "summary.json").write_text('{"verdict": "pass", ')
    return {"fifo": str(fifo), "bad_date": str(bad_date), "baseline": str(baseline)}


CASES = [
    (["ext4_audit_run_id=../../x"], "ext4_audit_run_id: '../../x' is not a run id"),
    (["ext4_audit_run_id=a/b"], "ext4_audit_run_id: 'a/b' is not a run id"),
    (["ext4_audit_run_id=latest"], "ext4_audit_run_id: 'latest' is not a run id"),
    (["ext4_audit_gate=notabool"], "ext4_audit_gate"),
    (["chopper_probe_enabled=true", "chopper_probe_runs=abc"], "chopper_probe_runs"),
    (["chopper_probe_enabled=true", "chopper_probe_confirm_scope=typo"], "chopper_probe_confirm_scope"),
    (["chopper_probe_enabled=true", '{"chopper_probe_confirmations": ["rename_over_existin"]}'],
     "chopper_probe_confirmations"),
    (["chopper_probe_enabled=true", "chopper_probe_scratch_cap_mib=-5"], "chopper_probe_scratch_cap_mib (-5)"),
    (["ext4_audit_superblock=maybe"], "ext4_audit_superblock"),
    (["ext4_audit_waivers_file={fifo}"], "{fifo}: not a regular file"),
    (["ext4_audit_waivers_file={bad_date}"], "{bad_date}: waiver #1 (EXT4_X): expires '2027-13-01' is not a date"),
    (["ext4_audit_baseline={baseline}"], "baseline summary {baseline}/summary.json is not valid JSON"),
]


def fill(text, files):
    for name, path in files.items():
        text = text.replace("{%s}" % name, path)
    return text


@pytest.mark.parametrize("extra,message", CASES, ids=[" ".join(c[0]) for c in CASES])
def test_bad_configuration_stops_before_any_host(tmp_path, extra, message):
    files = bad_files(tmp_path)
    reports = tmp_path / "reports"
    args = ["playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports]
    for item in extra:
        args += ["-e", fill(item, files)]
    rc, out = ansible_playbook(*args, env=ENV)
    assert rc != 0, out[-4000:]
    assert fill(message, files) in out, out[-4000:]
    assert HOST_READ not in out, "a host was contacted: " + out[-4000:]
    assert not os.path.exists(reports / "latest") and not list(reports.glob("*/facts/*.json")) if reports.exists() else True
    assert not (tmp_path / "x").exists()


def test_rules_dirs_given_as_a_string_is_a_comma_separated_list(tmp_path):
    """-e ext4_audit_rules_dirs=DIR: the folder, not a list of its characters."""
    rules = tmp_path / "site-rules"
    rules.mkdir()
    (rules / "broken.yml").write_text("rules: [{id: }]\n")
    rc, out = ansible_playbook("playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % (tmp_path / "reports"),
                               "-e", "ext4_audit_rules_dirs=%s" % rules, "--check", env=ENV)
    assert rc != 0 and str(rules / "broken.yml") in out, out[-4000:]
    assert HOST_READ not in out
    assert json.dumps("/") not in out  # no '--site-rules=/' from the string's first character
