"""Waivers, report files, escaping and the gate's exit codes (the CLI run as a real process)."""

import datetime
import json
import os
import stat
import subprocess
import xml.etree.ElementTree as ET

import pytest

from conftest import ROOT, VENV_BIN, fixture_text
from ext4audit.report import reports
from ext4audit.rules import waivers
from test_rules import facts, with_options

NOW = datetime.datetime(2026, 11, 21, 12, 0, tzinfo=datetime.timezone.utc)
HOSTILE = "/srv/<script>alert(1)</script> | `$(rm -rf /)` *x*\n[y](z)\x01"


def waiver(**overrides):
    entry = {"rule": "EXT4_DIOREAD_NOLOCK_NODELALLOC", "justification": "TiKV needs nodelalloc",
             "approver": "storage-team", "expires": "2027-01-01"}
    entry.update(overrides)
    return entry


def finding(rule="EXT4_DIOREAD_NOLOCK_NODELALLOC", mountpoint="/data"):
    return {"rule": rule, "mountpoint": mountpoint, "waived": False, "waiver": None}


# ------------------------------------------------------------------ waivers
def test_waiver_scopes():
    parsed = waivers.parse({"waivers": [waiver(hosts=["db-1"]), waiver(groups=["tikv"], mountpoints=["/data*"]),
                                        waiver(rule="EXT4_ONLINE_DISCARD")]})
    host_level, group_level, fleet_level = parsed
    assert waivers.matches(host_level, "db-1", [], finding())
    assert not waivers.matches(host_level, "db-2", ["tikv"], finding())
    assert waivers.matches(group_level, "db-2", ["tikv"], finding(mountpoint="/data2"))
    assert not waivers.matches(group_level, "db-2", ["tikv"], finding(mountpoint="/srv"))
    assert waivers.matches(fleet_level, "anything", [], finding("EXT4_ONLINE_DISCARD", "/"))
    assert not waivers.matches(fleet_level, "anything", [], finding())


def test_waiver_expiry_is_utc_midnight():
    parsed = waivers.parse({"waivers": [waiver(expires="2026-11-22")]})
    items = [finding()]
    assert waivers.apply(items, parsed, "h", [], NOW) == []
    assert items[0]["waived"] and items[0]["waiver"]["status"] == "active"
    items = [finding()]
    expired = waivers.apply(items, parsed, "h", [], datetime.datetime(2026, 11, 22, 0, 0, tzinfo=datetime.timezone.utc))
    assert not items[0]["waived"] and items[0]["waiver"]["status"] == "expired"
    assert expired == [{"rule": "EXT4_DIOREAD_NOLOCK_NODELALLOC", "justification": "TiKV needs nodelalloc",
                        "approver": "storage-team", "expires": "2026-11-22T00:00:00Z"}]


@pytest.mark.parametrize("entry, message", [
    (waiver(justification=""), "has no justification"),
    (waiver(justification=None), "has no justification"),
    (dict((k, v) for k, v in waiver().items() if k != "approver"), "has no approver"),
    (waiver(expires="next week"), "is not a date"),
    (waiver(rule="NO_SUCH_RULE"), "unknown rule"),
    (waiver(hosts="db-1"), "must be a list"),
    # An old year compared as text ("999-01-01..." > "2026-...") made an expired waiver active.
    (waiver(expires=datetime.date(999, 1, 1)), r"waiver #1 \(EXT4_DIOREAD_NOLOCK_NODELALLOC\): expires 0999-01-01 "
                                                r"is not a year from 2000 to 2100"),
    (waiver(expires="0999-01-01"), "expires 0999-01-01 is not a year from 2000 to 2100"),
    (waiver(expires=datetime.date(2101, 1, 1)), "expires 2101-01-01 is not a year from 2000 to 2100"),
    # Values of the wrong type were turned into text ("{'a': 1}", "['1', 'None']").
    (waiver(justification={"a": 1}), r"\(EXT4_DIOREAD_NOLOCK_NODELALLOC\): justification must be text, got \{'a': 1\}"),
    (waiver(approver=[1, 2]), r"approver must be text, got \[1, 2\]"),
    (waiver(mountpoints=[1, None]), r"mountpoints must be a list of names \(quote numbers\), got \[1, None\]"),
    (waiver(hosts=[7]), r"hosts must be a list of names"),
    (waiver(groups=[""]), r"groups must be a list of names"),
    # A misspelt scope would have made a host-level waiver fleet-wide.
    (waiver(host=["db-1"]), "unknown field host"),
])
def test_invalid_waivers_are_errors(entry, message):
    with pytest.raises(waivers.WaiverError, match=message):
        waivers.parse({"waivers": [entry]}, known_rules={"EXT4_DIOREAD_NOLOCK_NODELALLOC"})


