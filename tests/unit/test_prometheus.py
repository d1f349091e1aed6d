"""ext4audit.prom: parsed back with prometheus_client's text-format parser; hostile names round-trip."""

import calendar
import json
import os
import subprocess
import time

from hypothesis import given, settings, strategies as st

from prometheus_client.parser import text_string_to_metric_families

from ext4audit.formats import prometheus
from ext4audit.report import reports
from test_baseline import NOBARRIER, NODELALLOC_DISCARD, make_run, record
from test_rules import with_options
from test_monitoring import promtool_or_skip
from test_reports import HOSTILE, NOW, cli

EVIL = 'we"b\\01\nx{y="z"} 1'  # a quote, a backslash, a newline and text that looks like a sample


def samples(text):
    """{(metric, frozenset(labels)): value}, every sample once."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            key = (sample.name, frozenset(sample.labels.items()))
            assert key not in found, "duplicate sample %s" % (key,)
            found[key] = sample.value
    return found


def labels(**pairs):
    return frozenset(pairs.items())


def test_prom_file_from_a_real_report(tmp_path):
    waivers = tmp_path / "waivers.yml"
    waivers.write_text("waivers:\n  - rule: EXT4_NOBARRIER\n    hosts: [quiet]\n    justification: battery-backed cache\n"
                       "    approver: storage-team\n    expires: 2099-01-01\n")
    run = make_run(tmp_path, "run-1", [record(EVIL, (HOSTILE, NOBARRIER), ("/srv", NOBARRIER), ("/x", NODELALLOC_DISCARD)),
                                       record("quiet", ("/data", NOBARRIER)),
                                       record("gone", status="unreachable")])
    rc, out, err = cli("report", run, "--waivers", str(waivers))
    assert rc == 2, (out, err)
    text = open(os.path.join(run, "ext4audit.prom"), encoding="utf-8").read()
    got = samples(text)
    summary = json.load(open(os.path.join(run, "summary.json")))

    # Findings by host, rule and severity: the hostile host name comes back exactly.
    assert got[("ext4audit_findings", labels(host=EVIL, rule="EXT4_NOBARRIER", severity="high"))] == 2
    assert got[("ext4audit_findings", labels(host=EVIL, rule="EXT4_ONLINE_DISCARD", severity="low"))] == 1
    assert ("ext4audit_findings", labels(host="quiet", rule="EXT4_NOBARRIER", severity="high")) not in got
    assert got[("ext4audit_waived_findings", labels(host="quiet", rule="EXT4_NOBARRIER", severity="high"))] == 1
    # Every unwaived finding is counted once.
    total = sum(v for (name, _), v in got.items() if name == "ext4audit_findings")
    assert total == sum(summary["counts"]["by_severity"].values())
    assert got[("ext4audit_host_audited", labels(host="gone"))] == 0
    assert got[("ext4audit_host_audited", labels(host=EVIL))] == 1
    assert [k[1] for k, v in got.items() if k[0] == "ext4audit_verdict" and v == 1] == [labels(verdict="incomplete")]
    stamp = calendar.timegm(time.strptime(summary["generated_at"], "%Y-%m-%dT%H:%M:%SZ"))
    assert got[("ext4audit_last_run_timestamp_seconds", frozenset())] == stamp
    assert "ext4audit_baseline_findings" not in text  # no baseline given


def test_a_host_failing_its_own_fail_on_in_an_incomplete_run(tmp_path):
    """The run's default fail_on is high; own-policy's is medium and its one finding is medium
    (EXT4_LONG_COMMIT), default-policy's same finding does not fail it, and an unreachable host
    makes the run incomplete. The textfile says who fails by their own policy, as the verdict does."""
    own = record("own-policy", ("/data", with_options("commit=300")))
    own["policy"] = {"fail_on": "medium"}
    run = make_run(tmp_path, "run-1", [own, record("default-policy", ("/data", with_options("commit=300"))),
                                       record("gone", status="unreachable")])
    rc, out, err = cli("report", run)
    assert rc == 2, (out, err)
    summary = json.load(open(os.path.join(run, "summary.json")))
    assert (summary["verdict"], summary["policy"]["fail_on"]) == ("incomplete", "high")
    assert "1 finding(s) at or above each host's fail_on on 1 host(s)" in summary["reason"]
    got = samples(open(os.path.join(run, "ext4audit.prom"), encoding="utf-8").read())
    medium = dict(rule="EXT4_LONG_COMMIT", severity="medium")
    assert got[("ext4audit_findings", labels(host="own-policy", **medium))] == 1
    assert got[("ext4audit_findings", labels(host="default-policy", **medium))] == 1
    assert {dict(k[1])["host"]: v for k, v in got.items() if k[0] == "ext4audit_failing_findings"} == {"own-policy": 1}
    assert got[("ext4audit_failing_findings", labels(host="own-policy", **medium))] == 1
    fail_on = {dict(k[1])["host"]: dict(k[1])["fail_on"] for k, v in got.items() if k[0] == "ext4audit_host_fail_on"}
    assert fail_on == {"own-policy": "medium", "default-policy": "high", "gone": "high"}
    assert {k for k, v in got.items() if k[0] == "ext4audit_host_fail_on" and v != 1} == set()


def test_failing_findings_follow_fail_on_new():
    """With fail_on_new only new findings fail a host (reports.policy_failures): so the gauge."""
    high = {"rule": "EXT4_NOBARRIER", "severity": "high", "waived": False, "mountpoint": "/", "device": "/dev/a"}
    hosts = [{"host": "old", "status": "audited", "findings": [dict(high, baseline="persisting")]},
             {"host": "new", "status": "audited", "findings": [dict(high, baseline="new"), dict(high, mountpoint="/b",
                                                                                              baseline="new")]}]
    summary = reports.summarize(hosts, "run-9", "high", True, NOW, fail_on_new=True)
    got = samples(prometheus.text(summary, hosts))
    assert {k: v for k, v in got.items() if k[0] == "ext4audit_failing_findings"} == {
        ("ext4audit_failing_findings", labels(host="new", rule="EXT4_NOBARRIER", severity="high")): 2}
    assert got[("ext4audit_findings", labels(host="old", rule="EXT4_NOBARRIER", severity="high"))] == 1


def test_past_hosts_exported_the_fleet_is_counted_and_the_hosts_in_need_are_kept():
    """A fleet larger than the per-host limit: the per-host gauges cover the hosts most in need of
    attention (the unreachable one, then the worst findings), the fleet gauges every host, and the
    file says how many were left out; promtool accepts it."""
    high = {"rule": "EXT4_NOBARRIER", "severity": "high", "waived": False, "mountpoint": "/", "device": "/dev/a"}
    low = dict(high, rule="EXT4_ONLINE_DISCARD", severity="low")
    hosts = ([{"host": "quiet-%02d" % i, "status": "audited", "findings": [low]} for i in range(20)]
             + [{"host": "bad-1", "status": "audited", "findings": [high, dict(high, mountpoint="/b")]},
                {"host": "waived-1", "status": "audited", "findings": [dict(high, waived=True)]},
                {"host": "gone", "status": "unreachable", "findings": []}])
    summary = reports.summarize(hosts, "run-9", "high", True, NOW)
    digests = [reports.digest(h, "high") for h in hosts]
    text = prometheus.text_of(summary, digests, hosts_exported=3)
    got = samples(text)
    per_host = {dict(k[1])["host"] for k in got if "host" in dict(k[1])}
    assert per_host == {"gone", "bad-1", "quiet-00"}  # attention order: not audited, worst, then by name
    assert got[("ext4audit_hosts_not_exported", frozenset())] == 20
    assert got[("ext4audit_fleet_findings", labels(rule="EXT4_ONLINE_DISCARD", severity="low"))] == 20
    assert got[("ext4audit_fleet_findings", labels(rule="EXT4_NOBARRIER", severity="high"))] == 2
    assert got[("ext4audit_fleet_waived_findings", labels(rule="EXT4_NOBARRIER", severity="high"))] == 1
    assert [got[("ext4audit_fleet_hosts", labels(status=s))] for s in ("audited", "unreachable", "failed")] == [22, 1, 0]
    assert got[("ext4audit_fleet_failing_hosts", frozenset())] == 1
    # Under the limit every host is there, and nothing is left out.
    whole = samples(prometheus.text_of(summary, digests))
    assert {dict(k[1])["host"] for k in whole if "host" in dict(k[1])} == {h["host"] for h in hosts}
    assert whole[("ext4audit_hosts_not_exported", frozenset())] == 0
    checked = subprocess.run([promtool_or_skip(), "check", "metrics"], input=text.encode("utf-8"),
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert checked.returncode == 0, checked.stdout


def probe_section(status, dspan=None, runs=256):
    sweep = {"runs_completed": runs, "runs_planned": 256, "dspan": dspan} if dspan is not None else None
    return {"status": status, "reason": None, "sweep": sweep, "confirmations": [], "errors": []}


def test_probe_percentiles_status_and_baseline():
    hosts = [
        {"host": EVIL, "status": "audited", "findings": [], "probe": probe_section(
            "ran", {"p50": 1048576, "p90": 3.5e6, "p99": 123456789})},
        {"host": "short", "status": "audited", "findings": [], "probe": probe_section("partial", {"p50": None}, runs=0)},
        {"host": "noprobe", "status": "audited", "findings": []},
    ]
    summary = reports.summarize(hosts, "run-9", "high", True, NOW,
                                baseline={"run_id": "run-8", "new": [{}], "resolved": [{}, {}], "persisting": 7,
                                          "hosts_added": [], "hosts_removed": []})
    got = samples(prometheus.text(summary, hosts))
    assert got[("ext4audit_probe_dspan_bytes", labels(host=EVIL, percentile="50"))] == 1048576
    assert got[("ext4audit_probe_dspan_bytes", labels(host=EVIL, percentile="90"))] == 3.5e6
    assert got[("ext4audit_probe_dspan_bytes", labels(host=EVIL, percentile="99"))] == 123456789
    assert not [k for k in got if k[0] == "ext4audit_probe_dspan_bytes" and dict(k[1])["host"] != EVIL]
    assert got[("ext4audit_probe_status", labels(host=EVIL, status="ran"))] == 1
    assert got[("ext4audit_probe_status", labels(host="short", status="partial"))] == 1
    assert not [k for k in got if k[0] == "ext4audit_probe_status" and dict(k[1])["host"] == "noprobe"]
    assert got[("ext4audit_last_run_timestamp_seconds", frozenset())] == NOW.timestamp()
    assert got[("ext4audit_verdict", labels(verdict="pass"))] == 1
    assert [got[("ext4audit_baseline_findings", labels(change=c))] for c in ("new", "resolved", "persisting")] == [1, 2, 7]


def test_label_values_round_trip():
    names = [EVIL, "back\\slash", 'quote"', "new\nline", "tab\tand unicode \u00e9\u4e2d", "lone \udcff surrogate"]
    hosts = [{"host": name, "status": "audited", "findings": [
        {"rule": "EXT4_NOBARRIER", "severity": "high", "waived": False, "mountpoint": "/", "device": "/dev/a"}]}
        for name in names]
    summary = reports.summarize(hosts, "run-9", "high", True, NOW)
    got = samples(prometheus.text(summary, hosts))
    back = sorted(dict(k[1])["host"] for k in got if k[0] == "ext4audit_findings")
    assert back == sorted(names[:-1] + ["lone \\udcff surrogate"])


def test_promtool_accepts_hostile_names_and_every_family():
    """`promtool check metrics` (Prometheus's own parser and lint) on a file with every family,
    hostile host and rule names, a probe and a baseline."""
    promtool = promtool_or_skip()
    hosts = [{"host": name, "status": "audited", "policy": {"fail_on": "low"}, "findings": [
        {"rule": "EXT4_NOBARRIER", "severity": "high", "waived": False, "mountpoint": name, "device": "/dev/a"},
        {"rule": "EXT4_ONLINE_DISCARD", "severity": "low", "waived": True, "mountpoint": "/", "device": "/dev/a"}],
        "probe": probe_section("ran", {"p50": 1048576, "p90": 3.5e6, "p99": 123456789})}
        for name in (EVIL, "tab\tand unicode \u00e9\u4e2d", "lone \udcff surrogate")]
    hosts.append({"host": "gone", "status": "unreachable", "findings": []})
    summary = reports.summarize(hosts, "run-9", "high", True, NOW,
                                baseline={"run_id": "run-8", "new": [{}], "resolved": [], "persisting": 1,
                                          "hosts_added": [], "hosts_removed": []})
    text = prometheus.text(summary, hosts)
    assert {name for name, _, _ in prometheus.FAMILIES} == {family.name for family in
                                                            text_string_to_metric_families(text)}
    result = subprocess.run([promtool, "check", "metrics"], input=text.encode("utf-8"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert (result.returncode, result.stdout.decode(errors="replace")) == (0, "")


def _by_prometheus_client(summary, digests):
    """The file as prometheus_client wrote it (GaugeMetricFamily, generate_latest) before
    prometheus.text_of wrote the same text itself."""
    from prometheus_client.core import GaugeMetricFamily
    from prometheus_client.exposition import generate_latest

    families = []
    for name, documentation, labels in prometheus.FAMILIES:
        family = GaugeMetricFamily(name, documentation, labels=list(labels))
        for values, value in prometheus.samples(summary, digests)[name]:
            family.add_metric([prometheus._text(v) for v in values], value)
        families.append(family)

    class Run:
        def collect(self):
            return iter([family for family in families if family.samples])
    return generate_latest(Run()).decode("utf-8")


_LABEL = st.text(st.sampled_from('ab\\"\n{}= \u00e9\udc80'), max_size=6) | st.just(EVIL)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.fixed_dictionaries({
    "host": _LABEL, "status": st.sampled_from(["audited", "unreachable"]),
    "metrics": st.lists(st.tuples(st.tuples(st.booleans(), _LABEL, st.sampled_from(["info", "high"])),
                                  st.integers(1, 10 ** 6)), max_size=3),
    "row": st.fixed_dictionaries({"probe": st.none() | _LABEL, "fail_on": st.sampled_from(["medium", "high"])}),
    "bad": st.lists(st.tuples(_LABEL, st.sampled_from(["medium", "high"])), max_size=3),
    "dspan": st.dictionaries(st.sampled_from(["p50", "p90", "p99"]),
                             st.none() | st.integers(0, 2 ** 40) | st.floats(0, 1e12))}), max_size=4),
    st.sampled_from(["pass", "fail", "incomplete"]), st.none() | st.integers(0, 5))
def test_the_text_is_what_prometheus_client_wrote(digests, verdict, changes):
    """text_of writes the text format itself (prometheus_client made an object per sample): the
    same text as generate_latest, for hostile label values, every family and none."""
    summary = {"generated_at": "2026-11-25T01:02:03Z", "verdict": verdict, "baseline": None if changes is None else
               {"new": [{}] * changes, "resolved": [], "persisting": changes * 7}}
    assert prometheus.text_of(summary, digests) == _by_prometheus_client(summary, digests)
