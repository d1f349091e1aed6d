"""monitoring/: the alert rules pass `promtool check rules` and their unit tests (`promtool test
rules`), and every metric and label the Grafana dashboard, the rules and the rules' test series
use is one the real exporter writes for a real report folder."""

import functools
import http.server
import json
import os
import re
import shutil
import subprocess
import threading
import time
import urllib.parse
import urllib.request

import promql_parser
import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from conftest import ROOT, free_port
from ext4audit.report import reports
from test_baseline import NOBARRIER, NODELALLOC_DISCARD, make_run, record
from test_html import PLAN, probe_record
from test_reports import cli
from test_rules import with_options

RULES = os.path.join(ROOT, "monitoring", "prometheus", "ext4-audit.rules.yml")
RULE_TESTS = os.path.join(ROOT, "monitoring", "prometheus", "ext4-audit.rules.test.yml")
DASHBOARD = os.path.join(ROOT, "monitoring", "grafana", "ext4-audit.json")
TARGET_LABELS = {"instance", "job"}  # Prometheus adds these to every scraped series
LABEL_VALUES = re.compile(r"label_values\((.+),\s*(\w+)\)\s*$")  # a Grafana query variable


def promtool_or_skip():
    path = shutil.which("promtool")
    if path is None:
        pytest.skip("promtool is missing: `make test-deps` installs Debian's prometheus package, which has it")
    return path


def promtool(*args):
    result = subprocess.run([promtool_or_skip()] + list(args), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=os.path.dirname(RULES))
    return result.returncode, result.stdout.decode(errors="replace")


# ------------------------------------------------------------------ the rules under promtool
def test_promtool_check_rules():
    rc, out = promtool("check", "rules", RULES)
    assert rc == 0, out
    assert "SUCCESS: 6 rules found" in out, out


def test_promtool_rule_unit_tests():
    rc, out = promtool("test", "rules", RULE_TESTS)
    assert rc == 0, out


