"""Host reports on disk: hosts/<host>.json as schema v2, and the full report made from it.

The report step builds each host's report in full (contract.HostReport, the v1 shape: every
finding with its rule's text, the kernel records it names, the host's filesystems) and the
writers read that. On disk most of it would be the same bytes on every host: the rule's
remediation and references, the CNA records of a kernel that thousands of hosts run, the
facts record the run folder already holds. So a v2 file (contract.CompactHostReport) keeps what
is the host's own and refers to the rest:

- `shared`: the run folder's host-reports-shared.json (contract.HostReportShared), written once
  per run: each rule's text by rule id, and the kernel record evidence by a hash of its content;
- `facts`: the host's record in the run folder's facts/ (its filesystems and netfs);
- `targets`: the [mount point, device] places, which findings, undetermined and passed rules
  name by index (`at`).

resolve() makes the full report back of a v2 file (equal to the one the step built), and
read() reads either version from a run folder: every reader of hosts/ goes through it, and
scripts may too, or run `ext4audit host-report RUN/hosts/HOST.json` (docs/reports.md).
"""

import hashlib
import os
from typing import Any, Dict, Optional

import msgspec

from ext4audit.model import contract
from ext4audit.report import reports

SHARED_FILE = "host-reports-shared.json"
VERSIONS = (contract.FULL_HOST_REPORT_SCHEMA, contract.HOST_REPORT_SCHEMA)  # what read() reads
# A finding's fields that are its rule's catalog text (engine.evaluate_host): in the shared file
RULE_FIELDS = ("title", "base_severity", "remediation", "references", "tags", "seed")
# Evidence that the hosts of one kernel share (engine._judge_records), kept once by content
SHARED_EVIDENCE = ("kernel_records", "kernel_action", "kernel_records_set_aside")
# Fields every full finding has that v2 leaves out when they are null
NULLABLE = ("escalated_because", "waiver")
_PLACE = ("mountpoint", "device")  # a finding's place: in targets
# a finding's confirmation (probe.confirm) has every field; v2 leaves out the null ones
CONFIRMATION_FIELDS = contract.field_names(contract.FindingConfirmation)[1]
FACTS_FIELDS = ("filesystems", "netfs")  # what a v2 report reads from its facts record
_EXPANDED = ("findings", "undetermined", "passed") + FACTS_FIELDS  # what compact() writes its own way
_LEFT_OUT = frozenset(NULLABLE + _PLACE)
_HASH = msgspec.json.Encoder(order="sorted")
_REMEMBERED = 4096  # evidence values a worker remembers by identity (the engine shares them per kernel)


class Version(msgspec.Struct):
    """A host report's schema alone: which model to decode it by (msgspec skips the rest)."""
    schema: str = ""


def shared_rules(catalog: Any) -> Dict[str, dict]:
    """{rule id: its text as every finding of it has it} for the shared file."""
    return dict((rid, {"title": rule["title"], "base_severity": rule["severity"], "remediation": rule["remediation"],
                       "references": rule["references"], "tags": rule["tags"], "seed": rule.get("seed")})
                for rid, rule in catalog.by_id.items())


class Shared:
    """What a run's v2 host reports refer to, as one process gathers it: the rules' texts, and
    the evidence values seen so far by id (new: those not yet handed to the parent, see take_new)."""

    def __init__(self, catalog: Any) -> None:
        self.rules = shared_rules(catalog)
        self.evidence: Dict[str, Any] = {}
        self.new: Dict[str, Any] = {}
        self._ids: Dict[int, tuple] = {}  # id(value) -> (value, its id): no hashing of the same list twice

    def ref(self, value: Any) -> str:
        """The id of an evidence value (a hash of its content, the same in every worker)."""
        known = self._ids.get(id(value))
        if known is not None and known[0] is value:
            return known[1]
        key = hashlib.sha256(_HASH.encode(value)).hexdigest()[:16]
        if len(self._ids) >= _REMEMBERED:
            self._ids.clear()
        self._ids[id(value)] = (value, key)
        if key not in self.evidence:
            self.evidence[key] = self.new[key] = value
        return key

    def take_new(self) -> Dict[str, Any]:
        new, self.new = self.new, {}
        return new

    def document(self, run_id: Optional[str]) -> dict:
        return {"schema": contract.HOST_REPORT_SHARED_SCHEMA, "run_id": run_id, "rules": self.rules,
                "evidence": self.evidence}


