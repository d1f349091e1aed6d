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

The baseline is read in full and checked before the run writes anything: a missing, corrupt,
truncated or wrong-schema baseline, or one whose report step did not finish (no summary.json),
is a ReportError (exit 2).
"""

import os

from . import contract, reports, severity_rank

# New findings name why they are new.
NEW, WORSENED, HOST_ADDED, NOT_AUDITED_BEFORE = "new", "worsened", "host_added", "not_audited_in_baseline"


def identity(host, finding):
    return (host, finding["rule"], finding.get("device"), finding.get("mountpoint"))


class Baseline:
    """An earlier run, checked: its id, folder and hosts (name: status, from its summary.json).
    Each host's findings are read from its report when that host is compared (host_findings), so
    the report step's workers read only the hosts they have."""

    def __init__(self, run_id, path, statuses):
        self.run_id, self.path, self.statuses = run_id, path, statuses

    def host_findings(self, host):
        """{identity: severity} of the host's findings in the baseline, and its status there."""
        file_path = os.path.join(self.path, "hosts", reports.safe_name(host) + ".json")
        # decoded into contract.HostReport, which checks every field it names and skips the rest
        # unbuilt: half the time of json.loads (measured: 335 against 705 us a host)
        name, entry = _host_entry(reports.read_json(file_path, "baseline host report", contract.HostReport))
        if name != host:
            raise reports.ReportError("baseline %s is the report of %r, not of %r" % (file_path, name, host))
        return entry

    def check_every_host(self):
        """Read and check every host report of the baseline now (the gate does, before it reads
        the run; the report step checks each host's when it compares that host)."""
        for host in self.statuses:
            self.host_findings(host)


def load(path, run_dir=None):
    """Read and check the baseline run folder at `path` (reports.read_complete_run: a folder whose
    report step did not finish is refused); run_dir (the run being made) must not be the baseline
    itself. The host reports are checked when each host is compared."""
    if run_dir and os.path.realpath(path) == os.path.realpath(run_dir):
        raise reports.ReportError("baseline %s is the run itself (%s): give an earlier run" % (path, run_dir))
    summary, statuses = reports.read_complete_run(path, "baseline")
    # The real folder: reports/latest moves on.
    return Baseline(str(summary.get("run_id") or os.path.basename(os.path.normpath(path))), os.path.realpath(path),
                    statuses)


def _host_entry(report):
    known = {}
    for finding in report.findings:
        key = (report.host, finding.rule, finding.device, finding.mountpoint)  # identity() of a decoded finding
        if key not in known or severity_rank(finding.severity) > severity_rank(known[key]):
            known[key] = finding.severity
    return report.host, {"status": report.status, "findings": known}


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
