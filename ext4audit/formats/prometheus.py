"""ext4audit.prom: the run in the Prometheus text format, for node_exporter's textfile collector.

Copy or link it into the collector's folder (--collector.textfile.directory); node_exporter
then serves these gauges (names and labels are a contract for dashboards and alerts: monitoring/
has ours, and tests/unit/test_monitoring.py checks them against what this module writes):

  ext4audit_findings{host,rule,severity}          unwaived findings (one per filesystem; host rules: one)
  ext4audit_failing_findings{host,rule,severity}  those that fail the host's own policy (the run's verdict)
  ext4audit_waived_findings{host,rule,severity}   waived findings
  ext4audit_host_fail_on{fail_on,host}            1 for the host's own fail_on (its policy's, else the run's)
  ext4audit_host_audited{host}                    1 audited, 0 not (unreachable, failed)
  ext4audit_probe_dspan_bytes{host,percentile}    the probe sweep's d-span at percentiles 50, 90 and 99
  ext4audit_probe_status{host,status}             1 for the host's probe status (probe.RECORD_STATUSES)
  ext4audit_last_run_timestamp_seconds            when the run's report was made (Unix time)
  ext4audit_verdict{verdict}                      1 for the run's verdict, 0 for the other two
  ext4audit_baseline_findings{change}             new, resolved and persisting since the baseline (with one)
  ext4audit_fleet_findings{rule,severity}         unwaived findings of every host, summed
  ext4audit_fleet_waived_findings{rule,severity}  waived findings of every host, summed
  ext4audit_fleet_hosts{status}                   hosts by status (audited, unreachable, failed)
  ext4audit_fleet_failing_hosts                   hosts that fail their own policy
  ext4audit_hosts_not_exported                    hosts left out of the per-host gauges (HOSTS_EXPORTED)

The per-host gauges (those with a `host` label) are written for every host of a fleet of up to
HOSTS_EXPORTED hosts. Past that, for the HOSTS_EXPORTED hosts most in need of attention (not audited
first, then the worst findings; reports.attention_order): 100,000 hosts of ~10 samples each would be a
million series from one scrape target, which is more than a Prometheus server should take from one
file, and the hosts a person acts on are the few at the top. The fleet gauges count every host.

The text is what prometheus_client's generate_latest makes of these gauges (tests/unit/
test_prometheus.py compares them), written here: prometheus_client builds an object for each of the
~15 samples a host has. Measured on 2026-11-29 (10,000 synthetic hosts, 157,000 lines, this 2-core
machine under load, two alternating rounds): 4.4-7.1 s through GaugeMetricFamily and generate_latest
(test_prometheus._by_prometheus_client), 0.8-1.4 s here. Label values are escaped as it escapes them
(backslash, double quote, newline), so host and mount-point strings cannot break the format.
`promtool check metrics` accepts the text (tests/unit/test_monitoring.py).
"""

import collections
import datetime
import functools
from typing import Dict, Iterable, List, Tuple

from prometheus_client.utils import floatToGoString

from ext4audit.model import contract
from ext4audit.formats import writers
from ext4audit.report import reports

# Not a `quantile` label: Prometheus keeps that for summaries (with _sum and _count, which a sweep's
# d-span digest does not have), and `promtool check metrics` rejects it on a gauge.
PERCENTILES = (("50", "p50"), ("90", "p90"), ("99", "p99"))
VERDICTS = ("pass", "fail", "incomplete")
# name, help text and label names (sorted, as generate_latest writes them) of each family, in the file's order
FAMILIES = (
    ("ext4audit_findings", "Unwaived findings of the last audit run", ("host", "rule", "severity")),
    ("ext4audit_failing_findings", "Unwaived findings of the last audit run that fail their host's own policy "
     "(at or above its fail_on; with fail_on_new, new ones only)", ("host", "rule", "severity")),
    ("ext4audit_waived_findings", "Waived findings of the last audit run", ("host", "rule", "severity")),
    ("ext4audit_host_fail_on", "1 for the severity at which the host's own policy fails (ext4_audit_fail_on)",
     ("fail_on", "host")),
    ("ext4audit_host_audited", "1 if the host was audited in the last run, 0 if not", ("host",)),
    ("ext4audit_probe_dspan_bytes", "Probe sweep d-span percentiles (bytes)", ("host", "percentile")),
    ("ext4audit_probe_status", "1 for the status of the host's probe", ("host", "status")),
    ("ext4audit_last_run_timestamp_seconds", "When the last audit run's report was made", ()),
    ("ext4audit_verdict", "1 for the last run's verdict", ("verdict",)),
    ("ext4audit_baseline_findings", "Findings by change since the baseline run", ("change",)),
    ("ext4audit_fleet_findings", "Unwaived findings of the last audit run on every host, summed", ("rule", "severity")),
    ("ext4audit_fleet_waived_findings", "Waived findings of the last audit run on every host, summed",
     ("rule", "severity")),
    ("ext4audit_fleet_hosts", "Hosts of the last audit run by status", ("status",)),
    ("ext4audit_fleet_failing_hosts", "Hosts of the last audit run that fail their own policy", ()),
    ("ext4audit_hosts_not_exported", "Hosts of the last audit run left out of the per-host gauges (past "
     "HOSTS_EXPORTED hosts, those least in need of attention)", ()),
)
HOSTS_EXPORTED = 10000  # per-host gauges for at most this many hosts (the module's docstring says why)