def compact(report: dict, facts_file: Optional[str], shared: Shared) -> dict:
    """The v2 document of a full host report. facts_file: its facts record, relative to the run
    folder (the report's filesystems and netfs are that record's). (Plain loops: this runs for
    every host of the report step.)"""
    doc = dict((k, v) for k, v in report.items() if k not in _EXPANDED)
    places, targets = {}, []

    def at(entry):
        key = (entry.get("mountpoint"), entry.get("device"))
        index = places.get(key)
        if index is None:
            index = places[key] = len(targets)
            targets.append(key)
        return index

    findings, rules = [], shared.rules
    for finding in report["findings"]:
        rule = rules.get(finding["rule"]) or {}
        out = {}
        for key, value in finding.items():
            if key in rule:
                known = rule[key]
                if value is known or value == known:
                    continue
            elif key in _LEFT_OUT and (value is None or key in _PLACE):
                continue
            out[key] = value
        out["at"] = at(finding)
        confirmation = out.get("confirmation")
        if confirmation:
            out["confirmation"] = dict((k, v) for k, v in confirmation.items() if v is not None)
        evidence = finding.get("evidence")
        if evidence and any(evidence.get(key) is not None for key in SHARED_EVIDENCE):
            out["evidence"] = dict((k, v) for k, v in evidence.items() if k not in SHARED_EVIDENCE or v is None)
            out["shared_evidence"] = dict((k, shared.ref(evidence[k])) for k in SHARED_EVIDENCE
                                          if evidence.get(k) is not None)
        findings.append(out)
    undetermined = []  # entries that differ only in their place are one, with their places in order
    for entry in report["undetermined"]:
        rest = dict((k, v) for k, v in entry.items() if k not in _PLACE)
        if undetermined and dict((k, v) for k, v in undetermined[-1].items() if k != "at") == rest:
            undetermined[-1]["at"].append(at(entry))
        else:
            undetermined.append(dict(rest, at=[at(entry)]))
    passed, rule_id, indexes = [], None, None  # [[rule, [places]]] in order (an object's keys would be sorted)
    for entry in report["passed"]:  # (about 170 a host: at() inlined)
        key = (entry["mountpoint"], entry["device"])
        index = places.get(key)
        if index is None:
            index = places[key] = len(targets)
            targets.append(key)
        if entry["rule"] != rule_id:
            rule_id, indexes = entry["rule"], []
            passed.append((rule_id, indexes))
        indexes.append(index)
    doc.update(schema=contract.HOST_REPORT_SCHEMA, shared=SHARED_FILE,
               facts=facts_file if report["status"] == "audited" else None,
               findings=findings, undetermined=undetermined, passed=passed, targets=targets)
    return doc


def resolve(doc: dict, run_dir: str, shared: Optional[dict] = None, where: str = "host report",
            facts: bool = True, passes: bool = True) -> dict:
    """The full host report (contract.HostReport) of a checked v2 document of run_dir: the rules'
    text and shared evidence from the run's shared file (shared: it, already read), filesystems
    and netfs from the host's facts record (facts=False: left empty, for a reader that needs
    neither; passes=False: passed and undetermined left empty, for a reader of findings only, the
    store). A v1 document is returned as it is. A reference that does not resolve is a
    ReportError naming the file and the field."""
    if doc.get("schema") != contract.HOST_REPORT_SCHEMA:
        return doc
    if shared is None:
        shared = read_shared(run_dir, doc["shared"])
    targets = doc["targets"]

    def place(entry, field):
        if entry["at"] >= len(targets):
            raise reports.ReportError("%s: %s.at %d is not a place of its %d targets" % (
                where, field, entry["at"], len(targets)))
        return targets[entry["at"]]

    full = dict((k, v) for k, v in doc.items() if k not in ("shared", "facts", "targets", "findings", "undetermined",
                                                            "passed"))
    full["schema"] = contract.FULL_HOST_REPORT_SCHEMA
    findings = []
    for number, finding in enumerate(doc["findings"]):
        field = "$.findings[%d]" % number
        mountpoint, device = place(finding, field)
        out = dict(dict.fromkeys(NULLABLE), mountpoint=mountpoint, device=device)
        rule = shared["rules"].get(finding["rule"])
        if rule is None:
            raise reports.ReportError("%s: %s.rule %r is not in %s" % (where, field, finding["rule"], doc["shared"]))
        out.update(rule)
        out.update((k, v) for k, v in finding.items() if k not in ("at", "shared_evidence"))
        if isinstance(finding.get("confirmation"), dict):
            out["confirmation"] = dict(dict.fromkeys(CONFIRMATION_FIELDS), **finding["confirmation"])
        if finding.get("shared_evidence"):
            evidence = dict(finding.get("evidence") or {})
            for key, ref in finding["shared_evidence"].items():
                if ref not in shared["evidence"]:
                    raise reports.ReportError("%s: %s.shared_evidence.%s %r is not in %s" % (
                        where, field, key, ref, doc["shared"]))
                evidence[key] = shared["evidence"][ref]
            out["evidence"] = evidence
        findings.append(out)
    undetermined: list = []
    for number, entry in enumerate(doc["undetermined"] if passes else ()):
        rest = dict((k, v) for k, v in entry.items() if k != "at")
        for index in entry["at"]:
            mountpoint, device = place({"at": index}, "$.undetermined[%d].at[]" % number)
            undetermined.append(dict({"mountpoint": mountpoint, "device": device}, **rest))
    passed: list = []
    for rule, indexes in doc["passed"] if passes else ():
        for index in indexes:
            mountpoint, device = place({"at": index}, "$.passed.%s[]" % rule)
            passed.append({"mountpoint": mountpoint, "device": device, "rule": rule})
    full.update(findings=findings, undetermined=undetermined, passed=passed,
                **(_facts_of(doc, run_dir, where) if facts else dict((key, []) for key in FACTS_FIELDS)))
    return full


