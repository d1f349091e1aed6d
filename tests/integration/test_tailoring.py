"""Tailoring without forking the catalog, through the real audit playbook on a loop-mounted ext4
with 128-byte inodes (EXT4_INODE_128 low, EXT4_AUTO_DA_ALLOC_RENAME info, EXT4_ERRORS_CONTINUE info):

- per-host policy in ordinary group_vars: fail_on, a severity override with its reason, rules
  skipped and selected by id, kind or tag; the fleet verdict is computed host by host, and every
  report shows each host's policy and its skipped rules;
- site rule folders (ext4_audit_rules_dirs): a new rule and a replaced shipped rule;
- mistakes in either stop the run before any host is contacted, naming the file or host, the
  rule and the field.

Three inventory hosts audit this one machine over local connections, each in its own group."""

import glob
import os
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, VENV_BIN, ansible_playbook, free_port, load_json, needs_root
from ext4audit.formats.markdown import md

pytestmark = needs_root

OVERRIDE_REASON = "databases must remount read-only on errors"
GROUP_VARS = {
    "all": "ext4_audit_become: false\nchopper_probe_enabled: false\n",
    "databases": ("ext4_audit_fail_on: low\n"
                  "ext4_audit_severity_overrides:\n"
                  "  EXT4_ERRORS_CONTINUE: {severity: medium, reason: %s}\n" % OVERRIDE_REASON),
    "web": "ext4_audit_rules_skip: [performance, EXT4_ERRORS_CONTINUE]\n",
    "batch": "ext4_audit_rules_select: [EXT4_INODE_128]\n",
}

SITE_RULE = """
  - id: SITE_TAILORED_MOUNT
    title: A mount under a tailored folder
    scope: filesystem
    kind: operability
    severity: medium
    when: {fact: fs.mountpoint, contains: tailored}
    message: "{mountpoint} is a tailored mount"
    rationale: The site wants to know.
    remediation: {steps: Move it., cost: None.}
    references: []
    tags: [site]
"""
SITE_OVERRIDE = """
  - id: EXT4_INODE_128
    overrides: true
    title: 128-byte inodes (site wording)
    scope: filesystem
    kind: performance
    severity: medium
    when: {fact: sb.inode_size, lt: 256}
    message: "{mountpoint}: {inode_size}-byte inodes; the site wants 256"
    rationale: The site's restores need 256-byte inodes.
    remediation: {steps: Rebuild with -I 256., cost: A rebuild.}
    references: []
    tags: [site]
"""


def write_inventory(folder, hosts, group_vars):
    """hosts: name -> group; every host is this machine over a local connection, or, with
    unreachable=True in group_vars' place, a port nothing listens on."""
    os.makedirs(os.path.join(folder, "group_vars"))
    lines = ["all:", "  children:"]
    for name, group in hosts.items():
        lines += ["    %s:" % group, "      hosts:", "        %s:" % name,
                  "          ansible_connection: local",
                  "          ansible_python_interpreter: \"{{ ansible_playbook_python }}\""]
    with open(os.path.join(folder, "hosts.yml"), "w") as handle:
        handle.write("\n".join(lines) + "\n")
    for group, text in group_vars.items():
        with open(os.path.join(folder, "group_vars", group + ".yml"), "w") as handle:
            handle.write(text)
    return os.path.join(folder, "hosts.yml")


def write_site_rules(folder, *rules):
    os.makedirs(folder)
    with open(os.path.join(folder, "site.yml"), "w") as handle:
        handle.write("schema: ext4-fleet-audit/rules/v1\nrules:" + "".join(rules))
    return folder


@pytest.fixture
def tailored(loopfs):
    return loopfs.make("inode128", mkfs_args=["-I", "128"], mountpoint=os.path.join(loopfs.base, "mnt", "tailored"))


def audit(tmp_path, inventory, *extra):
    reports = tmp_path / "reports"
    # PYTHONPATH: the venv's ext4audit command imports this checkout's package (in a worktree the
    # venv's own is an editable install of another checkout)
    rc, out = ansible_playbook("-i", inventory, "playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                               "-e", "ext4_audit_fstab_path=/dev/null", *extra, env={"PYTHONPATH": ROOT})
    runs = sorted(p for p in glob.glob(str(reports / "*")) if os.path.isdir(p) and not p.endswith("latest"))
    return rc, out, runs


def on(report, mountpoint):
    return dict((f["rule"], f) for f in report["findings"] if f["mountpoint"] == mountpoint)


def gate(run_dir, *args):
    return subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "gate", run_dir] + list(args),
                          cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)


