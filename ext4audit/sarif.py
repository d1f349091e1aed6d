"""report.sarif: the run's findings as SARIF 2.1.0, for code-scanning tools (GitHub's among them).

- Rules: every catalog rule, with its id, title, rationale, remediation and references (helpUri
  is the first reference).
- Results: one per host x rule x filesystem (host-wide rules: one per host). The level follows
  the severity: critical and high are errors, medium a warning, low and info notes.
- Location: a file in this repository that a fix would go into: the inventory's
  host_vars/<host>.yml when it exists inside the repository, otherwise the rule's entry in
  rules/catalog.yml (its line). The host and mount point are the logical location.
- partialFingerprints: a hash of the finding's identity (host, rule, device, mount point; the
  same identity baselines use), so the same finding keeps its fingerprint from run to run. The
  run id and times never go into it.
- A waived finding carries a suppression (external, accepted, with the waiver's justification);
  with a baseline, each result has its baselineState (new or unchanged).

Host strings only ever reach the file as JSON strings (json.dumps and msgspec escape them). The
results are streamed into the file without indentation: a fleet of 10,000 hosts makes a large file.
"""

import hashlib
import json
import os
import urllib.parse

import msgspec

from . import ROOT, catalog as catalog_mod, reports, safe_yaml, severity_rank, writers

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL = "ext4-fleet-audit"
FINGERPRINT = "ext4auditFinding/v1"
SRCROOT = "%SRCROOT%"
_PLACEHOLDER = '"results": "@results@"'  # where the streamed results go in the serialised log
_RESULT = msgspec.json.Encoder()  # a result in one line, keys in the order made (5 times json.dumps' speed)
_JSON_STRING = json.encoder.encode_basestring_ascii  # the C function json.dumps uses for a string


def level(severity):
    rank = severity_rank(severity)
    return "error" if rank >= severity_rank("high") else "warning" if rank == severity_rank("medium") else "note"


def fingerprint(host, finding):
    """Stable across runs: the finding's identity only (json.dumps keeps the parts apart)."""
    key = (host, finding["rule"], finding.get("device"), finding.get("mountpoint"))
    # The text json.dumps(list(key)) makes, without its encoder's set-up for each of 100,000 findings.
    text = "[%s]" % ", ".join("null" if part is None else _JSON_STRING(part) for part in key)
    return hashlib.sha256(text.encode("ascii")).hexdigest()


def rule_lines(catalog_path):
    """{rule id: line of its entry in the catalog file} (1-based)."""
    root = safe_yaml.compose(catalog_path)  # read (and checked) by catalog.load before
    lines = {}
    for key, value in root.value:
        if key.value == "rules":
            for node in value.value:
                ids = [v.value for k, v in node.value if k.value == "id"]
                if ids:
                    lines[ids[0]] = node.start_mark.line + 1
    return lines


def _repo_path(path):
    """path relative to the repository as a URI reference, or None when it lies outside."""
    relative = os.path.relpath(os.path.realpath(path), os.path.realpath(ROOT))
    if relative == os.curdir or relative.split(os.sep)[0] == os.pardir:
        return None
    return urllib.parse.quote(relative.replace(os.sep, "/"))


def _host_vars(inventory, host):
    if not inventory or "/" in host or "\0" in host or host in (".", ".."):
        return None
    for name in (host + ".yml", host + ".yaml"):
        path = os.path.join(inventory, "host_vars", name)
        if os.path.isfile(path):
            return _repo_path(path)
    return None


def _rule_descriptor(rule):
    references = rule.get("references") or []
    steps, cost = rule["remediation"]["steps"].strip(), rule["remediation"]["cost"].strip()
    text = "%s\n\nRemediation: %s\n\nCost: %s" % (" ".join(rule["rationale"].split()), " ".join(steps.split()),
                                                  " ".join(cost.split()))
    if references:
        text += "\n\nReferences:\n" + "\n".join("- " + ref for ref in references)
    descriptor = {
        "id": rule["id"], "name": rule["id"],
        "shortDescription": {"text": rule["title"]},
        "fullDescription": {"text": " ".join(rule["rationale"].split())},
        "help": {"text": text},
        "defaultConfiguration": {"level": level(rule["severity"])},
        "properties": {"tags": list(rule.get("tags") or []), "severity": rule["severity"], "scope": rule["scope"]},
    }
    if references:
        descriptor["helpUri"] = references[0]
    if rule.get("seed"):
        descriptor["properties"]["seed"] = rule["seed"]
    return descriptor