def _facts_of(doc: dict, run_dir: str, where: str) -> dict:
    """{filesystems, netfs} of a v2 report: its facts record's ([] for a host without one)."""
    if not doc.get("facts"):
        return {"filesystems": [], "netfs": []}
    path = os.path.join(run_dir, doc["facts"])
    record = reports.read_json(path, "facts record of %s" % where)
    facts = record.get("facts") if isinstance(record, dict) else None
    if not isinstance(facts, dict) or record.get("host") != doc["host"]:
        raise reports.ReportError("%s: $.facts %s is not the facts record of host %r" % (where, path, doc["host"]))
    return dict((key, facts.get(key) or []) for key in FACTS_FIELDS)


def read_shared(run_dir: str, name: str = SHARED_FILE) -> dict:
    """The run's shared file, checked (contract.HostReportShared)."""
    path = os.path.join(run_dir, name)
    doc = reports.read_json(path, "host reports' shared file")
    contract.check(doc, contract.HostReportShared, "host reports' shared file %s" % path)
    return doc


def check(doc: Any, where: str) -> None:
    """A host report of either version checked against its model (ContractError)."""
    schema = doc.get("schema") if isinstance(doc, dict) else None
    if isinstance(schema, str) and schema not in VERSIONS:
        raise contract.ContractError("%s: $.schema %r is not a %s document" % (where, schema, " or ".join(VERSIONS)))
    contract.check(doc, contract.CompactHostReport if schema == contract.HOST_REPORT_SCHEMA else contract.HostReport,
                   where)


class Reader:
    """Reads a run folder's host reports in full, either version; the shared file once. facts:
    False for a reader that needs no filesystems (the gate): the facts records are not read;
    passes: False for a reader of findings only (the store): passed and undetermined are not
    expanded from a v2 report."""

    def __init__(self, run_dir: str, facts: bool = True, passes: bool = True) -> None:
        self.run_dir, self.facts, self.passes, self._shared = run_dir, facts, passes, None

    def read(self, path: str, what: str = "host report") -> dict:
        where = "%s %s" % (what, path)
        doc = reports.read_json(path, what)
        check(doc, where)
        if doc.get("schema") != contract.HOST_REPORT_SCHEMA:
            return doc
        if self._shared is None:
            self._shared = read_shared(self.run_dir, doc["shared"])
        return resolve(doc, self.run_dir, self._shared, where, self.facts, self.passes)


def run_of(path: str) -> str:
    """The run folder of a host report file (RUN/hosts/<host>.json)."""
    return os.path.dirname(os.path.dirname(os.path.abspath(path)))


def read(path: str, what: str = "host report") -> dict:
    """A host report file of a run folder (RUN/hosts/<host>.json), checked and in full: what a
    script that reads one host calls (either version)."""
    return Reader(run_of(path)).read(path, what)

