"""ext4audit.prom: the run in the Prometheus text format, for node_exporter's textfile collector.

Copy or link it into the collector's folder (--collector.textfile.directory); node_exporter
then serves these gauges (names and labels are a contract for dashboards and alerts: monitoring/
has ours, and tests/unit/test_monitoring.py checks them against what this module writes):

  ext4audit_findings{host,rule,severity}          unwaived findings (one per filesystem; host rules: one)
  ext4audit_waived_findings{host,rule,severity}   waived findings
  ext4audit_host_audited{host}                    1 audited, 0 not (unreachable, failed)
  ext4audit_probe_dspan_bytes{host,quantile}      the probe sweep's d-span at 0.5, 0.9 and 0.99
  ext4audit_probe_status{host,status}             1 for the host's probe status (probe.RECORD_STATUSES)
  ext4audit_last_run_timestamp_seconds            when the run's report was made (Unix time)
  ext4audit_verdict{verdict}                      1 for the run's verdict, 0 for the other two
  ext4audit_baseline_findings{change}             new, resolved and persisting since the baseline (with one)

The text is made by prometheus_client, which escapes label values (backslash, double quote,
newline), so host and mount-point strings cannot break the format.
"""

import datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector

from . import reports, writers

QUANTILES = (("0.5", "p50"), ("0.9", "p90"), ("0.99", "p99"))
VERDICTS = ("pass", "fail", "incomplete")


def _text(value):
    """A label value the UTF-8 text format can carry (lone surrogates become escapes)."""
    return str(value).encode("utf-8", "backslashreplace").decode("utf-8")


class _Run(Collector):
    def __init__(self, families):
        self.families = families

    def collect(self):
        return iter(self.families)


def families(summary, digests):
    """The metric families of a run, from every host's reports.digest."""
    findings = GaugeMetricFamily("ext4audit_findings", "Unwaived findings of the last audit run",
                                 labels=["host", "rule", "severity"])
    waived = GaugeMetricFamily("ext4audit_waived_findings", "Waived findings of the last audit run",
                               labels=["host", "rule", "severity"])
    audited = GaugeMetricFamily("ext4audit_host_audited", "1 if the host was audited in the last run, 0 if not",
                                labels=["host"])
    dspan = GaugeMetricFamily("ext4audit_probe_dspan_bytes", "Probe sweep d-span quantiles (bytes)",
                              labels=["host", "quantile"])
    probe_status = GaugeMetricFamily("ext4audit_probe_status", "1 for the status of the host's probe",
                                     labels=["host", "status"])
    for digest in digests:
        host = _text(digest["host"])
        audited.add_metric([host], 1 if digest["status"] == "audited" else 0)
        for (is_waived, rule, severity), count in digest["metrics"]:
            (waived if is_waived else findings).add_metric([host, _text(rule), severity], count)
        if digest["row"]["probe"] is not None:
            probe_status.add_metric([host, _text(digest["row"]["probe"])], 1)
            for quantile, key in QUANTILES:
                if digest["dspan"].get(key) is not None:
                    dspan.add_metric([host, quantile], digest["dspan"][key])
    moment = datetime.datetime.strptime(summary["generated_at"], "%Y-%m-%dT%H:%M:%SZ")
    last_run = GaugeMetricFamily("ext4audit_last_run_timestamp_seconds", "When the last audit run's report was made",
                                 value=moment.replace(tzinfo=datetime.timezone.utc).timestamp())
    verdict = GaugeMetricFamily("ext4audit_verdict", "1 for the last run's verdict", labels=["verdict"])
    for name in VERDICTS:
        verdict.add_metric([name], 1 if summary["verdict"] == name else 0)
    result = [findings, waived, audited, dspan, probe_status, last_run, verdict]
    diff = summary.get("baseline")
    if diff is not None:
        changes = GaugeMetricFamily("ext4audit_baseline_findings", "Findings by change since the baseline run",
                                    labels=["change"])
        for change in ("new", "resolved"):
            changes.add_metric([change], len(diff[change]))
        changes.add_metric(["persisting"], diff["persisting"])
        result.append(changes)
    return [family for family in result if family.samples]  # a family without samples says nothing


def text(summary, host_reports):
    """The file's text for host reports held in memory."""
    policy = summary["policy"]
    return text_of(summary, [reports.digest(r, policy["fail_on"], policy.get("fail_on_new")) for r in host_reports])


def text_of(summary, digests):
    return generate_latest(_Run(families(summary, digests))).decode("utf-8")


class Writer(writers.Writer):
    """No host parts: the metrics come from the digests."""

    file = "ext4audit.prom"

    def finish(self, out, summary, digests, parts):
        out.write(text_of(summary, digests))