def test_promtool_check_metrics_on_a_real_report(report_text):
    """Every family the exporter writes (the probe's d-span included: a `quantile` label is only a
    summary's) passes promtool's lint, as the real report step writes it."""
    result = subprocess.run([promtool_or_skip(), "check", "metrics"], input=report_text.encode("utf-8"),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert "ext4audit_probe_dspan_bytes" in report_text
    assert (result.returncode, result.stdout.decode(errors="replace")) == (0, "")


def rule_tests_against(tmp_path, rules_text):
    """promtool's verdict on the unit tests run against other rules."""
    shutil.copy(RULE_TESTS, str(tmp_path))
    (tmp_path / os.path.basename(RULES)).write_text(rules_text)
    result = subprocess.run([promtool_or_skip(), "test", "rules", os.path.basename(RULE_TESTS)], cwd=str(tmp_path),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return result.returncode, result.stdout.decode(errors="replace")


@pytest.mark.parametrize("alert, old, new", [
    ("Ext4AuditNewHighFinding", "and on (instance, job) (ext4audit_last_run_timestamp_seconds offset 1d)", ""),
    ("Ext4AuditNewHighFinding", 'severity=~"critical|high"', 'severity=~"critical|high|low"'),
    ("Ext4AuditHostNotAudited", "for: 1d", "for: 1h"),
    ("Ext4AuditReportStale", "> 86400", "> 90000"),
    ("Ext4AuditReportStale", "or absent_over_time(ext4audit_last_run_timestamp_seconds[1d])", ""),
    ("Ext4AuditVerdictFail", 'verdict="fail"', 'verdict=~"fail|incomplete"'),
    ("Ext4AuditVerdictIncomplete", 'verdict="incomplete"} == 1', 'verdict="fail"} == 1'),
    ("Ext4AuditHostFailsPolicy", "group_left (fail_on) ext4audit_host_fail_on",  # only in a failed run
     'group_left (fail_on) (ext4audit_host_fail_on and on (instance, job) ext4audit_verdict{verdict="fail"} == 1)'),
    ("Ext4AuditHostFailsPolicy", "ext4audit_failing_findings)", 'ext4audit_findings{severity=~"critical|high|medium"})'),
])
def test_rule_unit_tests_catch_a_broken_rule(tmp_path, alert, old, new):
    """Each alert's unit tests see it fire when it should not, or stay quiet when it should fire."""
    original = open(RULES, encoding="utf-8").read()
    assert old in original
    rc, out = rule_tests_against(tmp_path, original.replace(old, new))
    assert rc != 0 and "alertname: %s," % alert in out, out


# ------------------------------------------------------------------ the names the exporter writes
@pytest.fixture(scope="module")
def report_text(tmp_path_factory):
    """ext4audit.prom as `ext4audit report` writes it for a run with every family: findings (one
    waived), an unreachable host, a probe, a baseline, and a host whose own fail_on (medium) is
    below the run's (high): it fails by its medium finding."""
    tmp_path = tmp_path_factory.mktemp("monitoring")
    earlier = make_run(tmp_path, "run-1", [record("web-1", ("/data", NODELALLOC_DISCARD))])
    rc, out, err = cli("report", earlier)
    assert rc == 0, (out, err)  # discard is low: a pass
    own_policy = record("med-4", ("/data", with_options("commit=300")))  # EXT4_LONG_COMMIT: medium
    own_policy["policy"] = {"fail_on": "medium"}
    run = make_run(tmp_path, "run-2", [record("web-1", ("/data", NOBARRIER), ("/x", NODELALLOC_DISCARD)),
                                       record("db-2", ("/srv", NOBARRIER)),
                                       record("gone-3", status="unreachable"), own_policy])
    os.mkdir(os.path.join(run, "probe"))
    reports.write_json(os.path.join(run, "probe", "plan.json"), PLAN)
    reports.write_json(os.path.join(run, "probe", "web-1.json"), probe_record("web-1", "/data"))
    waivers = tmp_path / "waivers.yml"
    waivers.write_text("waivers:\n  - rule: EXT4_NOBARRIER\n    hosts: [db-2]\n    justification: battery-backed cache\n"
                       "    approver: storage-team\n    expires: 2099-01-01\n")
    rc, out, err = cli("report", run, "--baseline", earlier, "--waivers", str(waivers))
    assert rc == 2, (out, err)  # gone-3 was unreachable: incomplete
    return open(os.path.join(run, "ext4audit.prom"), encoding="utf-8").read()


@pytest.fixture(scope="module")
def exported(report_text):
    """{metric: label names} the exporter writes."""
    names = {}
    for family in text_string_to_metric_families(report_text):
        for sample in family.samples:
            names.setdefault(sample.name, set()).update(sample.labels)
    return names


def references(expr):
    """What a PromQL expression names, parsed by promql-parser (a syntax error fails the test;
    Grafana's variables sit in label values only): (metric, label names matched) of each vector
    selector, and the label names its aggregations group by."""
    selected, grouped = [], set()

    def visit(node):
        if isinstance(node, promql_parser.VectorSelector):
            assert node.name, "a selector without a metric name in %r" % expr
            selected.append((node.name, {m.name for m in node.matchers.matchers}))
        elif isinstance(node, promql_parser.AggregateExpr) and node.modifier is not None:
            grouped.update(node.modifier.labels)

    promql_parser.walk(promql_parser.parse(expr), visit)
    return selected, grouped


def unknown(uses, names):
    """Metrics and labels the expressions use that the exporter does not write. uses: (where,
    PromQL, label names shown: a legend's, an annotation's); names: {metric: label names}."""
    problems = []
    for where, expr, shown in uses:
        selected, grouped = references(expr)
        for metric, labels in selected:
            if metric not in names:
                problems.append("%s: metric %s" % (where, metric))
            else:
                problems += ["%s: label %s of %s" % (where, label, metric)
                             for label in sorted(labels - names[metric] - TARGET_LABELS)]
        if all(metric in names for metric, _ in selected):  # else the metric is the problem
            written = set(TARGET_LABELS).union(*(names[metric] for metric, _ in selected))
            problems += ["%s: label %s" % (where, label) for label in sorted((grouped | shown) - written)]
    return problems


def panels(dashboard):
    for panel in dashboard["panels"]:
        yield panel
        yield from panel.get("panels", [])  # a collapsed row holds its panels


def dashboard_queries(dashboard):
    """(where, PromQL, labels shown) of every panel target (its legend's {{label}}s) and every
    label_values(selector, label) query variable."""
    uses = [("panel %r %s" % (panel["title"], target["refId"]), target["expr"],
             set(re.findall(r"\{\{\s*(\w+)\s*\}\}", target.get("legendFormat", ""))))
            for panel in panels(dashboard) for target in panel.get("targets", [])]
    for variable in dashboard["templating"]["list"]:
        if variable["type"] == "query":
            assert variable["query"] == variable["definition"], variable["name"]  # the query as text: any Grafana reads it
            match = LABEL_VALUES.match(variable["query"])
            assert match, "variable %s: not a label_values(selector, label) query" % variable["name"]
            uses.append(("variable %s" % variable["name"], match.group(1), {match.group(2)}))
    return uses


def rule_queries():
    """(where, PromQL, the labels its annotations show) of every rule."""
    doc = yaml.safe_load(open(RULES, encoding="utf-8"))
    return [("rule %s" % rule["alert"], rule["expr"],
             set(re.findall(r"\$labels\.(\w+)", " ".join(rule.get("annotations", {}).values()))))
            for group in doc["groups"] for rule in group["rules"]]


def rule_test_series():
    doc = yaml.safe_load(open(RULE_TESTS, encoding="utf-8"))
    return [("test %r" % test["name"], series["series"], set())
            for test in doc["tests"] for series in test["input_series"]]


def load_dashboard(text=None):
    return json.loads(text if text is not None else open(DASHBOARD, encoding="utf-8").read())


def test_dashboard_and_rules_use_only_what_the_exporter_writes(exported):
    uses = dashboard_queries(load_dashboard()) + rule_queries() + rule_test_series()
    assert unknown(uses, exported) == []
    # The dashboard shows every family the exporter writes (and the report above has each).
    shown = {metric for _, expr, _ in dashboard_queries(load_dashboard()) for metric, _ in references(expr)[0]}
    assert shown == set(exported)


def test_a_renamed_metric_or_label_is_caught(exported):
    text = open(DASHBOARD, encoding="utf-8").read()
    renamed = load_dashboard(text.replace("ext4audit_probe_dspan_bytes", "ext4audit_probe_dspan"))
    assert unknown(dashboard_queries(renamed), exported) == [
        "panel 'Probe d-span percentiles per host' A: metric ext4audit_probe_dspan"]
    relabelled = load_dashboard(text.replace('ext4audit_verdict == 1"', 'ext4audit_verdict{state=\\"fail\\"} == 1"'))
    assert unknown(dashboard_queries(relabelled), exported) == [
        "panel 'Verdict' A: label state of ext4audit_verdict", "panel 'Verdict over time' A: label state of ext4audit_verdict"]
    # The exporter renaming a metric: the rules and their tests no longer match it.
    old = dict(exported)
    old["ext4audit_host_up"] = old.pop("ext4audit_host_audited")
    assert unknown(rule_queries() + rule_test_series(), old) == [
        "rule Ext4AuditHostNotAudited: metric ext4audit_host_audited"] + [
        "test 'host not audited for a day': metric ext4audit_host_audited"] * 3
    # ... or renaming a label a legend, an aggregation, an annotation or a matcher uses.
    old = dict(exported, ext4audit_probe_dspan_bytes={"host", "quantile"}, ext4audit_verdict={"state"},
               ext4audit_failing_findings={"host", "check", "severity"}, ext4audit_host_fail_on={"host", "policy"})
    assert unknown(dashboard_queries(load_dashboard()), old) == [
        "panel 'Verdict' A: label verdict", "panel 'Failing hosts' A: label fail_on", "panel 'Failing hosts' A: label rule",
        "panel 'Verdict over time' A: label verdict", "panel 'Probe d-span percentiles per host' A: label percentile"]
    assert unknown(rule_queries(), old) == [
        "rule Ext4AuditVerdictFail: label verdict of ext4audit_verdict",
        "rule Ext4AuditVerdictIncomplete: label verdict of ext4audit_verdict",
        "rule Ext4AuditHostFailsPolicy: label fail_on", "rule Ext4AuditHostFailsPolicy: label rule"]


# ------------------------------------------------------------------ the dashboard's shape
def test_dashboard_is_a_grafana_dashboard():
    dashboard = load_dashboard()
    assert isinstance(dashboard["schemaVersion"], int) and dashboard["schemaVersion"] >= 36  # Grafana 9 on
    assert dashboard["uid"] == "ext4-audit" and dashboard["title"]
    variables = {v["name"]: v for v in dashboard["templating"]["list"]}
    assert variables["datasource"]["type"] == "datasource" and variables["datasource"]["query"] == "prometheus"
    source = {"type": "prometheus", "uid": "${datasource}"}
    ids, cells = set(), set()
    for panel in panels(dashboard):
        where = "panel %r" % panel.get("title")
        assert panel["id"] not in ids, where
        ids.add(panel["id"])
        grid = panel["gridPos"]
        assert grid["x"] >= 0 and grid["w"] > 0 and grid["x"] + grid["w"] <= 24 and grid["h"] > 0, where
        here = {(x, y) for x in range(grid["x"], grid["x"] + grid["w"]) for y in range(grid["y"], grid["y"] + grid["h"])}
        assert not here & cells, "%s overlaps another panel" % where
        cells |= here
        if panel["type"] == "row":
            continue
        assert panel["datasource"] == source, where
        assert panel["targets"], where
        assert len({t["refId"] for t in panel["targets"]}) == len(panel["targets"]), where
        for target in panel["targets"]:
            assert target["datasource"] == source and target["expr"], where
            # Every $variable a query names is defined (Grafana would leave it as text).
            assert set(re.findall(r"\$(\w+)", target["expr"])) <= set(variables), where
    assert variables["host"]["datasource"] == source
    # Which findings fail a host is the run's word (each host's own fail_on), not a dashboard choice.
    assert set(variables) == {"datasource", "host"}
    assert not [expr for _, expr, _ in dashboard_queries(dashboard) if "severity=~" in expr]


# ------------------------------------------------------------------ a real Prometheus on a real report
@pytest.fixture
def prometheus_server(report_text, tmp_path):
    """Debian's prometheus scraping the report every second (as node_exporter would serve it, at
    /metrics of a local HTTP server) and evaluating the rules; yields a query function."""
    server = shutil.which("prometheus")
    if server is None:
        pytest.skip("prometheus is missing: `make test-deps` installs Debian's prometheus package")
    served = tmp_path / "served"
    served.mkdir()
    (served / "metrics").write_text(report_text, encoding="utf-8")
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(served))
    exporter = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=exporter.serve_forever, daemon=True).start()
    (tmp_path / "prometheus.yml").write_text(yaml.safe_dump({
        "global": {"scrape_interval": "1s", "evaluation_interval": "1s"},
        "rule_files": [RULES],
        "scrape_configs": [{"job_name": "node", "static_configs": [
            {"targets": ["127.0.0.1:%d" % exporter.server_address[1]]}]}]}))
    address = "127.0.0.1:%d" % free_port()
    log = open(str(tmp_path / "prometheus.log"), "wb")
    process = subprocess.Popen([server, "--config.file=%s" % (tmp_path / "prometheus.yml"),
                                "--storage.tsdb.path=%s" % (tmp_path / "data"), "--web.listen-address=" + address],
                               stdout=log, stderr=subprocess.STDOUT)

    def api(path, **params):
        url = "http://%s/api/v1/%s?%s" % (address, path, urllib.parse.urlencode(params))
        with urllib.request.urlopen(url, timeout=10) as response:
            body = json.load(response)
        assert body["status"] == "success", body
        return body["data"]

    try:
        deadline = time.monotonic() + 60
        while True:  # until a scrape has landed and the rules were evaluated after it
            try:
                if api("query", query="ext4audit_verdict")["result"] and all(
                        not rule["lastEvaluation"].startswith("0001-")  # Go's zero time: not yet
                        for group in api("rules")["groups"] for rule in group["rules"]):
                    break
            except OSError:
                pass
            assert process.poll() is None and time.monotonic() < deadline, open(str(tmp_path / "prometheus.log")).read()
            time.sleep(0.5)
        time.sleep(1.5)  # one more evaluation, now that the scrape is in
        yield api
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()
        exporter.shutdown()
        exporter.server_close()


