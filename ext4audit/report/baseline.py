"""Baselines: what changed since an earlier run (the nightly diff).

A baseline is an earlier run folder (reports/<run-id>, or reports/latest): its summary.json and
hosts/*.json. A finding's identity is (host, rule, device, mount point); host-wide rules have
neither. Against a baseline each finding of this run is
- new: its identity was not in the baseline, or its severity is higher now (a worsened finding
  must pass the gate again), or its host could not be compared (added since, or not audited in
  the baseline): a gate never passes what it could not compare;
- persisting: the same identity at the same or a lower severity;
and a baseline finding whose identity is gone is resolved. Hosts added and removed are listed,
never matched to one another. A host that was not audited in this run resolves nothing: it is
listed under hosts_not_compared.

The baseline's summary is read and checked before the run writes anything: a missing, corrupt,
truncated or wrong-schema baseline, or one whose report step did not finish (no summary.json),
is a ReportError (exit 2). A host's findings in the baseline come from the baseline's
findings-index.json (INDEX, written by its report step: one file instead of one host report per
host) when it is the index of that summary, else from the host's report; either is checked when
the host is compared, and a bad one stops the run the same way.
"""

import os
from typing import Dict

import msgspec

from ext4audit import severity_rank
from ext4audit.model import contract
from ext4audit.report import reports

INDEX = "findings-index.json"

# New findings name why they are new.
NEW, WORSENED, HOST_ADDED, NOT_AUDITED_BEFORE = "new", "worsened", "host_added", "not_audited_in_baseline"


def identity(host, finding):
    return (host, finding["rule"], finding.get("device"), finding.get("mountpoint"))


class Baseline:
    """An earlier run, checked: its id, folder and hosts (name: status, from its summary.json).
    Each host's findings are read from its report when that host is compared (host_findings), so
    the report step's workers read only the hosts they have."""

    def __init__(self, run_id, path, statuses, index=None):
        self.run_id, self.path, self.statuses = run_id, path, statuses
        self.index = index  # {host: its entry of findings-index.json, undecoded}, or None: read host reports

    def host_findings(self, host):
        """{identity: severity} of the host's findings in the baseline, and its status there."""
        if self.index is not None:
            where = "baseline %s (host %r)" % (os.path.join(self.path, INDEX), host)
            try:
                entry = _INDEXED_HOST.decode(self.index[host])
            except msgspec.ValidationError as exc:
                raise reports.ReportError("%s: %s" % (where, contract.explain(exc, contract.IndexedHost)))
            if entry.status != self.statuses[host]:
                raise reports.ReportError("%s: status %r, its summary.json says %r" % (where, entry.status,
                                                                                     self.statuses[host]))
            return _host_entry(host, entry.status, entry.findings)
        return self.host_report_findings(host)

    def host_report_findings(self, host):
        """host_findings, from the host's report."""
        file_path = reports.host_report_path(self.path, host)
        # decoded into contract.HostReport, which checks every field it names and skips the rest
        # unbuilt: half the time of json.loads (measured: 335 against 705 us a host)
        report = reports.read_json(file_path, "baseline host report", contract.HostReport)
        if report.host != host:
            raise reports.ReportError("baseline %s is the report of %r, not of %r" % (file_path, report.host, host))
        return _host_entry(host, report.status, report.findings)

    def check_every_host(self):
        """Read and check every host report of the baseline now (the gate does, before it reads
        the run; the report step checks each host's when it compares that host)."""
        for host in self.statuses:
            self.host_report_findings(host)


def load(path, run_dir=None):
    """Read and check the baseline run folder at `path` (reports.read_complete_run: a folder whose
    report step did not finish is refused); run_dir (the run being made) must not be the baseline
    itself. The host reports are checked when each host is compared."""
    if run_dir and os.path.realpath(path) == os.path.realpath(run_dir):
        raise reports.ReportError("baseline %s is the run itself (%s): give an earlier run" % (path, run_dir))
    summary, statuses = reports.read_complete_run(path, "baseline")
    # The real folder: reports/latest moves on.
    return Baseline(str(summary.get("run_id") or os.path.basename(os.path.normpath(path))), os.path.realpath(path),
                    statuses, _read_index(path, summary, statuses))


class _Index(msgspec.Struct):
    """contract.FindingsIndex with each host's entry left undecoded until that host is compared."""
    schema: str
    run_id: str
    generated_at: str
    hosts: Dict[str, msgspec.Raw]


_INDEXED_HOST = msgspec.json.Decoder(contract.IndexedHost)


