"""report.sarif: the run's findings as SARIF 2.1.0, for code-scanning tools (GitHub's among them).

- Rules: every catalog rule, with its id, title, rationale, remediation and references (helpUri
  is the first reference).
- Results: one per group of findings (finding_groups) that share their rule, severity, message, waiver and
  baseline state across hosts (hosts of a fleet share kernels, images and configurations: the
  same finding on 3,412 hosts is one result with 3,412 hosts). Its locations are the hosts (at
  most LOCATIONS_PER_RESULT of them, in run order; properties.hosts counts them all, and every
  host's report has its own findings). The level follows the severity: critical and high are
  errors, medium a warning, low and info notes.
- GitHub code scanning's limits hold at any fleet size: at most MAX_RESULTS results and
  MAX_GZIP_BYTES gzipped. What must go goes from the least severe end (results), or by listing
  fewer hosts per result (locations); run.properties.cut says what was left out.
- Location: a file in this repository that a fix would go into: the inventory's
  host_vars/<host>.yml when it exists inside the repository, otherwise the rule's entry in
  rules/catalog.yml (its line). The host and mount point are the logical location.
- partialFingerprints: a hash of the group's identity (rule, message, waived), so the same
  group keeps its fingerprint from run to run. The run id, times and host list never go into it.
- A waived finding carries a suppression (external, accepted, with the waiver's justification);
  with a baseline, each result has its baselineState (new or unchanged).

Host strings only ever reach the file as JSON strings (json.dumps and msgspec escape them).
The report step's workers group their shard's findings (Writer.host, Writer.shard_end); the
parent merges the shards' groups, sorts and cuts them, and writes the log.
"""

import gzip
import hashlib
import json
import os
import urllib.parse

import msgspec

from ext4audit import ROOT, severity_rank
from ext4audit.formats import writers
from ext4audit.report import finding_groups
from ext4audit.model import safe_yaml
from ext4audit.report import reports
from ext4audit.rules import catalog as catalog_mod

SCHEMA_URI = "https://json.schemastore.org/sarif-2.1.0.json"
TOOL = "ext4-fleet-audit"
FINGERPRINT = "ext4auditFinding/v1"
SRCROOT = "%SRCROOT%"
# GitHub code scanning: "Results per run 25,000", "Locations per result 1,000", and a gzip-compressed
# file of at most 10 MB (docs.github.com, "SARIF support for code scanning", Validating your SARIF file).
MAX_RESULTS = 25000
LOCATIONS_PER_RESULT = 1000
MAX_GZIP_BYTES = 10 * 1000 * 1000
_PLACEHOLDER = '"results": "@results@"'  # where the streamed results go in the serialised log
_RESULT = msgspec.json.Encoder()  # a result in one line, keys in the order made (5 times json.dumps' speed)


def level(severity):
    rank = severity_rank(severity)
    return "error" if rank >= severity_rank("high") else "warning" if rank == severity_rank("medium") else "note"


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


def _location(host, finding, uri, lines, catalog_uri):
    """One host of a result: uri is the host's host_vars file (None: the rule's catalog entry)."""
    logical = host + (":" + finding["mountpoint"] if finding.get("mountpoint") else "")
    physical = {"artifactLocation": {"uri": uri, "uriBaseId": SRCROOT}} if uri else {
        "artifactLocation": {"uri": catalog_uri, "uriBaseId": SRCROOT},
        "region": {"startLine": lines.get(finding["rule"], 1)}}
    return {"physicalLocation": physical,
            "logicalLocations": [{"name": finding.get("mountpoint") or host, "fullyQualifiedName": logical,
                                  "kind": "resource"}]}


def group_fingerprint(rule: str, message: str, waived: bool) -> str:
    """Stable across runs: the group's identity only (not its hosts, severity or the run)."""
    return hashlib.sha256(json.dumps([rule, message, waived]).encode("utf-8")).hexdigest()


def _result(key, count, locations, rule_index):
    rule, severity, base_severity, message, because, suppressed, expired, baseline = key
    text = message + (" Raised to %s: %s." % (severity, because) if because else "")
    text += " (%s host%s)" % ("{:,}".format(count), "" if count == 1 else "s")
    result = {
        "ruleId": rule,
        "level": level(severity),
        "message": {"text": text},
        "locations": locations,
        "partialFingerprints": {FINGERPRINT: group_fingerprint(rule, message, suppressed is not None)},
        "properties": {"severity": severity, "base_severity": base_severity, "hosts": count,
                       "hosts_listed": len(locations)},
    }
    if rule_index is not None:
        result["ruleIndex"] = rule_index
    if suppressed is not None:
        result["suppressions"] = [{"kind": "external", "status": "accepted", "justification": suppressed}]
    if expired is not None:
        result["properties"]["expired_waiver"] = json.loads(expired)
    if baseline is not None:
        result["baselineState"] = baseline
    return result