def test_group_policies_judge_each_host_by_its_own(tailored, tmp_path):
    inventory = write_inventory(str(tmp_path / "inventory"), {"db-1": "databases", "web-1": "web", "batch-1": "batch"},
                                GROUP_VARS)
    rc, out, runs = audit(tmp_path, inventory)
    assert rc == 2 and "verdict: fail" in out, out  # db-1 fails at low; the others pass at high
    run_dir = runs[0]
    mount = tailored["mountpoint"]
    db, web, batch = (load_json(os.path.join(run_dir, "hosts", h + ".json")) for h in ("db-1", "web-1", "batch-1"))

    # databases: fail_on low, and this site's severity for EXT4_ERRORS_CONTINUE with its reason
    assert db["policy"]["fail_on"] == "low" and db["skipped"] == []
    found = on(db, mount)
    assert found["EXT4_INODE_128"]["severity"] == "low"
    assert found["EXT4_ERRORS_CONTINUE"]["severity"] == "medium"
    assert found["EXT4_ERRORS_CONTINUE"]["severity_override"] == {"from": "info", "reason": OVERRIDE_REASON}
    # web: every performance rule and one rule by id skipped, and listed as skipped with why
    assert web["policy"]["fail_on"] == "high" and on(web, mount) == {}
    skipped = dict((s["rule"], s["reason"]) for s in web["skipped"])
    assert skipped["EXT4_INODE_128"] == skipped["EXT4_AUTO_DA_ALLOC_RENAME"] == "ext4_audit_rules_skip: performance"
    assert skipped["EXT4_ERRORS_CONTINUE"] == "ext4_audit_rules_skip: EXT4_ERRORS_CONTINUE"
    assert not any(f["rule"] in skipped for f in web["findings"] + web["undetermined"] + web["passed"])
    # batch: one rule selected, every other one listed as not selected
    assert set(f["rule"] for f in batch["findings"] + batch["undetermined"] + batch["passed"]) == {"EXT4_INODE_128"}
    assert len(batch["skipped"]) == _catalog_size() - 1
    assert set(s["reason"] for s in batch["skipped"]) == {"not selected by ext4_audit_rules_select"}

    # The verdict host by host: the same low finding fails db-1 (low) and not batch-1 (high).
    summary = load_json(os.path.join(run_dir, "summary.json"))
    rows = dict((row["host"], row) for row in summary["hosts"])
    assert [rows[h]["fail_on"] for h in ("db-1", "web-1", "batch-1")] == ["low", "high", "high"]
    assert rows["db-1"]["failing"] >= 2 and rows["batch-1"]["failing"] == 0, rows
    assert summary["verdict"] == "fail" and "on db-1" in summary["reason"], summary["reason"]

    # Every report shows the policy: JUnit (skipped cases, per-host fail_on), Markdown, HTML.
    suite = ET.parse(os.path.join(run_dir, "junit.xml")).find("testsuite[@name='EXT4_INODE_128']")
    skipped = suite.find("testcase[@name='EXT4_INODE_128 skipped by policy: ext4_audit_rules_skip: performance']/skipped")
    assert "Hosts (1): web-1." in skipped.text
    assert [f.text.split("Hosts (", 1)[1] for f in suite.findall("testcase/failure[@type='low']")] == [
        "1): db-1 [%s].\nEach host's findings: hosts/<host>.json in the run folder." % mount]
    below = [c for c in suite.findall("testcase") if "below fail_on=high" in c.get("name")]
    assert len(below) == 1 and "Hosts (1): batch-1 [%s]." % mount in below[0].find("system-out").text
    markdown = open(os.path.join(run_dir, "summary.md")).read()
    for text in ("- policy: " + md("fails at low or above (ext4_audit_fail_on)"),
                 "- policy: " + md("severity of EXT4_ERRORS_CONTINUE set to medium: " + OVERRIDE_REASON),
                 "- policy: " + md("skipped (ext4_audit_rules_skip: performance): EXT4_AUTO_DA_ALLOC_RENAME, "),
                 "(site severity, info in the catalog: %s)" % md(OVERRIDE_REASON)):
        assert text in markdown, (text, markdown)
    assert "- policy: " + md("skipped (ext4_audit_rules_skip: EXT4_ERRORS_CONTINUE): EXT4_ERRORS_CONTINUE") \
        in markdown.splitlines()
    html = open(os.path.join(run_dir, "report.html")).read()
    for text in ("1 host(s) by their own fail_on", "<li>fails at low or above (ext4_audit_fail_on)</li>",
                 "<li>skipped (ext4_audit_rules_skip: EXT4_ERRORS_CONTINUE): EXT4_ERRORS_CONTINUE</li>",
                 "Severity set by this site (info in the catalog): " + OVERRIDE_REASON):
        assert text in html, text

    # The gate re-reads the folder with each host's own policy, unless --fail-on replaces them all.
    offline = gate(run_dir)
    assert offline.returncode == 1 and "on db-1" in offline.stdout, offline.stdout
    assert gate(run_dir, "--fail-on", "critical").returncode == 0


def _catalog_size():
    return int(subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "rules"], cwd=ROOT,
                              stdout=subprocess.PIPE, universal_newlines=True, check=True).stdout.count("\n| `"))