def _read_index(path, summary, statuses):
    """The baseline's findings index by host, if it is the index of this summary (the same run_id,
    generated_at and hosts); None without one (a run of an earlier version) or with another's."""
    file_path = os.path.join(path, INDEX)
    if not os.path.exists(file_path):
        return None
    index = reports.read_json(file_path, "baseline findings index", _Index)
    if index.schema != contract.FINDINGS_INDEX_SCHEMA:
        raise reports.ReportError("baseline findings index %s: $.schema %r is not a %s document"
                                  % (file_path, index.schema, contract.FINDINGS_INDEX_SCHEMA))
    if (index.run_id, index.generated_at) != (summary.get("run_id"), summary.get("generated_at")) or \
            index.hosts.keys() != statuses.keys():
        return None  # the run was reported again since, by a version that writes no index
    return index.hosts


def index_entry(report):
    """A host's entry of findings-index.json (contract.IndexedHost), as JSON: `"host":{...}`."""
    return b"%s:%s" % (_ENCODER.encode(report["host"]), _ENCODER.encode({"status": report["status"], "findings": [
        (f["rule"], f["severity"], f.get("device"), f.get("mountpoint")) for f in report["findings"]]}))


_ENCODER = msgspec.json.Encoder()


def write_index(out, summary, parts):
    """findings-index.json to the text file `out`, one line: the summary's run_id and generated_at,
    and every host's index_entry (parts: writers.Parts of them, separated by commas, in run order)."""
    out.write('{"schema":%s,"run_id":%s,"generated_at":%s,"hosts":{' % tuple(
        _ENCODER.encode(value).decode("utf-8")
        for value in (contract.FINDINGS_INDEX_SCHEMA, summary["run_id"], summary["generated_at"])))
    parts.copy_to(out)
    out.write("}}\n")


def _host_entry(host, status, findings):
    """{"status", "findings": {identity: severity}} of decoded findings (contract.Finding or
    IndexedFinding): a finding found twice counts at its highest severity."""
    known = {}
    for finding in findings:
        key = (host, finding.rule, finding.device, finding.mountpoint)  # identity() of a decoded finding
        if key not in known or severity_rank(finding.severity) > severity_rank(known[key]):
            known[key] = finding.severity
    return {"status": status, "findings": known}


def compare_host(report, base):
    """Mark each finding of one host report "new" or "persisting" against a Baseline (the gate's
    fail_on_new reads the mark); return this host's part of the diff (diff() joins them)."""
    host, part = report["host"], {"new": [], "resolved": [], "persisting": 0, "not_compared": None}
    status_before = base.statuses.get(host)
    if report["status"] != "audited":
        if status_before == "audited":
            part["not_compared"] = {"host": host, "reason": "not audited in this run (%s)" % report["status"]}
        return part
    before = base.host_findings(host) if status_before is not None else None
    seen = set()
    for finding in report["findings"]:
        key = identity(host, finding)
        seen.add(key)
        if before is None:
            why = HOST_ADDED
        elif before["status"] != "audited":
            why = NOT_AUDITED_BEFORE
        elif key not in before["findings"]:
            why = NEW
        elif severity_rank(finding["severity"]) > severity_rank(before["findings"][key]):
            why = WORSENED
        else:
            finding["baseline"] = "persisting"
            part["persisting"] += 1
            continue
        finding["baseline"] = "new"
        entry = _entry(key, finding["severity"])
        entry.update(waived=bool(finding.get("waived")), why=why)
        if why == WORSENED:
            entry["was"] = before["findings"][key]
        part["new"].append(entry)
    if before is not None:
        part["resolved"] = [_entry(key, severity) for key, severity in before["findings"].items() if key not in seen]
    return part


def diff(base, hosts, parts):
    """The summary's `baseline` section from every host's compare_host part (in host order);
    hosts: this run's host names."""
    current = set(hosts)
    resolved = sorted((entry for part in parts for entry in part["resolved"]), key=_entry_order)
    return {"run_id": base.run_id, "path": base.path, "new": [e for part in parts for e in part["new"]],
            "resolved": resolved, "persisting": sum(part["persisting"] for part in parts),
            "hosts_added": sorted(current - set(base.statuses)), "hosts_removed": sorted(set(base.statuses) - current),
            "hosts_not_compared": [part["not_compared"] for part in parts if part["not_compared"]]}


def compare(host_reports, base):
    """The diff of this run's host reports against a Baseline (compare_host for each, then diff)."""
    parts = [compare_host(report, base) for report in host_reports]
    return diff(base, [r["host"] for r in host_reports], parts)


def _entry(key, severity):
    return {"host": key[0], "rule": key[1], "device": key[2], "mountpoint": key[3], "severity": severity}


def _entry_order(entry):
    return tuple("" if entry[k] is None else entry[k] for k in ("host", "rule", "device", "mountpoint"))
