"""summary.md at fleet size (issue 28): under GitHub's 1 MiB job-summary limit at 10,000 hosts,
built on the findings' groups (finding_groups), every rule with a finding named with its host
count, and a note that says what was cut. The hosts are real host reports of bench/aggregate.py's
synthetic fleet (its generator, the real report command), cloned to 10,000 host names."""

import datetime
import importlib.util
import json
import os
import re

import pytest

from conftest import ROOT
from ext4audit.formats import markdown
from ext4audit.report import finding_groups
from ext4audit.report import reports
from test_reports import cli

GITHUB_LIMIT = 1024 * 1024  # bytes of a step's job summary GitHub accepts
TEMPLATE_HOSTS = 300  # >= fleet.PARALLEL_FROM: the report step shards them over its workers


def _aggregate():
    spec = importlib.util.spec_from_file_location("bench_aggregate", os.path.join(ROOT, "bench", "aggregate.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def real_run(tmp_path_factory):
    """A run folder of TEMPLATE_HOSTS hosts of bench/aggregate.py's fleet, reported by the real
    command with two workers (markdown only)."""
    aggregate = _aggregate()
    run = str(tmp_path_factory.mktemp("fleet") / "run")
    aggregate.write_run(run, aggregate.fleet(TEMPLATE_HOSTS, 20261122, baseline=False))
    rc, out, err = cli("report", run, "--formats", "markdown", "--fail-on", "high", "--jobs", "2")
    assert rc in (0, 1, 2) and "error" not in err, (out, err)
    return run


def host_reports(run):
    summary = reports.read_json(os.path.join(run, "summary.json"), "summary")
    return summary, [reports.read_json(os.path.join(run, "hosts", reports.safe_name(row["host"]) + ".json"), "host")
                     for row in summary["hosts"]]


def test_the_workers_groups_merged_are_one_pass_over_the_hosts(real_run):
    summary, hosts = host_reports(real_run)
    shown = [r for r in hosts if r["host"] in set(row["host"] for row in sorted(
        summary["hosts"], key=reports.attention_order)[:markdown.MD_HOSTS])]
    text = open(os.path.join(real_run, "summary.md"), encoding="utf-8").read()
    assert text == markdown.document(summary, shown, _groups(hosts))
    assert "### Findings by group" in text and "more group(s)" not in text


def _groups(hosts):
    groups = finding_groups.FindingGroups(False, markdown.GROUP_HOSTS)
    for report in hosts:
        groups.add_host(report)
    return groups


def ten_thousand(templates):
    """10,000 host reports made of the templates; a third of the hosts have a data filesystem at
    a mount point of their own (as per-tenant mounts are), so thousands of groups exist."""
    fleet = []
    for n in range(10000):
        template = templates[n % len(templates)]
        name = "<b>host</b>|%d" % n if n == 0 else "host-%05d.dc%d.example.org" % (n, n % 4)
        findings = template["findings"]
        if n % 3 == 0:
            mine = "/srv/tenant-%05d" % n
            findings = [dict(f, mountpoint=mine, message=f["message"].replace("/srv/data1", mine))
                        if f.get("mountpoint") == "/srv/data1" else f for f in findings]
        fleet.append(dict(template, host=name, findings=findings))
    return fleet


def test_summary_md_at_10000_hosts_fits_githubs_limit_and_names_every_rule(real_run):
    _, templates = host_reports(real_run)
    fleet = ten_thousand(templates)
    summary = reports.summarize(fleet, "night", "high", True, datetime.datetime(2026, 11, 29, 3, 0))
    text = markdown.document(summary, fleet)
    assert len(text.encode("utf-8")) < GITHUB_LIMIT

    # every rule with a finding is named, with the hosts that have one (waived or not)
    hosts_by_rule = {}
    for report in fleet:
        for rule in set(f["rule"] for f in report["findings"]):
            hosts_by_rule[rule] = hosts_by_rule.get(rule, 0) + 1
    assert len(hosts_by_rule) >= 10
    for rule, hosts in hosts_by_rule.items():
        row = r"^\| %s \| \w+ \| %s \|" % (re.escape(markdown.md(rule)), "{:,}".format(hosts))
        assert re.search(row, text, re.M), rule

    # the groups: host counts, the worst first, a few host names escaped, and the cut said
    groups = _groups(fleet).ordered()
    assert len(groups) > 3000
    widest = max(groups, key=lambda item: item[1][1])
    assert "| %s | %s | %s |" % (widest[0][1], markdown.md(widest[0][0]), "{:,}".format(widest[1][1])) in text
    cut = re.search(r"^\.\.\. ([\d,]+) more group\(s\) \(([\d,]+) findings, the worst (\w+)\) did not fit in "
                    r"GitHub's job summary: see report\.html", text, re.M)
    assert cut, text[-3000:]
    table = text.split("### Findings by group")[1].split("### Hosts most in need")[0]
    listed = re.findall(r"^\| (?:critical|high|medium|low|info) \| [^|]+ \| [\d,]+ \| ", table, re.M)
    assert len(listed) + int(cut.group(1).replace(",", "")) == len(groups)
    assert "<b>" not in text and "&lt;b&gt;host&lt;/b&gt;\\|0" in text