def test_waiver_file_missing_is_empty_and_garbage_is_an_error(tmp_path):
    assert waivers.load(str(tmp_path / "nope.yml")) == []
    bad = tmp_path / "waivers.yml"
    bad.write_text("waivers: [\n")
    with pytest.raises(waivers.WaiverError, match="cannot read waiver file"):
        waivers.load(str(bad))


# ------------------------------------------------------------------ a run folder, end to end
def write_run(run_dir, records):
    os.makedirs(os.path.join(run_dir, "facts"))
    for index, record in enumerate(records):
        with open(os.path.join(run_dir, "facts", "%d.json" % index), "w") as handle:
            json.dump(record, handle)


def cli(*args):
    result = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit"] + list(args), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def hostile_facts():
    tree = facts(options=with_options("nobarrier"), queue={"write_cache": "write back"})
    tree["schema"] = "ext4-fleet-audit/facts/v1"
    tree["errors"] = [{"where": "filesystem " + HOSTILE, "reason": "dumpe2fs said <b>no</b>"}]
    tree["filesystems"][0]["mountpoint"] = HOSTILE
    return tree


@pytest.fixture
def run_dir(tmp_path):
    path = str(tmp_path / "reports" / "run-1")
    write_run(path, [
        {"host": "db-1", "groups": ["tikv"], "status": "audited", "facts": hostile_facts()},
        {"host": "web/<2>", "groups": [], "status": "unreachable", "reason": "ssh: connect timed out"},
    ])
    return path


def test_report_files_verdicts_and_escaping(run_dir):
    rc, out, err = cli("report", run_dir)
    assert rc == 2, (out, err)  # a host was unreachable: incomplete outranks fail
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    assert summary["verdict"] == "incomplete"
    assert summary["hosts_not_audited"] == [{"host": "web/<2>", "status": "unreachable", "reason": "ssh: connect timed out"}]
    assert "1 finding(s) at or above high" in summary["reason"]
    assert os.path.realpath(os.path.join(run_dir, "..", "latest")) == os.path.realpath(run_dir)
    host = json.load(open(os.path.join(run_dir, "hosts", "db-1.json")))
    assert host["findings"][0]["mountpoint"] == HOSTILE  # data kept exactly in JSON
    assert os.path.exists(os.path.join(run_dir, "hosts", "web%2F%3C2%3E.json"))

    markdown = open(os.path.join(run_dir, "summary.md")).read()
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown and "<b>" not in markdown
    assert "\\`\\$\\(rm" in markdown and "\\|" in markdown
    junit_text = open(os.path.join(run_dir, "junit.xml")).read()
    tree = ET.fromstring(junit_text.encode())  # well-formed despite the control character
    failure = tree.find("testsuite[@name='EXT4_NOBARRIER']/testcase/failure")
    assert "Hosts (1): db-1 [%s]." % HOSTILE.replace("\x01", "\ufffd") in failure.text
    assert tree.find("testsuite[@name='audit']/testcase[@name='unreachable']/error").text == \
        "web/<2>: ssh: connect timed out"
    assert "\x01" not in junit_text and "<script>" not in junit_text

    # Policies: unreachable not counted -> fail (1); and with fail_on critical -> pass (0).
    assert cli("gate", run_dir, "--unreachable-incomplete", "false")[0] == 1
    assert cli("gate", run_dir, "--unreachable-incomplete", "false", "--fail-on", "critical")[0] == 0