class Groups(finding_groups.FindingGroups):
    """The findings' groups (finding_groups) with a location per finding, the first `cap` of
    each group. The report step's workers make one per shard, the parent merges them."""

    SAMPLE_EACH_FINDING = True

    def __init__(self, catalog, catalog_path=None, inventory=None, with_baseline=False, cap=LOCATIONS_PER_RESULT):
        super().__init__(with_baseline, cap)
        catalog_path = catalog_path or os.path.join(catalog_mod.RULES_DIR, "catalog.yml")
        self.lines = rule_lines(catalog_path)
        self.catalog_uri = _repo_path(catalog_path) or "rules/catalog.yml"
        self.index = dict((rule["id"], number) for number, rule in enumerate(catalog.rules))
        self.inventory = inventory
        self._uri = None  # the host_vars file of the host being added

    def add_host(self, report: dict) -> None:
        self._uri = _host_vars(self.inventory, report["host"]) if report["findings"] else None
        super().add_host(report)

    def sample(self, report: dict, finding: dict) -> dict:
        return _location(report["host"], finding, self._uri, self.lines, self.catalog_uri)

    def results(self) -> tuple:
        """(results, cut): the groups as results, most severe and widest first, within GitHub's
        limits; cut (None when nothing was left out) says what was."""
        order = self.ordered()
        kept, dropped = order[:MAX_RESULTS], order[MAX_RESULTS:]
        cap, budget = self.cap, MAX_GZIP_BYTES * 0.9  # (the rest of the log is a few kB)
        while True:
            results = [_result(key, count, locations[:cap], self.index.get(key[0]))
                       for key, (count, _, locations) in kept]
            size = len(gzip.compress(b"\n".join(_RESULT.encode(r) for r in results), 6))
            if size <= budget or not kept:
                break
            if cap > 1:  # first list fewer hosts per result...
                cap //= 2
                continue
            keep = min(len(kept) - 1, int(len(kept) * budget / size * 0.95))  # ...then leave out the least severe
            kept, dropped = kept[:keep], kept[keep:] + dropped
        cut = None
        if dropped or cap < self.cap:
            cut = {"results_left_out": len(dropped),
                   "findings_left_out": sum(count for _, (count, _, _) in dropped),
                   "worst_left_out": max((key[1] for key, _ in dropped), key=severity_rank, default=None),
                   "hosts_listed_per_result": cap,
                   "why": "GitHub code scanning takes at most %d results and %d bytes gzipped; every finding is in "
                          "hosts/ and summary.json" % (MAX_RESULTS, MAX_GZIP_BYTES)}
        return results, cut


def write(path, summary, host_reports, catalog, catalog_path=None, inventory=None):
    """Write report.sarif atomically for host reports held in memory (the report step goes
    through Writer, whose groups are made in the step's workers)."""
    groups = Groups(catalog, catalog_path, inventory, summary.get("baseline") is not None)
    for report in host_reports:
        groups.add_host(report)
    with reports.atomic_file(path) as out:
        write_log(out, summary, catalog, groups)


def write_log(out, summary, catalog, groups):
    """Write the log to the text file `out`, the results from groups (Groups), one a line."""
    rules = [_rule_descriptor(rule) for rule in catalog.rules]
    results, cut = groups.results()
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
            "properties": {"verdict": summary["verdict"], "reason": summary["reason"], "policy": summary["policy"],
                           "cut": cut},
            "results": "@results@",
        }],
    }
    head, tail = json.dumps(log).split(_PLACEHOLDER)
    out.write(head + '"results": [' + ",\n".join(_RESULT.encode(r).decode("utf-8") for r in results))
    out.write("]" + tail + "\n")


class Writer(writers.GroupsWriter):
    """A shard's groups are its part (one line of JSON); the parent merges them."""

    file = "report.sarif"

    def __init__(self, job):
        super().__init__(job)
        self.groups = Groups(job.catalog, job.catalog_path, job.inventory, job.base is not None)

    def finish(self, out, summary, digests, parts):
        merged = Groups(self.job.catalog, self.job.catalog_path, self.job.inventory, self.job.base is not None)
        merged.merge_parts(parts)
        write_log(out, summary, self.job.catalog, merged)
