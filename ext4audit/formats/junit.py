"""junit.xml: the run as JUnit XML test results, for CI test reports (GitLab, Jenkins, GitHub actions).

Built on the findings' groups (finding_groups), as report.sarif and summary.md are, so its size
follows the fleet's variety, not its size (a test case per host x rule x filesystem made 285 MB
at 10,000 hosts; GitLab takes 30 MB and 500,000 test cases):

- a test suite per rule (classname: the rule id), in catalog order;
- a test case per group of the rule's findings that share severity, message, waiver and outcome
  on their hosts: a failure (unwaived, at or above the host's own fail_on), skipped (waived), or
  passed with the finding's text in system-out (below the host's fail_on);
- a skipped test case per reason a rule was undetermined or skipped by a host's policy;
- one passed test case per rule that passed somewhere ("<rule> passed"), its host and filesystem
  counts in system-out: CI readers count passed rules and groups, not hosts;
- an "audit" suite with an error case per status of the hosts not audited (unreachable, failed...).

A case names its hosts (and mount points) in its text, at most HOSTS_NAMED of them, with the
count and where each host's findings are (hosts/<host>.json). Case names are the group's
severity and message (or the rule and what it was), stable from run to run (CI readers compare
runs by name) and unique in the file (GitLab keeps only the first case of a name).
The document is made with ElementTree, which escapes; xml_text replaces what XML 1.0 cannot hold.
"""

import collections
import re
import xml.etree.ElementTree as ET
from typing import IO, TYPE_CHECKING, Iterator, Sequence, Tuple

from ext4audit import severity_rank
from ext4audit.report import finding_groups
from ext4audit.formats import writers
from ext4audit.report import reports

if TYPE_CHECKING:
    from ext4audit.steps import fleet

HOSTS_NAMED = 20  # hosts (with their mount points) a test case's text names
SUITES_NAME = "ext4-fleet-audit"
AUDIT_SUITE = "audit"  # the suite of the hosts not audited
# A case's outcome (the last fields of its group key after the remediation's).
FAILURE, WAIVED, BELOW, UNDETERMINED, POLICY_SKIPPED, PASSED = (
    "failure", "waived", "below fail_on", "undetermined", "skipped by policy", "passed")
_ORDER = (FAILURE, BELOW, WAIVED, UNDETERMINED, POLICY_SKIPPED, PASSED)

_XML_BAD = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value: object) -> str:
    """Text that XML 1.0 can hold: control characters become U+FFFD (escaping is ElementTree's)."""
    return _XML_BAD.sub("\ufffd", "" if value is None else str(value))


def _item_key(rule: str, text: str, outcome: str) -> tuple:
    """The key of a group that is no finding (undetermined, skipped, passed): group_key's shape."""
    return (rule, None, None, text, None, None, None, None, None, None, outcome)


class Groups(finding_groups.FindingGroups):
    """The run's findings, undetermined and skipped rules and passes, grouped with their outcome
    on each host (judged by the host's own fail_on), a sample per finding: "host [mount point]"."""

    SAMPLE_EACH_FINDING = True

    def __init__(self, fail_on: str, cap: int = HOSTS_NAMED):
        super().__init__(with_baseline=False, cap=cap)
        self.fail_on = fail_on

    def sample(self, report: dict, finding: dict) -> str:
        return report["host"] + (" [%s]" % finding["mountpoint"] if finding.get("mountpoint") else "")

    def entries(self, report: dict) -> Iterator[Tuple[tuple, dict]]:
        fail_on = reports.host_fail_on(report, self.fail_on)
        for key, finding in super().entries(report):
            outcome = (FAILURE if reports.failing(finding, fail_on) else WAIVED if finding["waived"]
                       else "%s=%s" % (BELOW, fail_on))
            yield key + (finding["remediation"]["steps"], finding["remediation"]["cost"], outcome), finding
        for item in report.get("undetermined") or []:
            yield _item_key(item["rule"], "missing " + ", ".join(item["missing"]), UNDETERMINED), item
        for item in report.get("skipped") or []:
            yield _item_key(item["rule"], item["reason"], POLICY_SKIPPED), item

    def add_host(self, report: dict) -> None:
        """The entries' groups, then the host's passes counted by rule: a host passes ~180 rule x
        filesystem pairs, as many as the rest together, and a pass names no host (half the time)."""
        super().add_host(report)
        for rule, filesystems in collections.Counter(item["rule"] for item in report.get("passed") or ()).items():
            key = _item_key(rule, "", PASSED)
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = [0, 0, []]
            group[0] += filesystems
            group[1] += 1


def _outcome_rank(outcome: str) -> int:
    return _ORDER.index(BELOW if outcome.startswith(BELOW) else outcome)


def _hosts_text(count: int, findings: int, samples: list) -> str:
    more = count - len(set(sample.split(" [", 1)[0] for sample in samples))
    return "Hosts (%s%s): %s%s.\nEach host's findings: hosts/<host>.json in the run folder." % (
        "{:,}".format(count), "" if findings == count else ", {:,} filesystems".format(findings), ", ".join(samples),
        " and {:,} more".format(more) if more > 0 else "")


