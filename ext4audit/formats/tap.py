"""report.tap: the run in the Test Anything Protocol (TAP version 13), as goss and others offer it.

One test point per host, in run order: `ok` when the host was audited and none of its findings
fails the gate's policy (reports.policy_failures: fail_on, fail_on_new), `not ok` otherwise,
with a YAML block that says why (the failing findings, or why the host was not audited).

Host strings never reach a test line as they are: a `#` there starts a directive (`# SKIP`
would turn a failing host into a skipped one), a newline a new line. The line names the host as
its hosts/<name>.json file does (reports.safe_name: `#` is %23); the YAML block carries the
names themselves, double-quoted and escaped by PyYAML.
"""

import yaml

from ext4audit.formats import writers
from ext4audit.report import reports


class _QuotedDumper(yaml.CSafeDumper):
    """libyaml's emitter (width -1: no line breaks), 14x faster than PyYAML's own, which took the
    largest share of the report step on a large fleet. Without implicit resolvers, a null is
    written `!!null "null"` as PyYAML's own emitter writes it (libyaml would write `! "null"`):
    the same bytes as safe_dump (tests/unit/test_writers.py)."""

    yaml_implicit_resolvers = {}


def test_point(report, digest, fail_on, fail_on_new):
    """The host's test line, and its YAML block when it is not ok."""
    number, name = digest["index"] + 1, reports.safe_name(report["host"])
    fail_on = reports.host_fail_on(report, fail_on)  # the host is judged by its own policy
    if report["status"] != "audited":
        why = {"host": report["host"], "status": report["status"], "reason": report.get("reason")}
    else:
        failures = reports.policy_failures(report["findings"], fail_on, fail_on_new)
        if not failures:
            return "ok %d - %s\n" % (number, name)
        why = {"host": report["host"], "message": "%d finding(s) fail the policy (fail_on=%s%s)" % (
            len(failures), fail_on, ", new since the baseline only" if fail_on_new else ""),
            "findings": [{"rule": f["rule"], "severity": f["severity"], "mountpoint": f.get("mountpoint"),
                          "message": f["message"]} for f in failures]}
    # Every scalar double-quoted on one line: no text of a host can end the block or start a line.
    block = yaml.dump(why, Dumper=_QuotedDumper, default_style='"', sort_keys=False, allow_unicode=False, width=-1)
    return "not ok %d - %s\n  ---\n%s  ...\n" % (number, name, "".join("  " + line for line in block.splitlines(True)))


class Writer(writers.Writer):
    """The hosts' test points are their parts; finish puts the version and the plan before them."""

    file = "report.tap"

    def host(self, report, digest):
        return test_point(report, digest, self.job.fail_on, self.job.fail_on_new)

    def finish(self, out, summary, digests, parts):
        out.write("TAP version 13\n1..%d%s\n" % (len(digests), "" if digests else " # SKIP no host in the run"))
        parts.copy_to(out)
