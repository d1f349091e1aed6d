"""junit.xml on the findings' groups (issue 28): a test suite per rule, a test case per group of
findings with its hosts named (capped), so CI readers (GitLab: < 30 MB and 500,000 test cases a
file) load it at any fleet size. Checked against the Jenkins xUnit plugin's JUnit schema
(tests/fixtures/junit/, see its README) and read back with junitparser, a JUnit reader from PyPI.
The hosts are real host reports of bench/aggregate.py's synthetic fleet (the real report command)."""

import copy
import os
import re
import xml.etree.ElementTree as ET

import junitparser
import pytest
from lxml import etree

from conftest import ROOT
from ext4audit.formats import junit
from ext4audit.report import reports
from test_reports import cli
from test_summary_md import TEMPLATE_HOSTS, _aggregate, host_reports, ten_thousand

XSD = os.path.join(ROOT, "tests", "fixtures", "junit", "jenkins-xunit-junit-10.xsd")
GITLAB_FILE_BYTES = 30 * 1000 * 1000  # "smaller than 30 MB per individual file"
GITLAB_TEST_CASES = 500000  # GitLab.com's "maximum test cases per unit test report"
HOSTILE_HOST = '<b>"db"&amp;</b>]]>\x07\n|`$(rm -rf /)`'
HOSTILE_MOUNT = "/srv/<script>alert(1)</script>]]>&\x01\r\n[y](z)"


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """TEMPLATE_HOSTS hosts of bench/aggregate.py's fleet with its waivers (one expired), reported
    by the real command with two workers (junit only)."""
    aggregate = _aggregate()
    base = tmp_path_factory.mktemp("fleet")
    run, waivers = str(base / "run"), str(base / "waivers.yml")
    specs = aggregate.fleet(TEMPLATE_HOSTS, 20261122, baseline=False)
    aggregate.write_run(run, specs)
    aggregate.write_waivers(waivers, specs)
    rc, out, err = cli("report", run, "--formats", "junit", "--fail-on", "high", "--jobs", "2", "--waivers", waivers)
    assert rc in (1, 2) and "error" not in err, (out, err)
    return run


def schema_errors(path):
    schema = etree.XMLSchema(etree.parse(XSD))
    return [] if schema.validate(etree.parse(path)) else [str(error) for error in schema.error_log]


def cases_of(path):
    """[(suite, case)] as junitparser reads them."""
    xml = junitparser.JUnitXml.fromfile(path)
    return [(suite, case) for suite in xml for case in suite]


def kind(case):
    results = case.result
    return type(results[0]).__name__ if results else "Passed"


def document(hosts, fail_on="high", summary=None):
    groups = junit.Groups(fail_on)
    for report in hosts:
        groups.add_host(report)
    return junit.document(groups, summary or {"hosts_not_audited": []})


def write(root, path):
    with open(path, "w", encoding="utf-8") as out:
        junit.write_document(out, root)
    return path


def test_a_ci_reader_sees_a_case_per_group_naming_its_hosts(real_run):
    """The real command's file: valid against the schema; junitparser reads one case per group
    (a failure names its hosts and how many), never one per host."""
    path = os.path.join(real_run, "junit.xml")
    assert schema_errors(path) == []
    summary, hosts = host_reports(real_run)
    cases = cases_of(path)
    kinds = [kind(case) for _, case in cases]
    assert len(cases) < 1000 < sum(len(r["findings"]) for r in hosts)  # a case per host x rule x fs: ~30,000
    assert {"Failure", "Skipped", "Error", "Passed"} <= set(kinds)
    assert len(set(case.name for _, case in cases)) == len(cases)  # GitLab reads the first case of a name only
    failing_hosts = set(r["host"] for r in hosts if any(reports.failing(f, "high") for f in r["findings"]))
    named = set()
    for suite, case in cases:
        assert case.classname in (suite.name, junit.AUDIT_SUITE)
        if kind(case) == "Failure":
            text = case.result[0].text
            count = int(re.search(r"\((\d+) hosts?\)$", case.result[0].message).group(1))
            listed = re.search(r"Hosts \(([\d,]+)[^)]*\): (.*?)( and [\d,]+ more)?\.\n", text)
            assert int(listed.group(1).replace(",", "")) == count
            shown = set(sample.split(" [", 1)[0] for sample in listed.group(2).split(", "))
            assert len(shown) == min(count, junit.HOSTS_NAMED) and bool(listed.group(3)) == (count > len(shown))
            named |= shown
    assert named <= failing_hosts and named
    # The suites' counts are what the reader counts.
    for suite, _ in cases:
        assert suite.tests == len(list(suite)) and suite.failures == sum(kind(c) == "Failure" for c in suite)
    errors = [case for _, case in cases if kind(case) == "Error"]
    assert [case.name for case in errors] == ["unreachable"]
    assert errors[0].result[0].message.startswith("%d host" % len(summary["hosts_not_audited"]))