def test_site_rules_add_and_replace_rules(tailored, tmp_path):
    site = write_site_rules(str(tmp_path / "site"), SITE_RULE, SITE_OVERRIDE)
    inventory = write_inventory(str(tmp_path / "inventory"), {"db-1": "databases"}, {"all": GROUP_VARS["all"]})
    rc, out, runs = audit(tmp_path, inventory, "-e", '{"ext4_audit_rules_dirs": ["%s"], "ext4_audit_fail_on": "medium"}'
                          % site)
    assert rc == 2 and "verdict: fail" in out, out
    found = on(load_json(os.path.join(runs[0], "hosts", "db-1.json")), tailored["mountpoint"])
    assert found["SITE_TAILORED_MOUNT"]["severity"] == "medium"
    assert found["SITE_TAILORED_MOUNT"]["message"] == "%s is a tailored mount" % tailored["mountpoint"]
    assert found["EXT4_INODE_128"]["severity"] == "medium"
    assert found["EXT4_INODE_128"]["title"] == "128-byte inodes (site wording)"
    assert "the site wants 256" in found["EXT4_INODE_128"]["message"]
    # gate re-reads waivers against the catalog: a waiver for a site rule needs the site rules too
    waivers = tmp_path / "waivers.yml"
    waivers.write_text("waivers:\n  - rule: SITE_TAILORED_MOUNT\n    justification: test\n    approver: test\n"
                       "    expires: 2099-01-01\n")
    assert gate(runs[0], "--waivers", str(waivers)).returncode == 2
    assert gate(runs[0], "--waivers", str(waivers), "--site-rules", site).returncode == 1  # EXT4_INODE_128 medium


def unreachable_inventory(folder, group_vars):
    """One host on a port nothing listens on: had its facts been read, it would be unreachable."""
    os.makedirs(os.path.join(folder, "group_vars"))
    with open(os.path.join(folder, "hosts.yml"), "w") as handle:
        handle.write("all:\n  children:\n    web:\n      hosts:\n        fleet-host:\n"
                     "          ansible_host: 127.0.0.1\n          ansible_port: %d\n" % free_port())
    with open(os.path.join(folder, "group_vars", "web.yml"), "w") as handle:
        handle.write(group_vars)
    return os.path.join(folder, "hosts.yml")


MISTAKES = [
    ("clash", [SITE_OVERRIDE.replace("    overrides: true\n", "")], "",
     "site.yml: rule EXT4_INODE_128: a shipped rule has this id; rename the rule, or set overrides: true"),
    ("overrides-nothing", [SITE_OVERRIDE.replace("EXT4_INODE_128", "EXT4_INODE_129")], "",
     "site.yml: rule EXT4_INODE_129: overrides is set but no shipped rule has this id"),
    ("fact", [SITE_RULE.replace("fs.mountpoint", "fs.mountpont")], "",
     "site.yml: rule SITE_TAILORED_MOUNT: fact 'fs.mountpont' is not a fact a filesystem rule can read"),
    ("skip-typo", [], "ext4_audit_rules_skip: [perfomance]\n",
     "host fleet-host: ext4_audit_rules_skip: 'perfomance' is not a rule id, kind or tag of the catalog"),
    ("select-site-tag-without-site-rules", [], "ext4_audit_rules_select: [site]\n",
     "host fleet-host: ext4_audit_rules_select: 'site' is not a rule id, kind or tag of the catalog"),
    ("no-reason", [], "ext4_audit_severity_overrides: {EXT4_INODE_128: {severity: high, reason: ''}}\n",
     "host fleet-host: ext4_audit_severity_overrides.EXT4_INODE_128: reason is required"),
    # the argument spec check (before the tailoring check) catches it, naming the host in its item
    ("fail-on", [], "ext4_audit_fail_on: hihg\n",
     "item fleet-host): Validation of arguments failed: value of ext4_audit_fail_on must be one of: info, low, "
     "medium, high, critical, got: hihg"),
]


@pytest.mark.parametrize("case", MISTAKES, ids=[m[0] for m in MISTAKES])
def test_a_mistake_stops_the_run_before_any_host_is_contacted(tmp_path, case):
    name, rules, group_vars, message = case
    inventory = unreachable_inventory(str(tmp_path / "inventory"), "ext4_audit_become: false\n" + group_vars)
    extra = ()
    if rules:
        extra = ("-e", '{"ext4_audit_rules_dirs": ["%s"]}' % write_site_rules(str(tmp_path / "site"), *rules))
    rc, out, runs = audit(tmp_path, inventory, "-e", "chopper_probe_enabled=false", *extra)
    assert rc == 2, out
    assert message in " ".join(out.replace("''", "'").split()), out  # the YAML callback folds and quotes it
    assert "UNREACHABLE" not in out and "Read ext4 filesystems" not in out and "Traceback" not in out, out
    assert all(not glob.glob(os.path.join(run, "facts", "*")) for run in runs)