def _case(suite: ET.Element, key: tuple, findings: int, hosts: int, samples: list) -> str:
    """Add the group's test case to suite; its kind: failure, skipped, passed."""
    rule, severity, base, message, because, suppressed, expired, _, steps, cost, outcome = key
    case = ET.SubElement(suite, "testcase", classname=xml_text(rule))
    count = "%s host%s" % ("{:,}".format(hosts), "" if hosts == 1 else "s")
    where = _hosts_text(hosts, findings, samples)
    if outcome in (UNDETERMINED, POLICY_SKIPPED):
        case.set("name", xml_text("%s %s: %s" % (rule, outcome, message)))
        ET.SubElement(case, "skipped", message=xml_text("%s: %s (%s)" % (outcome, message, count))).text = xml_text(where)
        return "skipped"
    if outcome == PASSED:
        case.set("name", xml_text("%s %s" % (rule, PASSED)))
        ET.SubElement(case, "system-out").text = xml_text("Passed on %s." % count + (
            " ({:,} filesystems)".format(findings) if findings != hosts else ""))
        return PASSED
    label = severity + (", raised from %s" % base if because else "")
    text = "%s\n%sRemediation: %s\nCost: %s\n%s" % (
        message, "Raised to %s: %s.\n" % (severity, because) if because else "", steps, cost, where)
    if expired is not None:
        text += "\nAn expired waiver: %s" % expired
    if outcome == FAILURE:
        case.set("name", xml_text("[%s] %s" % (label, message)))
        ET.SubElement(case, "failure", type=xml_text(severity),
                      message=xml_text("[%s] %s (%s)" % (severity, message, count))).text = xml_text(text)
        return FAILURE
    if outcome == WAIVED:
        case.set("name", xml_text("[%s, waived] %s" % (label, message)))
        ET.SubElement(case, "skipped", message=xml_text("waived: %s (%s)" % (suppressed, count))).text = xml_text(text)
        return "skipped"
    case.set("name", xml_text("[%s, %s] %s" % (label, outcome, message)))
    ET.SubElement(case, "system-out").text = xml_text(text)
    return PASSED


def _counted(element: ET.Element, cases: int, failures: int, errors: int, skipped: "int | None") -> None:
    element.set("tests", str(cases))
    element.set("failures", str(failures))
    element.set("errors", str(errors))
    if skipped is not None:  # (the Jenkins schema has no skipped count on testsuites)
        element.set("skipped", str(skipped))


def document(groups: Groups, summary: dict, rule_order: Sequence[str] = ()) -> ET.Element:
    """The testsuites element: a suite per rule (rule_order first, then by id), then the audit's."""
    root = ET.Element("testsuites", name=SUITES_NAME)
    by_rule = {}
    for key, group in groups.groups.items():
        by_rule.setdefault(key[0], []).append((key, group))
    order = dict((rule, number) for number, rule in enumerate(rule_order))
    totals = {FAILURE: 0, "skipped": 0, PASSED: 0, "error": 0}
    names = set()  # unique in the file: GitLab reads only the first case of a name
    for rule in sorted(by_rule, key=lambda rule: (order.get(rule, len(order)), rule)):
        suite = ET.SubElement(root, "testsuite", name=xml_text(rule))
        kinds = {FAILURE: 0, "skipped": 0, PASSED: 0}
        for key, (findings, hosts, samples) in sorted(by_rule[rule], key=lambda item: (
                _outcome_rank(item[0][-1]), -severity_rank(item[0][1] or "info"), -item[1][1], item[0][3], str(item[0]))):
            kinds[_case(suite, key, findings, hosts, samples)] += 1
            case = suite[-1]
            name, number = case.get("name"), 1
            while case.get("name") in names:  # groups that differ only where the name does not say
                number += 1
                case.set("name", "%s (%d)" % (name, number))
            names.add(case.get("name"))
        _counted(suite, len(suite), kinds[FAILURE], 0, kinds["skipped"])
        for kind in kinds:
            totals[kind] += kinds[kind]
    not_audited = {}
    for host in summary.get("hosts_not_audited") or []:
        not_audited.setdefault(host["status"], []).append(host)
    if not_audited:
        suite = ET.SubElement(root, "testsuite", name=AUDIT_SUITE)
        for status in sorted(not_audited):
            hosts = not_audited[status]
            case = ET.SubElement(suite, "testcase", classname=AUDIT_SUITE, name=xml_text(status))
            lines = ["%s: %s" % (h["host"], h.get("reason") or "no reason given") for h in hosts[:HOSTS_NAMED]]
            if len(hosts) > HOSTS_NAMED:
                lines.append("and {:,} more (summary.json's hosts_not_audited)".format(len(hosts) - HOSTS_NAMED))
            ET.SubElement(case, "error", type=xml_text(status), message=xml_text("%s host%s %s: not audited" % (
                "{:,}".format(len(hosts)), "" if len(hosts) == 1 else "s", status))).text = xml_text("\n".join(lines))
        _counted(suite, len(suite), 0, len(suite), 0)
        totals["error"] += len(suite)
    _counted(root, sum(totals.values()), totals[FAILURE], totals["error"], None)
    return root


def write_document(out: IO[str], root: ET.Element) -> None:
    """The document to the text file `out` (UTF-8), indented."""
    ET.indent(root)
    out.write('<?xml version="1.0" encoding="UTF-8"?>\n')
    out.write(ET.tostring(root, encoding="unicode"))
    out.write("\n")


class Writer(writers.GroupsWriter):
    """A shard's groups are its part (one line of JSON); the parent merges them into the document."""

    file = "junit.xml"

    def __init__(self, job: "fleet.Job") -> None:
        super().__init__(job)
        self.groups = Groups(job.fail_on)

    def finish(self, out: IO[str], summary: dict, digests: list, parts: writers.Parts) -> None:
        merged = Groups(self.job.fail_on)
        merged.merge_parts(parts)
        write_document(out, document(merged, summary, [rule["id"] for rule in self.job.catalog.rules]))