def test_the_workers_groups_merged_are_one_pass_over_the_hosts(real_run, tmp_path):
    _, hosts = host_reports(real_run)
    summary = reports.read_json(os.path.join(real_run, "summary.json"), "summary")
    from ext4audit.rules import catalog
    groups = junit.Groups("high")
    for report in hosts:
        groups.add_host(report)
    root = junit.document(groups, summary, [rule["id"] for rule in catalog.load().rules])
    assert open(write(root, str(tmp_path / "one.xml")), encoding="utf-8").read() == \
        open(os.path.join(real_run, "junit.xml"), encoding="utf-8").read()


def test_junit_at_10000_hosts_is_within_gitlabs_limits_and_follows_the_fleets_variety(real_run, tmp_path):
    """10,000 hosts, a third with a mount point of their own (3,334 more groups: the worst case of
    variety), make a file a fraction of GitLab's 30 MB (a case per host x rule x filesystem made
    285 MB); 10,000 hosts of 300 kinds make as many cases as the 300 hosts."""
    _, templates = host_reports(real_run)
    fleet = ten_thousand(templates)
    path = write(document(fleet), str(tmp_path / "junit.xml"))
    size, cases = os.path.getsize(path), cases_of(path)
    assert size < GITLAB_FILE_BYTES / 4 and len(cases) < 10000 < GITLAB_TEST_CASES, (size, len(cases))
    assert schema_errors(path) == []
    # Every finding of the fleet is in exactly one case's count.
    counted = 0
    for _, case in cases:
        if kind(case) in ("Failure", "Skipped", "Passed") and not case.name.endswith(" " + junit.PASSED):
            text = case.result[0].text if case.result else case.system_out
            if text and "Hosts (" in text:
                numbers = re.search(r"Hosts \(([\d,]+)(?:, ([\d,]+) filesystems)?\)", text).groups()
                counted += int((numbers[1] or numbers[0]).replace(",", ""))
    undetermined_or_skipped = sum(len(r.get("undetermined") or []) + len(r.get("skipped") or []) for r in fleet)
    assert counted == sum(len(r["findings"]) for r in fleet) + undetermined_or_skipped
    # The same fleet without its per-host mount points: the file does not grow with the host count.
    plain = write(document([dict(templates[n % len(templates)], host="host-%05d" % n) for n in range(10000)]),
                  str(tmp_path / "plain.xml"))
    small = write(document(templates), str(tmp_path / "small.xml"))
    assert len(cases_of(plain)) == len(cases_of(small))
    assert os.path.getsize(plain) < 1.3 * os.path.getsize(small)