def _result(host, finding, rule_index, lines, catalog_uri, uri, with_baseline):
    """uri: the host's host_vars file (None: the rule's catalog entry)."""
    logical = host + (":" + finding["mountpoint"] if finding.get("mountpoint") else "")
    physical = {"artifactLocation": {"uri": uri, "uriBaseId": SRCROOT}} if uri else {
        "artifactLocation": {"uri": catalog_uri, "uriBaseId": SRCROOT},
        "region": {"startLine": lines.get(finding["rule"], 1)}}
    message = "%s: %s" % (host, finding["message"])
    if finding.get("escalated_because"):
        message += " Raised to %s: %s." % (finding["severity"], finding["escalated_because"])
    result = {
        "ruleId": finding["rule"],
        "level": level(finding["severity"]),
        "message": {"text": message},
        "locations": [{"physicalLocation": physical,
                       "logicalLocations": [{"name": finding.get("mountpoint") or host,
                                             "fullyQualifiedName": logical, "kind": "resource"}]}],
        "partialFingerprints": {FINGERPRINT: fingerprint(host, finding)},
        "properties": {"host": host, "device": finding.get("device"), "mountpoint": finding.get("mountpoint"),
                       "severity": finding["severity"], "base_severity": finding.get("base_severity")},
    }
    if rule_index is not None:
        result["ruleIndex"] = rule_index
    if finding.get("confirmation"):
        result["properties"]["confirmation"] = finding["confirmation"]
    waiver = finding.get("waiver") or {}
    if finding.get("waived"):
        result["suppressions"] = [{"kind": "external", "status": "accepted", "justification": "%s (approver %s, until %s)"
                                   % (waiver.get("justification"), waiver.get("approver"), waiver.get("expires"))}]
    elif waiver.get("status") == "expired":
        result["properties"]["expired_waiver"] = waiver
    if with_baseline:
        result["baselineState"] = "new" if finding.get("baseline") == "new" else "unchanged"
    return result


class Results:
    """Makes each host's results; the same for every host of a run (workers of the report step
    each make one). catalog_path: the catalog file the rules came from (for line numbers);
    inventory: the inventory folder whose host_vars files results point at."""

    def __init__(self, catalog, catalog_path=None, inventory=None, with_baseline=False):
        catalog_path = catalog_path or os.path.join(catalog_mod.RULES_DIR, "catalog.yml")
        self.lines = rule_lines(catalog_path)
        self.catalog_uri = _repo_path(catalog_path) or "rules/catalog.yml"
        self.index = dict((rule["id"], number) for number, rule in enumerate(catalog.rules))
        self.inventory, self.with_baseline = inventory, with_baseline

    def of_host(self, report):
        """The host's results as JSON text, one per line, comma-separated ("" without findings)."""
        if not report["findings"]:
            return ""
        uri = _host_vars(self.inventory, report["host"])
        return ",\n".join(_RESULT.encode(_result(report["host"], finding, self.index.get(finding["rule"]), self.lines,
                                                  self.catalog_uri, uri, self.with_baseline)).decode("utf-8")
                          for finding in report["findings"])


def write(path, summary, host_reports, catalog, catalog_path=None, inventory=None):
    """Write report.sarif atomically for host reports held in memory (the report step goes
    through Writer, whose results are made in the step's workers)."""
    results = Results(catalog, catalog_path, inventory, summary.get("baseline") is not None)
    pieces = [piece for piece in (results.of_host(report) for report in host_reports) if piece]
    with reports.atomic_file(path) as out:
        write_log(out, summary, catalog, lambda out: out.write(",\n".join(pieces)))


def write_log(out, summary, catalog, write_results):
    """Write the log to the text file `out`; write_results(out) writes the text of the results
    array into it (the hosts' results as Results.of_host makes them, comma-separated), without
    indentation (10,000 hosts make over 100 MB)."""
    rules = [_rule_descriptor(rule) for rule in catalog.rules]
    notes = [{"level": "error", "message": {"text": "%s was not audited: %s: %s" % (
                  h["host"], h["status"], h["reason"] or "no reason given")},
              "properties": {"host": h["host"], "status": h["status"]}} for h in summary["hosts_not_audited"]]
    notes += [{"level": "warning", "message": {"text": "probe on %s: %s: %s" % (p["host"], p["status"], p["reason"])},
               "properties": {"host": p["host"]}} for p in summary["probe"]["failed"]]
    log = {
        "$schema": SCHEMA_URI,
        "version": "2.1.0",
        "runs": [{
            "tool": {"driver": {"name": TOOL, "rules": rules}},
            "automationDetails": {"id": "%s/%s" % (TOOL, summary["run_id"])},
            "originalUriBaseIds": {SRCROOT: {"uri": "file://" + urllib.parse.quote(os.path.realpath(ROOT)) + "/"}},
            "invocations": [{"executionSuccessful": not summary["hosts_not_audited"],
                             "endTimeUtc": summary["generated_at"], "toolExecutionNotifications": notes}],
            "properties": {"verdict": summary["verdict"], "reason": summary["reason"], "policy": summary["policy"]},
            "results": "@results@",
        }],
    }
    head, tail = json.dumps(log).split(_PLACEHOLDER)
    out.write(head + '"results": [')
    write_results(out)
    out.write("]" + tail + "\n")


class Writer(writers.Writer):
    """The hosts' results are their parts, comma-separated."""

    file = "report.sarif"
    separator = ",\n"

    def __init__(self, job):
        super().__init__(job)
        self.results = Results(job.catalog, job.catalog_path, job.inventory, job.base is not None)

    def host(self, report, digest):
        return self.results.of_host(report)

    def finish(self, out, summary, digests, parts):
        write_log(out, summary, self.job.catalog, parts.copy_to)
