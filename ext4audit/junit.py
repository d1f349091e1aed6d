"""junit.xml: a test suite per host, a test case per rule x filesystem (host-wide rules: per rule).

CI systems show it as test results: a failing finding is a failure, a waived one or an
undetermined rule is skipped, a finding below fail_on passes with its text, a host not audited
is an error.
"""

import functools
import re

from . import reports, writers

_XML_BAD = re.compile("[^\u0009\u000a\u000d\u0020-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


def xml_text(value):
    """Text that XML 1.0 can hold: control characters become U+FFFD (escaping is ElementTree's)."""
    return _XML_BAD.sub("\ufffd", "" if value is None else str(value))


# ElementTree's escaping (xml.etree.ElementTree._escape_attrib and _escape_cdata), "&" first.
_XML_CDATA = (("&", "&amp;"), ("<", "&lt;"), (">", "&gt;"))
_XML_ATTRIB = _XML_CDATA + (('"', "&quot;"), ("\r", "&#13;"), ("\n", "&#10;"), ("\t", "&#09;"))


def _attrib(value):
    return writers.replace_all(xml_text(value), _XML_ATTRIB)


_attrib_of_rule = functools.lru_cache(maxsize=1024)(_attrib)  # rule ids repeat in every suite


JUNIT_HEAD = '<?xml version="1.0" encoding="UTF-8"?>\n<testsuites name="ext4-fleet-audit"'


def suite(report, fail_on):
    """One host's test suite: a test case per rule x filesystem (host-wide rules: per rule). The
    document is the one ElementTree would make, indented as ET.indent does; it is written in
    pieces (10,000 hosts make over 100 MB), never held as a tree. The host is judged by its own fail_on."""
    fail_on = reports.host_fail_on(report, fail_on)
    head = '\n    <testcase classname="%s" name="' % _attrib(report["host"])
    cases, counts, places = [], {"failure": 0, "error": 0, "skipped": 0, "system-out": 0}, {}

    def name(item):
        """The case name, escaped; a host's ~100 cases share a few mount points (escaped once)."""
        where = item.get("mountpoint")
        if where not in places:
            places[where] = " [%s]" % _attrib(where) if where else ""
        return _attrib_of_rule(item["rule"]) + places[where]

    def case(item_name, child, attributes=(), text=None):
        counts[child] += 1
        attrs = "".join(' %s="%s"' % (key, _attrib(value)) for key, value in attributes)
        inner = ("<%s%s>%s</%s>" % (child, attrs, writers.replace_all(xml_text(text), _XML_CDATA), child)
                 if text is not None else "<%s%s />" % (child, attrs))
        cases.append(head + item_name + '">\n      ' + inner + "\n    </testcase>")

    if report["status"] != "audited":
        case("audit", "error", [("message", "%s: %s" % (report["status"], report.get("reason")))])
    for finding in report["findings"]:
        text = "%s\nRemediation: %s\nCost: %s" % (finding["message"], finding["remediation"]["steps"],
                                                   finding["remediation"]["cost"])
        if reports.failing(finding, fail_on):
            case(name(finding), "failure", [("type", finding["severity"]), (
                "message", "[%s] %s" % (finding["severity"], finding["message"]))], text)
        elif finding["waived"]:
            case(name(finding), "skipped", [("message", "waived until %s by %s: %s" % (
                finding["waiver"]["expires"], finding["waiver"]["approver"], finding["waiver"]["justification"]))])
        else:
            case(name(finding), "system-out", text="[%s, below fail_on=%s] %s" % (finding["severity"], fail_on, text))
    for item in report.get("undetermined") or []:
        case(name(item), "skipped", [("message", "undetermined: missing " + ", ".join(item["missing"]))])
    for item in report.get("skipped") or []:
        case(name(item), "skipped", [("message", "skipped by the host's policy: " + item["reason"])])
    cases.extend(head + name(item) + '" />' for item in report.get("passed") or [])
    suite = '\n  <testsuite name="%s" tests="%d" failures="%d" errors="%d" skipped="%d"' % (
        _attrib(report["host"]), len(cases), counts["failure"], counts["error"], counts["skipped"])
    return suite + (">" + "".join(cases) + "\n  </testsuite>" if cases else " />")


def frame(empty):
    """The text before and after the hosts' suites (a document without suites closes at once)."""
    return (JUNIT_HEAD + " />\n", "") if empty else (JUNIT_HEAD + ">", "\n</testsuites>\n")



class Writer(writers.Writer):
    """The hosts' suites are their parts; finish puts the document's head and tail around them."""

    file = "junit.xml"

    def host(self, report, digest):
        return suite(report, self.job.fail_on)

    def finish(self, out, summary, digests, parts):
        head, tail = frame(not parts.paths())
        out.write(head)
        parts.copy_to(out)
        out.write(tail)