def _text(value):
    """A label value the UTF-8 text format can carry (lone surrogates become escapes)."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


@functools.lru_cache(maxsize=4096)  # rules, severities and counts repeat on every host
def _label(value):
    """A label value as the text format writes it (generate_latest: backslash, newline, double quote)."""
    return _text(value).replace("\\", r"\\").replace("\n", r"\n").replace('"', r'\"')


@functools.lru_cache(maxsize=1024)
def _value(value):
    return floatToGoString(value)


def samples(summary: dict, digests: Iterable[dict],
            hosts_exported: int = HOSTS_EXPORTED) -> Dict[str, List[Tuple[tuple, float]]]:
    """{family name: [(label values, value)]} of a run, from every host's reports.digest; the
    per-host families for at most hosts_exported hosts, those most in need of attention."""
    found = dict((name, []) for name, _, _ in FAMILIES)
    findings, waived = found["ext4audit_findings"], found["ext4audit_waived_findings"]
    digests = list(digests)
    _fleet(found, digests)
    every = len(digests)
    if every > hosts_exported:
        kept = set(id(d) for d in sorted(digests, key=lambda d: reports.attention_order(d["row"]))[:hosts_exported])
        digests = [d for d in digests if id(d) in kept]  # (in run order, as below the limit)
    found["ext4audit_hosts_not_exported"].append(((), every - len(digests)))
    for digest in digests:
        host = digest["host"]
        found["ext4audit_host_fail_on"].append(((digest["row"]["fail_on"], host), 1))
        found["ext4audit_host_audited"].append(((host,), 1 if digest["status"] == "audited" else 0))
        for (is_waived, rule, severity), count in digest["metrics"]:
            (waived if is_waived else findings).append(((host, rule, severity), count))
        if digest["status"] == "audited":  # as reports.verdict_of: "bad" fails the run, by the host's own policy
            failing = collections.Counter(digest["bad"])
            found["ext4audit_failing_findings"].extend(((host,) + key, failing[key]) for key in sorted(failing))
        if digest["row"]["probe"] is not None:
            found["ext4audit_probe_status"].append(((host, digest["row"]["probe"]), 1))
            for percentile, key in PERCENTILES:
                if digest["dspan"].get(key) is not None:
                    found["ext4audit_probe_dspan_bytes"].append(((host, percentile), digest["dspan"][key]))
    moment = datetime.datetime.strptime(summary["generated_at"], "%Y-%m-%dT%H:%M:%SZ")
    found["ext4audit_last_run_timestamp_seconds"].append(((), moment.replace(tzinfo=datetime.timezone.utc).timestamp()))
    found["ext4audit_verdict"].extend(((name,), 1 if summary["verdict"] == name else 0) for name in VERDICTS)
    diff = summary.get("baseline")
    if diff is not None:
        found["ext4audit_baseline_findings"].extend(
            [(("new",), len(diff["new"])), (("resolved",), len(diff["resolved"])), (("persisting",), diff["persisting"])])
    return found


def _fleet(found: dict, digests: List[dict]) -> None:
    """The fleet families: every host's findings summed by rule and severity, hosts by status."""
    counts = {False: collections.Counter(), True: collections.Counter()}
    statuses = collections.Counter()
    failing = 0
    for digest in digests:
        statuses[digest["status"]] += 1
        failing += bool(digest["status"] == "audited" and digest["bad"])  # as reports.verdict_of
        for (is_waived, rule, severity), count in digest["metrics"]:
            counts[is_waived][rule, severity] += count
    for is_waived, name in ((False, "ext4audit_fleet_findings"), (True, "ext4audit_fleet_waived_findings")):
        found[name].extend((key, counts[is_waived][key]) for key in sorted(counts[is_waived]))
    found["ext4audit_fleet_hosts"].extend(((status,), statuses[status]) for status in contract.HOST_STATUSES)
    found["ext4audit_fleet_failing_hosts"].append(((), failing))


def text(summary, host_reports):
    """The file's text for host reports held in memory."""
    policy = summary["policy"]
    return text_of(summary, [reports.digest(r, policy["fail_on"], policy.get("fail_on_new")) for r in host_reports])


def text_of(summary: dict, digests: Iterable[dict], hosts_exported: int = HOSTS_EXPORTED) -> str:
    """The file's text from every host's reports.digest."""
    found, out = samples(summary, digests, hosts_exported), []
    for name, documentation, labels in FAMILIES:
        if not found[name]:
            continue  # a family without samples says nothing
        out.append("# HELP %s %s\n# TYPE %s gauge\n" % (name, documentation, name))
        if labels:
            heads = [",%s=\"" % label for label in labels]
            heads[0] = "%s{%s=\"" % (name, labels[0])
            out.extend("".join(head + _label(value) + "\"" for head, value in zip(heads, values)) + "} "
                       + _value(sample) + "\n" for values, sample in found[name])
        else:
            out.extend("%s %s\n" % (name, _value(sample)) for _, sample in found[name])
    return "".join(out)


class Writer(writers.Writer):
    """No host parts: the metrics come from the digests."""

    file = "ext4audit.prom"

    def finish(self, out, summary, digests, parts):
        out.write(text_of(summary, digests))
