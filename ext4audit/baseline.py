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
truncated or wrong-schema baseline is a ReportError (exit 2).
"""

import glob
import os

from . import SEVERITIES, reports, severity_rank

# New findings name why they are new.
NEW, WORSENED, HOST_ADDED, NOT_AUDITED_BEFORE = "new", "worsened", "host_added", "not_audited_in_baseline"


def identity(host, finding):
    return (host, finding["rule"], finding.get("device"), finding.get("mountpoint"))


class Baseline:
    """What a comparison needs from an earlier run: per host its status and each finding's
    identity with its severity (the rest of the host reports is not kept)."""

    def __init__(self, run_id, path, hosts):
        self.run_id, self.path, self.hosts = run_id, path, hosts


def load(path, run_dir=None):
    """Read and check the baseline run folder at `path`; run_dir (the run being made) must not
    be the baseline itself."""
    if not os.path.isdir(path):
        raise reports.ReportError("baseline %s: %s" % (path, "not a folder" if os.path.exists(path) else "not found"))
    if run_dir and os.path.realpath(path) == os.path.realpath(run_dir):
        raise reports.ReportError("baseline %s is the run itself (%s): give an earlier run" % (path, run_dir))
    summary = reports.read_json(os.path.join(path, "summary.json"), "baseline summary")
    if not isinstance(summary, dict) or summary.get("schema") != reports.SUMMARY_SCHEMA:
        raise reports.ReportError("baseline %s/summary.json is not a %s document" % (path, reports.SUMMARY_SCHEMA))
    listed = summary.get("hosts")
    if not isinstance(listed, list) or not all(isinstance(h, dict) and isinstance(h.get("host"), str) for h in listed):
        raise reports.ReportError("baseline %s/summary.json has no valid hosts list" % path)
    hosts = {}
    for file_path in sorted(glob.glob(os.path.join(path, "hosts", "*.json"))):
        host, entry = _host_entry(file_path, reports.read_json(file_path, "baseline host report"))
        if host in hosts:
            raise reports.ReportError("baseline %s: a second report for host %r" % (file_path, host))
        hosts[host] = entry
    # A truncated copy (an artifact cut short, a folder half copied) lacks host reports.
    wanted = set(h["host"] for h in listed)
    if wanted != set(hosts):
        missing, extra = sorted(wanted - set(hosts)), sorted(set(hosts) - wanted)
        raise reports.ReportError("baseline %s is incomplete: summary.json lists %d host(s), hosts/ has %d%s%s" % (
            path, len(wanted), len(hosts), "; no report for %s" % _names(missing) if missing else "",
            "; not in the summary: %s" % _names(extra) if extra else ""))
    # The real folder: reports/latest moves on.
    return Baseline(str(summary.get("run_id") or os.path.basename(os.path.normpath(path))), os.path.realpath(path), hosts)


def _host_entry(path, report):
    if not isinstance(report, dict) or report.get("schema") != reports.HOST_SCHEMA:
        raise reports.ReportError("baseline %s is not a %s document" % (path, reports.HOST_SCHEMA))
    host, status, findings = report.get("host"), report.get("status"), report.get("findings")
    if not isinstance(host, str) or not isinstance(status, str) or not isinstance(findings, list):
        raise reports.ReportError("baseline %s: host, status or findings missing or of the wrong type" % path)
    known = {}
    for number, finding in enumerate(findings, 1):
        if not (isinstance(finding, dict) and isinstance(finding.get("rule"), str)
                and finding.get("severity") in SEVERITIES
                and all(finding.get(k) is None or isinstance(finding[k], str) for k in ("device", "mountpoint"))):
            raise reports.ReportError("baseline %s: finding #%d has no valid rule, severity, device or mountpoint"
                                      % (path, number))
        key = identity(host, finding)
        if key not in known or severity_rank(finding["severity"]) > severity_rank(known[key]):
            known[key] = finding["severity"]
    return host, {"status": status, "findings": known}


def compare(host_reports, base):
    """The diff of this run's host reports against a Baseline. Marks every finding of this run
    with "baseline": "new" or "persisting" (the gate's fail_on_new reads it) and returns the
    summary's `baseline` section."""
    new, persisting, seen, not_compared = [], 0, set(), []
    current = set(r["host"] for r in host_reports)
    for report in host_reports:
        host, before = report["host"], base.hosts.get(report["host"])
        if report["status"] != "audited":
            if before is not None and before["status"] == "audited":
                not_compared.append({"host": host, "reason": "not audited in this run (%s)" % report["status"]})
            continue
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
                persisting += 1
                continue
            finding["baseline"] = "new"
            entry = _entry(key, finding["severity"])
            entry.update(waived=bool(finding.get("waived")), why=why)
            if why == WORSENED:
                entry["was"] = before["findings"][key]
            new.append(entry)
    compared = set(r["host"] for r in host_reports if r["status"] == "audited")
    resolved = [_entry(key, severity) for host in sorted(base.hosts) if host in compared
                for key, severity in sorted(base.hosts[host]["findings"].items(), key=_sort_key)
                if key not in seen]
    return {"run_id": base.run_id, "path": base.path, "new": new, "resolved": resolved, "persisting": persisting,
            "hosts_added": sorted(current - set(base.hosts)), "hosts_removed": sorted(set(base.hosts) - current),
            "hosts_not_compared": not_compared}


def _entry(key, severity):
    return {"host": key[0], "rule": key[1], "device": key[2], "mountpoint": key[3], "severity": severity}


def _sort_key(item):
    return tuple("" if part is None else part for part in item[0])


def _names(hosts):
    return ", ".join(repr(h) for h in hosts[:5]) + (", ..." if len(hosts) > 5 else "")