@pytest.mark.parametrize("umask, mode", [(0o022, 0o644), (0o077, 0o600)])
def test_report_files_get_the_mode_the_umask_gives(run_dir, umask, mode):
    """ext4audit.prom is read by node_exporter's textfile collector, another user: every file of
    the report is made as open() makes one (0666 less the umask), none private to its writer."""
    before = os.umask(umask)
    try:
        rc, out, err = cli("report", run_dir)
    finally:
        os.umask(before)
    assert rc == 2, (out, err)
    made = [os.path.join(base, name) for base, _, names in os.walk(run_dir) if os.path.basename(base) != "facts"
            for name in names]
    modes = dict((os.path.relpath(path, run_dir), oct(stat.S_IMODE(os.stat(path).st_mode))) for path in made)
    # summary.json, 6 formats, 2 hosts, the findings index, report.html's details file
    assert len(made) == 11 and set(modes.values()) == {oct(mode)}, modes


def test_gate_applies_a_new_waiver_file(run_dir, tmp_path):
    cli("report", run_dir)
    path = tmp_path / "waivers.yml"
    path.write_text("waivers:\n  - rule: EXT4_NOBARRIER\n    hosts: [db-1]\n    justification: battery-backed cache\n"
                    "    approver: storage\n    expires: 2099-01-01\n")
    assert cli("gate", run_dir, "--unreachable-incomplete", "false", "--waivers", str(path))[0] == 0
    path.write_text(path.read_text().replace("2099-01-01", "2001-01-01"))
    rc, out, err = cli("gate", run_dir, "--unreachable-incomplete", "false", "--waivers", str(path), "--table")
    assert rc == 1 and "verdict: fail" in out


def test_report_with_invalid_waivers_is_an_error(run_dir, tmp_path):
    path = tmp_path / "waivers.yml"
    path.write_text("waivers:\n  - rule: EXT4_NOBARRIER\n    approver: x\n    expires: 2099-01-01\n")
    rc, out, err = cli("report", run_dir, "--waivers", str(path))
    assert rc == 2 and "has no justification" in err
    assert not os.path.exists(os.path.join(run_dir, "summary.json"))


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not valid JSON"),
    ('{"schema": "something/else"}', "is not a ext4-fleet-audit/host-report/v1 document"),
])
def test_gate_on_corrupt_reports_exits_2(run_dir, content, message):
    assert cli("report", run_dir)[0] == 2
    with open(os.path.join(run_dir, "hosts", "db-1.json"), "w") as handle:
        handle.write(content)
    rc, out, err = cli("gate", run_dir, "--unreachable-incomplete", "false", "--fail-on", "critical")
    assert rc == 2 and message in err and "pass" not in out


def test_gate_on_empty_folder_exits_2(tmp_path):
    rc, out, err = cli("gate", str(tmp_path))
    assert rc == 2 and "run folder %s is incomplete: it has no summary.json" % tmp_path in err


def test_verdicts():
    def host(status="audited", severity=None, waived=False):
        findings = [{"rule": "R", "severity": severity, "waived": waived}] if severity else []
        return {"host": "h", "status": status, "findings": findings}
    assert reports.verdict([host()], "high", True)[0] == "pass"
    assert reports.verdict([host(severity="high")], "high", True)[0] == "fail"
    assert reports.verdict([host(severity="medium")], "high", True)[0] == "pass"
    assert reports.verdict([host(severity="critical", waived=True)], "high", True)[0] == "pass"
    assert reports.verdict([host(), host(status="unreachable")], "high", True)[0] == "incomplete"
    assert reports.verdict([host(), host(status="unreachable")], "high", False)[0] == "pass"
    assert reports.verdict([host(status="unreachable")], "high", False)[0] == "incomplete"
    assert reports.verdict([], "high", True)[0] == "incomplete"


def test_atomic_write_keeps_old_file_on_failure(tmp_path):
    path = str(tmp_path / "summary.json")
    reports.write_json(path, {"a": 1})

    class Boom(object):
        def __str__(self):
            raise RuntimeError("killed mid-write")
    with pytest.raises(TypeError):
        reports.write_json(path, {"a": Boom()})
    assert json.load(open(path)) == {"a": 1}
    assert [n for n in os.listdir(str(tmp_path)) if n.startswith(".tmp-")] == []


def test_safe_name():
    assert reports.safe_name("web-17.example.net") == "web-17.example.net"
    assert reports.safe_name("../etc/passwd") == "_..%2Fetc%2Fpasswd"
    assert "/" not in reports.safe_name("a/b") and reports.safe_name(".hidden").startswith("_")