def test_each_host_is_judged_by_its_own_fail_on_and_waived_undetermined_not_audited(real_run):
    """A finding fails on a host whose policy says fail_on: low and passes (its text in
    system-out) on one with the run's high; waived is skipped, undetermined skipped, a host not
    audited an error: the gate's semantics, as the per-host file had them."""
    _, hosts = host_reports(real_run)
    template = next(r for r in hosts if any(f["severity"] == "low" and not f["waived"] for f in r["findings"]))
    low = next(f for f in template["findings"] if f["severity"] == "low" and not f["waived"])
    strict, lax, waived = (copy.deepcopy(dict(template, findings=[low])) for _ in range(3))
    strict.update(host="strict", policy=dict(template.get("policy") or {}, fail_on="low"))
    lax.update(host="lax", policy=dict(template.get("policy") or {}, fail_on=None))
    waived.update(host="waived", policy=dict(template.get("policy") or {}, fail_on="low"))
    waived["findings"][0].update(waived=True, waiver={"justification": "accepted", "approver": "me",
                                                      "expires": "2099-01-01", "status": "active"})
    for report in (strict, lax, waived):
        report.update(undetermined=[], skipped=[], passed=[])
    lax["undetermined"] = [{"rule": "EXT4_INODE_128", "mountpoint": "/x", "missing": ["sb.inode_size"]}]
    summary = {"hosts_not_audited": [{"host": "gone-%d" % n, "status": "unreachable", "reason": "ssh"}
                                     for n in range(junit.HOSTS_NAMED + 3)]}
    root = document([strict, lax, waived], "high", summary)
    suite = root.find("testsuite[@name='%s']" % low["rule"])
    failure, = suite.findall("testcase/failure")
    assert "Hosts (1): strict" in failure.text and failure.get("type") == "low"
    below, = [c for c in suite.findall("testcase") if c.find("system-out") is not None]
    assert "below fail_on=high" in below.get("name") and "Hosts (1): lax" in below.find("system-out").text
    skipped, = suite.findall("testcase/skipped")
    assert skipped.get("message").startswith("waived: accepted") and "Hosts (1): waived" in skipped.text
    assert (suite.get("tests"), suite.get("failures"), suite.get("skipped")) == ("3", "1", "1")
    undetermined = root.find("testsuite[@name='EXT4_INODE_128']/testcase/skipped")
    assert undetermined.get("message") == "undetermined: missing sb.inode_size (1 host)"
    error = root.find("testsuite[@name='audit']/testcase/error")
    assert error.get("message") == "%d hosts unreachable: not audited" % (junit.HOSTS_NAMED + 3)
    assert error.text.count("gone-") == junit.HOSTS_NAMED and error.text.endswith("and 3 more (summary.json's "
                                                                                  "hosts_not_audited)")
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("5", "1", "1")


def test_hostile_host_and_mount_names_stay_data(real_run, tmp_path):
    """Markup, CDATA ends, entities, control characters and newlines in host names and mount
    points: the file stays valid, and a reader gets the names back (control characters as U+FFFD)."""
    _, hosts = host_reports(real_run)
    template = next(r for r in hosts if any(reports.failing(f, "high") and f.get("mountpoint") for f in r["findings"]))
    report = copy.deepcopy(template)
    report["host"] = HOSTILE_HOST
    for finding in report["findings"]:
        if finding.get("mountpoint"):
            finding["message"] = finding["message"].replace(finding["mountpoint"], HOSTILE_MOUNT)
            finding["mountpoint"] = HOSTILE_MOUNT
    path = write(document([report], summary={"hosts_not_audited": [
        {"host": HOSTILE_HOST, "status": "unreachable", "reason": HOSTILE_MOUNT}]}), str(tmp_path / "junit.xml"))
    text = open(path, encoding="utf-8").read()
    assert "<script>" not in text and "<b>" not in text and "]]>" not in text and "\x01" not in text
    assert schema_errors(path) == []
    def read(text):  # an XML reader ends a line in element text with \n (XML 1.0, 2.11)
        return junit.xml_text(text).replace("\r\n", "\n").replace("\r", "\n")

    failures = [case.result[0] for _, case in cases_of(path) if kind(case) == "Failure"]
    assert failures and all("Hosts (1): %s [%s]." % (read(HOSTILE_HOST), read(HOSTILE_MOUNT)) in failure.text
                            for failure in failures)
    assert all(failure.message.startswith("[high] %s" % junit.xml_text(HOSTILE_MOUNT).replace("\n", " ")[:5])
               for failure in failures)
    tree = ET.parse(path)
    assert tree.find("testsuite[@name='audit']/testcase/error").text == "%s: %s" % (read(HOSTILE_HOST),
                                                                                  read(HOSTILE_MOUNT))