def test_a_real_prometheus_answers_the_dashboard_and_evaluates_the_rules(prometheus_server):
    """Every dashboard query (Grafana's variables at their defaults: all hosts) has an answer from
    the real report, and Prometheus evaluates every rule on it without an error."""
    dashboard = load_dashboard()
    values = {v["name"]: v.get("allValue") if v.get("includeAll") else v["current"].get("value")
              for v in dashboard["templating"]["list"] if v["type"] != "datasource"}
    for where, expr, _ in dashboard_queries(dashboard):
        query = re.sub(r"\$(\w+)", lambda match: values[match.group(1)], expr)
        assert prometheus_server("query", query=query)["result"], "%s: no data for %s" % (where, query)
    rules = [rule for group in prometheus_server("rules")["groups"] for rule in group["rules"]]
    assert sorted(rule["name"] for rule in rules) == sorted(where.split()[1] for where, _, _ in rule_queries())
    assert [(rule["name"], rule["health"], rule.get("lastError")) for rule in rules if rule["health"] != "ok"] == []
    # The report's verdict is incomplete (an unreachable host) and it is fresh: the verdict fires,
    # and so does each host that fails its own policy (web-1 at the run's high, med-4 at its own
    # medium); gone-3's for: 1d has not passed, and nothing is new without a day to compare with.
    alerts = sorted(((alert["state"], dict(alert["labels"], instance=None)) for rule in rules for alert in rule["alerts"]),
                    key=lambda alert: sorted(alert[1].items()))
    target = {"instance": None, "job": "node"}
    assert alerts == [
        ("firing", dict(target, alertname="Ext4AuditHostFailsPolicy", host="web-1", fail_on="high", severity="critical")),
        ("firing", dict(target, alertname="Ext4AuditHostFailsPolicy", host="med-4", fail_on="medium", severity="critical")),
        ("pending", dict(target, alertname="Ext4AuditHostNotAudited", host="gone-3", severity="warning")),
        ("firing", dict(target, alertname="Ext4AuditVerdictIncomplete", verdict="incomplete", severity="warning"))]
