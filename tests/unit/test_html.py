"""report.html from host reports made by the real code (engine, waivers, probe analysis, summary):
what it shows, that host strings and rule text stay text, its plots, its policy and determinism."""

import base64
import copy
import datetime
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import time

import pytest
import yaml
from hypothesis import given, settings, strategies as st
from html.parser import HTMLParser

from conftest import ROOT, VENV_BIN
from ext4audit.formats import html as report_html
from ext4audit.probe import plots, analysis as probe
from ext4audit.report import reports
from ext4audit.steps import fleet, kernel_gate
from ext4audit.rules import catalog as catalog_mod
from ext4audit.rules import waivers as waivers_mod
from test_rules import facts, with_options

NOW = datetime.datetime(2026, 11, 21, 12, 0, tzinfo=datetime.timezone.utc)
# Markup, quotes, a command substitution, a backtick and a newline in one name.
HOSTILE = 'odd <script>window.__pwned=1</script> "q" $(id) `x`\nname'
RULE_MARKUP = '<img src=x onerror="window.__pwned=2">'
PLAN = probe.make_plan(runs=32)
SCRIPT = open(os.path.join(ROOT, "ext4audit", "formats", "templates", "report.js"), encoding="utf-8").read()


class Page(HTMLParser):
    """The page as a browser's parser sees it: the body's text, script bodies, every tag and attribute."""

    def __init__(self, text):
        super().__init__(convert_charrefs=True)
        self.text, self.scripts, self.tags, self._in = [], [], [], []
        self.rows, self._cell = [], False  # every table row as its cells' text
        self.feed(text)
        self.close()
        self.text = "".join(self.text)

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))
        if tag == "tr":
            self.rows.append([])
        elif tag in ("td", "th") and self.rows:
            self.rows[-1].append("")
            self._cell = True
        if tag in ("script", "style", "title"):
            self._in.append(tag)
            if tag == "script":
                self.scripts.append("")

    def handle_endtag(self, tag):
        if tag in ("td", "th"):
            self._cell = False
        if self._in and self._in[-1] == tag:
            self._in.pop()

    def handle_data(self, data):
        if not self._in:
            self.text.append(data)
            if self._cell:
                self.rows[-1][-1] += data
        elif self._in[-1] == "script":
            self.scripts[-1] += data


# ------------------------------------------------------------------ synthetic, schema-true runs
def record(host, *options, mountpoint="/data", status="audited", reason=None):
    if status != "audited":
        return {"host": host, "groups": [], "status": status, "reason": reason}
    tree = facts(options=with_options(*options))
    tree.update(schema="ext4-fleet-audit/facts/v1", errors=[])
    tree["filesystems"][0]["mountpoint"] = mountpoint
    return {"host": host, "groups": ["web"], "status": "audited", "facts": tree}


def probe_record(host, mountpoint, scale=1):
    """A sweep of the 32-run plan whose d-spans depend on FileSize and Fsync (so there is a tail)."""
    runs = [{"id": t["id"], "dspan": scale * t["FileSize"] * (40 if t["Fsync"][0] else 1), "ideal": t["FileSize"],
             "extents": 2, "layout_score": 0.9, "files": []} for t in PLAN["treatments"]]
    confirmations = [{"id": "rename_over_existing", "seed": "000", "status": "measured", "reason": None,
                      "metric": "rename(2) p50", "unit": "s", "mountpoint": None, "ratio": 3.0 * scale,
                      "ratio_spread": [2.5 * scale, 3.5 * scale], "repetitions": 5},
                     {"id": "xattr_set", "seed": "003", "status": "skipped", "reason": "no <xattr> for " + HOSTILE,
                      "metric": None, "unit": "s", "mountpoint": None, "ratio": None, "ratio_spread": None,
                      "repetitions": 0}]
    result = {"schema": probe.RESULT_SCHEMA, "status": "ok", "reason": None, "kernel": "6.1.0-28-amd64",
              "duration_s": 12.5, "replica": {"mkfs_args": ["mke2fs", "-b", "4096"], "mount_options": "data=ordered",
                                              "adjustments": ["dropped <noload> on " + HOSTILE]},
              "sweep": {"planned": 32, "completed": 32, "stopped_by": None, "runs": runs, "errors": []},
              "confirmations": confirmations}
    return {"host": host, "status": "ran", "reason": None, "mountpoint": mountpoint, "result": result}


WAIVERS = waivers_mod.parse({"waivers": [
    {"rule": "EXT4_ONLINE_DISCARD", "hosts": ["db-1"], "justification": "thin <LUN> needs discard",
     "approver": "storage-team", "expires": "2027-06-30"},
    {"rule": "EXT4_ERRORS_CONTINUE", "hosts": ["db-1"], "justification": "legacy", "approver": "ops",
     "expires": "2026-01-01"}]})


@pytest.fixture(scope="module")
def hostile_catalog(tmp_path_factory):
    """The real catalog with markup in one rule's title, rationale and remediation."""
    rules_dir = tmp_path_factory.mktemp("rules")
    shutil.copytree(os.path.join(ROOT, "rules"), str(rules_dir), dirs_exist_ok=True)  # with rules/cases/
    with open(str(rules_dir / "catalog.yml")) as handle:
        doc = yaml.safe_load(handle)
    rule = [r for r in doc["rules"] if r["id"] == "EXT4_DATA_WRITEBACK"][0]
    rule["title"] += " " + RULE_MARKUP
    rule["rationale"] += " " + RULE_MARKUP
    rule["remediation"]["steps"] += " " + RULE_MARKUP
    rule["references"] = rule["references"] + ["javascript:window.__pwned=3"]
    with open(str(rules_dir / "catalog.yml"), "w") as handle:
        yaml.safe_dump(doc, handle)
    catalog = catalog_mod.load(str(rules_dir))
    catalog.test_rules_dir = str(rules_dir)  # for a second process to load the same
    return catalog


def make_run(run_dir, catalog, with_probe=True, unreachable_incomplete=False):
    """Host reports and summary as `report` makes them; the raw probe records go to run_dir/probe."""
    records = [record(HOSTILE, "nobarrier", mountpoint=HOSTILE),
               record("db-1", "nodelalloc", "discard", "data=writeback"),
               record("gone-2", status="unreachable", reason="ssh: <connect> refused")]
    probes = {HOSTILE: probe_record(HOSTILE, HOSTILE)} if with_probe else None
    if with_probe:
        os.makedirs(os.path.join(run_dir, "probe"), exist_ok=True)
        reports.write_json(os.path.join(run_dir, "probe", "plan.json"), PLAN)
        reports.write_json(os.path.join(run_dir, "probe", "host-0.json"), probes[HOSTILE])
    host_reports = [fleet.build_host_report(r, catalog, WAIVERS, "run-1", NOW, probes, PLAN if with_probe else None)
                    for r in records]
    summary = reports.summarize(host_reports, "run-1", "high", unreachable_incomplete, NOW)
    return summary, host_reports


@pytest.fixture
def run(tmp_path, hostile_catalog):
    run_dir = str(tmp_path / "run-1")
    summary, host_reports = make_run(run_dir, hostile_catalog)
    return run_dir, summary, host_reports, hostile_catalog


@pytest.fixture(scope="module")
def rendered(tmp_path_factory, hostile_catalog):
    """The page of one run with a probe, rendered once for the tests that only read it."""
    run_dir = str(tmp_path_factory.mktemp("run") / "run-1")
    summary, host_reports = make_run(run_dir, hostile_catalog)
    return report_html.render(summary, host_reports, hostile_catalog, run_dir), summary, hostile_catalog


def host_section(page, index):
    start = page.index('id="h-%d"' % index)
    end = page.find('<details class="host"', start + 1)
    return page[start:end if end != -1 else page.index('id="rules"')]


# ------------------------------------------------------------------ content
def test_verdict_comes_first_with_its_reason(rendered):
    page, summary, catalog = rendered
    assert summary["verdict"] == "fail"
    parsed = Page(page)
    assert parsed.text.lstrip().startswith("ext4 fleet audit, run run-1")
    assert "Verdict: FAIL" in parsed.text
    # then the fleet's findings groups, the worst hosts, and the fleet table
    order = [parsed.text.index(heading) for heading in ("Verdict: FAIL", "Findings by group", "Worst hosts", "\nFleet\n")]
    assert order == sorted(order), order
    assert summary["reason"] in parsed.text  # e.g. "... EXT4_DATA_WRITEBACK high on db-1"
    assert 'class="verdict verdict-fail"' in page


def test_host_strings_and_rule_text_are_text_never_markup(rendered):
    page, summary, catalog = rendered
    parsed = Page(page)
    # The only script is ours (and the fleet table's data, JSON that never runs, "<" escaped); no
    # element or event handler came from a host or the catalog.
    assert parsed.scripts[1:] == [SCRIPT] and "<" not in parsed.scripts[0]
    assert [t for t in parsed.tags if t[0] == "script"][0] == ("script", {"type": "application/json", "id": "fleet-data"})
    assert HOSTILE in [row[0] for row in json.loads(parsed.scripts[0])["rows"]]
    assert not [t for t, _ in parsed.tags if t in ("img", "iframe", "object", "embed", "link", "base")]
    assert not [(t, a) for t, attrs in parsed.tags for a in attrs if a.startswith("on")]
    assert "window.__pwned=1</script>" not in page and "<img src=x" not in page
    # ... and all of it is there, exactly, as text: host name, mount point, error, replica note.
    assert parsed.text.count(HOSTILE) >= 5, parsed.text
    assert "&lt;script&gt;window.__pwned=1&lt;/script&gt; &#34;q&#34; $(id) `x`\nname" in page
    assert RULE_MARKUP in parsed.text and "&lt;img src=x onerror=&#34;window.__pwned=2&#34;&gt;" in page
    assert "ssh: <connect> refused" in parsed.text and "thin <LUN> needs discard" in parsed.text
    # a javascript: reference is shown, never linked
    assert "javascript:window.__pwned=3" in parsed.text
    assert not [a for t, a in parsed.tags if t == "a" and not a["href"].startswith(("#", "https://", "http://", "hosts/"))]


def test_content_security_policy_allows_the_inline_script_and_the_pages_own_files(rendered):
    page, summary, catalog = rendered
    metas = [a for t, a in Page(page).tags if t == "meta" and a.get("http-equiv") == "Content-Security-Policy"]
    assert len(metas) == 1
    policy = dict((d.split()[0], d.split()[1:]) for d in metas[0]["content"].split("; "))
    digest = base64.b64encode(hashlib.sha256(SCRIPT.encode()).digest()).decode()
    # 'self': the details files of report-data/, which the script loads (file:// cannot fetch)
    assert policy["default-src"] == ["'none'"] and policy["script-src"] == ["'sha256-%s'" % digest, "'self'"]
    assert policy["img-src"] == ["data:"] and policy["base-uri"] == ["'none'"]
    # the policy sits before anything it governs
    assert page.index("Content-Security-Policy") < page.index("<style>") < page.index("<script>")
    # nothing to load: no src attribute, no external reference outside the rules' reading links
    assert not [a for _, a in Page(page).tags if "src" in a]


def fleet_data(page):
    """The fleet table's data block of a page (html.fleet_data), decoded."""
    start = page.index('<script type="application/json" id="fleet-data">')
    return json.loads(page[page.index(">", start) + 1:page.index("</script>", start)])


def test_fleet_table_data_counts_and_controls(rendered):
    page, summary, catalog = rendered
    data = fleet_data(page)
    assert data["statuses"] == ["audited", "unreachable"] and data["data"] == "report-data"
    # host, status, worst rank, critical..info, waived, errors, probe, fails, details chunk, section
    rows = dict((row[0], row[1:]) for row in data["rows"])
    assert [(row[1], row[2]) for row in data["rows"]] == [(0, 2), (0, 3), (1, -1)]  # medium, high, none
    # db-1: data=writeback high, the kernel's branch-less hang record low (KERNEL_EXT4_NO_FIX_IN_BRANCH),
    # errors=continue info (its waiver expired), discard waived
    assert rows["db-1"] == [0, 3, 0, 1, 0, 1, 1, 1, 0, "", 1, -1, 1]  # render(): no details folder
    assert rows[HOSTILE][9] == "ran"
    # the table is drawn by the script: its controls stay hidden without it
    assert '<div id="fleet-controls" class="controls" hidden>' in page
    body = page[page.index('<table id="fleet-table"'):]
    table = Page(body[:body.index("</table>") + 8]).rows
    assert table == [["host", "status", "worst", "critical", "high", "medium", "low", "info", "waived", "errors",
                      "probe"]]


def test_findings_groups_and_worst_hosts_come_first(rendered):
    page, summary, catalog = rendered
    parsed = Page(page)
    groups = page[page.index('<table id="group-table"'):]
    groups = Page(groups[:groups.index("</table>") + 8]).rows
    assert groups[0] == ["severity", "rule", "finding", "hosts", "findings", "first hosts"]
    assert groups[1][:2] == ["high", "EXT4_DATA_WRITEBACK"] and groups[1][3:] == ["1", "1", "db-1"], groups
    worst = page[page.index('<table id="worst-table"'):]
    worst = Page(worst[:worst.index("</table>") + 8]).rows
    # not audited first, then the worst severity
    assert [row[0] for row in worst[1:]] == ["gone-2", "db-1", HOSTILE], worst
    links = [a for t, a in parsed.tags if t == "a" and "data-host" in a]
    assert [a["data-host"] for a in links] == ["2", "1", "0"]
    # without the script, a name links to its report (its file name's "%" quoted again in the URL)
    assert links[0]["href"] == "hosts/gone-2.json" and links[2]["href"].startswith("hosts/odd%2520%253Cscript%253E")


def test_findings_waivers_and_expired_waivers_are_marked(rendered):
    page, summary, catalog = rendered
    db = Page(host_section(page, 1)).text
    assert "Waiver (active): thin <LUN> needs discard; approved by storage-team; expires 2027-06-30" in db
    assert re.search(r"EXT4_ONLINE_DISCARD .*\n\s*waived\b", db)
    assert "waiver expired 2026-01-01T00:00:00Z" in db
    assert "Waiver (expired): legacy; approved by ops; expired 2026-01-01T00:00:00Z" in db
    # expired waivers are listed at the top too
    assert page.index('id="expired-waivers"') < page.index('id="fleet"')
    # a finding carries its evidence, remediation, rationale and references
    writeback = db[db.index("EXT4_DATA_WRITEBACK"):]
    assert "opt.data = writeback" in writeback
    assert catalog.by_id["EXT4_DATA_WRITEBACK"]["remediation"]["steps"] in writeback
    assert catalog.by_id["EXT4_DATA_WRITEBACK"]["rationale"] in writeback
    assert catalog.by_id["EXT4_DATA_WRITEBACK"]["references"][0] in writeback
    # kernel and filesystem facts
    assert "6.18.44-fc-v669: upstream 6.18.44, vendor mainline" in db
    assert "journal 64 MiB" in db and "data=writeback" in db
    gone = Page(host_section(page, 2)).text
    assert "Not audited (unreachable): ssh: <connect> refused" in gone


def test_large_fleets_link_findings_to_one_entry_per_rule(hostile_catalog):
    summary, host_reports = make_run("/nonexistent", hostile_catalog, with_probe=False)
    many = [dict(copy.deepcopy(host_reports[1]), host="db-%d" % i) for i in range(report_html.DETAILED_HOSTS + 1)]
    page = report_html.render(reports.summarize(many, "run-1", "high", True, NOW), many, hostile_catalog)
    rationale = Page(hostile_catalog.by_id["EXT4_DATA_WRITEBACK"]["rationale"]).text
    assert page.count('href="#rule-EXT4_DATA_WRITEBACK"') == len(many) + 1  # and its row of the groups
    assert Page(page).text.count(rationale) == 1  # in the rules section only
    assert "<details class=\"host\" id=\"h-0\">" in page  # folded


# ------------------------------------------------------------------ plots
def test_probe_plots_for_probed_hosts_only(rendered):
    page, summary, catalog = rendered
    probed = host_section(page, 0)
    assert probed.count("<svg") == 3
    for title in ("d-span CDF (Chopper Figure 3)", "Factor prioritization (Chopper Figure 4)",
                  "Tail share per factor level (Chopper Figure 5)"):
        assert title in probed
    assert "d-span of a run: first to last block of its files (bytes, log scale)" in probed and "chance level" in probed
    assert "<svg" not in host_section(page, 1) and "<svg" not in host_section(page, 2)
    # the CDF has one step per run: 32 runs, 32 distinct d-spans at most
    assert "runs (32)" in probed
    # the host's disk is 2 GiB (own level 1 GiB, the nearest swept): its runs are marked on the CDF
    assert "runs with your configuration's levels (%d)" % own_runs({"DiskSize": "1 GiB"}) in probed


def own_runs(own):
    """How many runs of PLAN have the level `own` ({factor: level label}) names of every factor in it."""
    return sum(1 for t in PLAN["treatments"] if all(probe.level_label(f, t[f]) == level for f, level in own.items()))


def test_the_cdf_marks_the_runs_with_the_hosts_own_levels():
    """Issue 17: the d-span CDF marks the runs whose treatment has the host's own level of every
    factor whose own level is known (a marker on the curve per run, counted in the legend);
    when no run has them all the legend says so; with no own level known there is no mark."""
    record = probe_record("h", "/")
    section = probe.host_section(record, PLAN)
    first = PLAN["treatments"][0]

    def cdf(own):
        view = report_html._probe_view(section, report_html._dspans_of(record), 0, own,
                                       report_html._own_dspans(record, PLAN, own))
        return dict(view["plots"])["d-span CDF (Chopper Figure 3)"]

    plain = cdf({})
    for own in ({"FileSize": probe.level_label("FileSize", first["FileSize"])},
                {"FileSize": probe.level_label("FileSize", first["FileSize"]),
                 "Fsync": probe.level_label("Fsync", first["Fsync"])}):
        marked, count = cdf(own), own_runs(own)
        assert count >= 1 and "runs with your configuration's levels (%d)" % count in marked
        # one marker per run, and one beside the legend entry
        assert marked.count("<use ") - plain.count("<use ") == count + 1
    unmatched = {"FileSize": probe.level_label("FileSize", first["FileSize"]), "DiskSize": "7 GiB"}
    assert "no run has all your configuration's levels" in cdf(unmatched)
    assert "your configuration" not in plain and report_html._own_dspans(record, PLAN, {}) is None
    # a run id is data from the host: one that is no integer (a list would not hash) matches nothing
    runs = record["result"]["sweep"]["runs"]
    expected = report_html._own_dspans({"result": {"sweep": {"runs": runs[1:]}}}, PLAN, own)
    assert len(expected) == own_runs(own) - 1  # the first run has the levels
    for bad in ([runs[0]["id"]], True, str(runs[0]["id"])):
        runs[0]["id"] = bad
        assert report_html._own_dspans(record, PLAN, own) == expected


def test_a_run_without_probe_data_draws_nothing_and_never_imports_matplotlib(tmp_path, hostile_catalog):
    summary, host_reports = make_run(str(tmp_path / "run"), hostile_catalog, with_probe=False)
    path = tmp_path / "inputs.json"
    path.write_text(json.dumps([summary, host_reports]))
    code = ("import json, sys; from ext4audit.formats import html; s, h = json.load(open(sys.argv[1])); "
            "page = html.render(s, h); assert '<svg' not in page and 'verdict-fail' in page; "
            "assert 'matplotlib' not in sys.modules, 'matplotlib imported'")
    result = subprocess.run([sys.executable, "-c", code, str(path)], cwd=ROOT, stderr=subprocess.PIPE)
    assert result.returncode == 0, result.stderr.decode()[-2000:]


def test_a_short_sweep_gets_its_cdf_only():
    """Below probe.MIN_RUNS the analysis has quantiles only: no factor plots, and d-spans of 0
    (no extents) are counted, not drawn on the log axis."""
    short = dict(PLAN, treatments=PLAN["treatments"][:4])
    result = probe_record("h", "/")["result"]
    result["sweep"]["runs"] = result["sweep"]["runs"][:4]
    result["sweep"]["runs"][0]["dspan"] = 0
    section = probe.host_section({"host": "h", "status": "ran", "reason": None, "mountpoint": "/", "result": result},
                                 short)
    view = report_html._probe_view(section, [r["dspan"] for r in result["sweep"]["runs"]], 0)
    assert [title for title, _ in view["plots"]] == ["d-span CDF (Chopper Figure 3)"]
    assert view["zero_dspans"] == 1 and "runs (3)" in view["plots"][0][1]


def test_svg_text_is_escaped_and_math_stays_text():
    ranked = [{"factor": HOSTILE, "s": 0.5, "noise_floor": 0.1, "levels": 2}]
    mapping = {"tail_runs": 3, "factors": {HOSTILE: {"$x$ <b>1</b>": {"runs": 10, "tail_share": 0.2},
                                                     "2": {"runs": 20, "tail_share": 0.05}}}}
    for svg in (plots.tail_share(mapping, ranked, 30, "t"), plots.prioritization(ranked, "p")):
        assert "<script" not in svg and "<b>" not in svg
        assert "&lt;script&gt;window.__pwned=1&lt;/script&gt;" in svg
    assert "$x$ &lt;b&gt;1&lt;/b&gt;" in plots.tail_share(mapping, ranked, 30, "t")


def test_level_order_is_natural():
    labels = ["1 GiB", "256 MiB", "10", "2", "1", "[0, 2, 1, 3]", "[0, 1, 2, 3]", "0.5"]
    assert sorted(labels, key=plots._level_order) == ["0.5", "1", "2", "10", "256 MiB", "1 GiB",
                                                      "[0, 1, 2, 3]", "[0, 2, 1, 3]"]


def test_kernel_gate_comparison_is_drawn_when_the_run_has_one(run):
    run_dir, summary, host_reports, catalog = run
    base, cand = probe_record("base", "/"), probe_record("cand", "/", scale=3)
    plan_id = "seed 1, 32 runs, short levels"
    gate = kernel_gate.evaluate({"host": "base", "record": base, "report": None},
                                {"host": "cand <i>", "record": cand, "report": None}, (plan_id, plan_id))
    assert gate["verdict"] == "fail", gate["reason"]
    reports.write_json(os.path.join(run_dir, "kernel_gate.json"), gate)
    page = report_html.render(summary, host_reports, catalog, run_dir)
    section = page[page.index('id="kernel-gate"'):page.index('id="hosts"')]
    assert "FAIL" in section and section.count("<svg") == 1 and "cand &lt;i&gt;" in section
    assert "confirmation ratios (risky / safe)" in section
    with open(os.path.join(run_dir, "kernel_gate.json"), "w") as handle:
        handle.write("{truncated")
    page = report_html.render(summary, host_reports, catalog, run_dir)
    assert "kernel_gate.json could not be read" in Page(page).text


def test_kernel_gate_shows_the_allocator_verdicts(run):
    """A real gate's kernel_gate.json (molecule/kernels: Debian 12's 6.1 against 6.12, on one-CPU
    VMs): each of Chopper's allocator issues with its baseline and candidate verdicts, the two
    regressions failed, the inconclusive one with its reason; a tampered reason stays text."""
    run_dir, summary, host_reports, catalog = run
    with open(os.path.join(ROOT, "tests", "fixtures", "kernel_gate", "upgrade-6.1-to-6.12.json")) as handle:
        gate = json.load(handle)
    gate["allocator"][3]["detail"] = HOSTILE
    reports.write_json(os.path.join(run_dir, "kernel_gate.json"), gate)
    page = report_html.render(summary, host_reports, catalog, run_dir)
    section = page[page.index('id="kernel-gate"'):page.index('id="hosts"')]
    assert "<script>" not in section and "&lt;script&gt;" in section
    rows = Page(section).rows
    start = rows.index(["allocator issue", "baseline", "candidate", "gate"])
    assert rows[start + 1:start + 5] == [
        ["Scheduler Dependency", "inconclusive", "inconclusive",
         "ok: inconclusive -> inconclusive (baseline inconclusive: one CPU: cannot be measured; "
         "candidate inconclusive: one CPU: cannot be measured)"],
        ["Special End", "absent", "present", "FAIL: absent -> present"],
        ["Shared Global", "absent", "present", "FAIL: absent -> present"],
        ["Normalization", "absent", "absent", "ok: " + HOSTILE]]
    assert section.count('<tr class="bad">') == 2
    gate["allocator"][0]["baseline"] = "maybe"  # not a verdict: the page says the file could not be read
    reports.write_json(os.path.join(run_dir, "kernel_gate.json"), gate)
    text = Page(report_html.render(summary, host_reports, catalog, run_dir)).text
    assert "kernel_gate.json could not be read" in text and "$.allocator[0].baseline 'maybe' is not one of" in text


def test_kernel_gate_lists_the_kernel_records(run):
    run_dir, summary, host_reports, catalog = run
    from test_kernel_gate import RECORDS, kernel
    plan_id = "seed 1, 32 runs, short levels"
    gate = kernel_gate.evaluate({"host": "base", "record": probe_record("base", "/"), "report": {"kernel": kernel("6.1.50")}},
                                {"host": "cand", "record": probe_record("cand", "/"), "report": {"kernel": kernel("6.6.10")}},
                                (plan_id, plan_id), records=RECORDS)
    gate["candidate"]["upstream"] = HOSTILE                  # host data, as a tampered report would carry it
    gate["kernel_records"]["carried"][0]["reason"] = HOSTILE
    reports.write_json(os.path.join(run_dir, "kernel_gate.json"), gate)
    page = report_html.render(summary, host_reports, catalog, run_dir)
    section = page[page.index('id="kernel-gate"'):page.index('id="hosts"')]
    assert "<script>" not in section and "&lt;script&gt;" in section
    text = Page(section).text
    assert "ext4/jbd2 kernel records (kernel CNA data of 2026-08-21)" in text
    for (_, title), count in zip(kernel_gate.RECORD_LISTS, (3, 1, 1)):
        assert "%s (%d)" % (title, count) in text
    assert "FAIL CVE-2099-2 data corruption: ext4: record 2 (fixed in 6.6.50; host runs 6.6.10)" in text
    assert "CVE-2099-5 hang/deadlock: ext4: record 5 (%s)" % HOSTILE.replace("\n", " ") in text.replace("\n", " ")
    assert '<a href="https://nvd.nist.gov/vuln/detail/CVE-2099-1" rel="noreferrer">CVE-2099-1</a>' in section


def test_baseline_diff_is_shown(run):
    run_dir, summary, host_reports, catalog = run
    summary = dict(summary, baseline={
        "run_id": "run-0", "new": [{"host": "db-1", "rule": "EXT4_DATA_WRITEBACK", "device": "/dev/loop0",
                                    "mountpoint": "/data", "severity": "high", "why": "new", "waived": False}],
        "resolved": [{"host": HOSTILE, "rule": "EXT4_INODE_128", "device": "/dev/loop0", "mountpoint": HOSTILE,
                      "severity": "low"}],
        "persisting": 4, "hosts_added": ["gone-2"], "hosts_removed": ["old <host>"], "hosts_not_compared": []})
    page = report_html.render(summary, host_reports, catalog, run_dir)
    section = Page(page[page.index('<section id="baseline">'):page.index('<section id="hosts">')]).text
    assert "1 new, 1 resolved, 4 persisting." in section
    assert "Hosts added (1): gone-2" in section and "Hosts removed (1): old <host>" in section
    rows = Page(page[page.index('<section id="baseline">'):page.index('<section id="hosts">')]).rows
    assert rows[1:] == [["new", "db-1", "EXT4_DATA_WRITEBACK", "high", "/data", "/dev/loop0"],
                        ["resolved", HOSTILE, "EXT4_INODE_128", "low", HOSTILE, "/dev/loop0"]]


# ------------------------------------------------------------------ determinism, the command, scale
def test_output_is_deterministic_across_processes(run):
    run_dir, summary, host_reports, catalog = run
    first = report_html.render(summary, host_reports, catalog, run_dir)
    assert report_html.render(summary, host_reports, catalog, run_dir) == first
    path = os.path.join(run_dir, "inputs.json")
    with open(path, "w") as handle:
        json.dump([summary, host_reports], handle)
    code = ("import json, sys; from ext4audit.formats import html; from ext4audit.rules import catalog; s, h = json.load(open(sys.argv[1])); "
            "sys.stdout.write(html.render(s, h, catalog.load(sys.argv[2]), sys.argv[3]))")
    result = subprocess.run([sys.executable, "-c", code, path, catalog.test_rules_dir, run_dir], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            env=dict(os.environ, PYTHONHASHSEED="12345"))
    assert result.returncode == 0, result.stderr.decode()[-2000:]
    assert result.stdout.decode() == first
    assert "<dc:date>" not in first and "2026-11-21T12:00:00Z" in first  # the run's stamp, not the clock


def test_report_and_kernel_gate_commands_write_report_html(tmp_path):
    run_dir = tmp_path / "reports" / "run-7"
    os.makedirs(str(run_dir / "facts"))
    for index, doc in enumerate([record(HOSTILE, "nobarrier", mountpoint=HOSTILE), record("web-1")]):
        reports.write_json(str(run_dir / "facts" / ("%d.json" % index)), doc)
    reports.write_json(str(run_dir / "probe" / "plan.json"), PLAN)
    reports.write_json(str(run_dir / "probe" / "a.json"), probe_record(HOSTILE, HOSTILE))
    reports.write_json(str(run_dir / "probe" / "b.json"), probe_record("web-1", "/data", scale=3))
    command = [os.path.join(VENV_BIN, "python"), "-m", "ext4audit"]
    result = subprocess.run(command + ["report", str(run_dir)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert result.returncode == 0, result.stderr.decode()[-2000:] + result.stdout.decode()[-2000:]
    page = (run_dir / "report.html").read_text()
    parsed = Page(page)
    assert "Verdict: PASS" in parsed.text and HOSTILE in parsed.text and parsed.scripts[1:] == [SCRIPT]
    assert page.count("<svg") == 6 and 'id="kernel-gate"' not in page
    assert "runs with your configuration's levels (%d)" % own_runs({"DiskSize": "1 GiB"}) in page
    # the kernel gate draws the page again with its comparison (web-1's d-spans are 3 times larger)
    result = subprocess.run(command + ["kernel-gate", str(run_dir), "--baseline", HOSTILE, "--candidate", "web-1"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert result.returncode == 1, result.stderr.decode()[-2000:] + result.stdout.decode()[-2000:]
    page = (run_dir / "report.html").read_text()
    assert 'id="kernel-gate"' in page and page.count("<svg") == 7 and "Verdict: PASS" in Page(page).text
    assert not [p for p in os.listdir(str(run_dir)) if p.startswith(".tmp-")]


def test_one_thousand_hosts(tmp_path, hostile_catalog, capsys):
    """Scale: 1,000 synthetic hosts (three kinds of finding sets) streamed to a file."""
    summary, host_reports = make_run(str(tmp_path / "run"), hostile_catalog, with_probe=False)
    fleet = [dict(copy.deepcopy(host_reports[i % 3]), host="host-%04d" % i) for i in range(1000)]
    summary = reports.summarize(fleet, "run-1", "high", True, NOW)
    path = str(tmp_path / "report.html")
    started = time.monotonic()
    report_html.write(path, summary, fleet, hostile_catalog)
    seconds = time.monotonic() - started
    size = os.path.getsize(path)
    with capsys.disabled():
        print("\nreport.html for 1,000 hosts: %.2f s, %.1f MiB" % (seconds, size / 2 ** 20))
    page = open(path, encoding="utf-8").read()
    # above html.ALL_SECTIONS hosts no host has a section: every row is data, each host's details
    # are in report-data/ (chunks of html.CHUNK_HOSTS hosts), loaded when it is opened
    rows = fleet_data(page)["rows"]
    assert len(rows) == 1000 and '<details class="host"' not in page
    chunks = sorted(os.listdir(str(tmp_path / "report-data")))
    assert chunks == ["hosts-%06d.js" % first for first in range(0, 1000, report_html.CHUNK_HOSTS)]
    assert sorted(set(row[12] for row in rows)) == list(range(len(chunks)))
    assert page.rstrip().endswith("</html>")
    data = sum(os.path.getsize(str(tmp_path / "report-data" / name)) for name in chunks)
    with capsys.disabled():
        print("report-data/ for 1,000 hosts: %.1f KiB (page %.1f KiB)" % (data / 1024, size / 1024))
    assert size < 200 * 1024 and data < 1000 * 2048, (size, data)
    assert seconds < 30, seconds  # about 0.3 s here; only a pathological slowdown trips this


_TEXT = st.text(st.sampled_from("&<>\"' _-ab\n\u00e9"), max_size=8) | st.sampled_from([HOSTILE, RULE_MARKUP])
_SCALAR = st.none() | st.booleans() | st.integers(-5, 5) | st.floats(allow_nan=False, width=32) | _TEXT


def _maybe(**fields):
    """A mapping with each field present or missing (an older or partial report lacks some; a
    finding always has its evidence)."""
    return st.fixed_dictionaries({}, optional=fields)


_FINDING = st.fixed_dictionaries({"evidence": st.dictionaries(
    st.sampled_from(["sb.features", "Opt.B", "opt.a", "kernel_records", "<x>"]),
    _SCALAR | st.lists(_SCALAR, max_size=2) | st.dictionaries(_TEXT, _SCALAR, max_size=2))}, optional=dict(
    severity=_TEXT, rule=_TEXT, title=_SCALAR, waived=st.booleans(), mountpoint=st.none() | _TEXT,
    device=st.none() | _TEXT, message=_SCALAR, base_severity=_TEXT, escalated_because=st.none() | _TEXT,
    baseline=st.sampled_from(["new", "persisting"]),
    severity_override=st.none() | _maybe(**{"from": _TEXT, "reason": _TEXT}),
    waiver=st.none() | _maybe(status=st.sampled_from(["active", "expired"]) | _TEXT, expires=_TEXT,
                              justification=_TEXT, approver=_TEXT),
    confirmation=st.none() | _maybe(status=st.sampled_from(["not_measured", "confirmed", "not_confirmed"]) | _TEXT,
                                    probe=_TEXT, reason=_TEXT, metric=st.none() | _TEXT, threshold=_SCALAR,
                                    ratio=st.none() | st.floats(allow_nan=False) | st.integers(),
                                    spread=st.none() | st.tuples(st.floats(allow_nan=False), st.integers())),
    remediation=st.none() | _maybe(steps=_TEXT, cost=st.none() | _TEXT),
    references=st.lists(st.sampled_from(["https://x.example/a?b=1&c=<2>", "javascript:alert(1)", "RFC 1", '"q"']),
                        max_size=3)))


@settings(max_examples=400, deadline=None)
@given(_FINDING, st.booleans())
def test_a_findings_article_is_the_text_the_template_wrote(finding, detailed):
    """Sections.article writes a finding in Python (Jinja took six times as long): the same text
    as the template it replaced, for hostile strings, missing fields and every optional part."""
    sections = report_html.Sections({"fail_on": "high"}, 5 if detailed else 500, None)
    sections.rationales = {"a": RULE_MARKUP}
    expected = _template_article().render(h={"findings": [finding], "detailed": detailed},
                                          rationales=sections.rationales)
    assert sections.article(finding) == expected


@functools.lru_cache(maxsize=None)
def _template_article():
    with open(os.path.join(ROOT, "tests", "fixtures", "html", "finding_article.j2"), encoding="utf-8") as handle:
        return report_html._environment().from_string(handle.read())


@functools.lru_cache(maxsize=None)
def _template_section():
    with open(os.path.join(ROOT, "tests", "fixtures", "html", "host_section.j2"), encoding="utf-8") as handle:
        return report_html._environment().from_string(handle.read())


def _section_by_template(sections, report, digest):
    """A host's section as Sections.render made it with host.html.j2 (kept as the fixture)."""
    from markupsafe import Markup

    findings = sorted(report["findings"], key=lambda f: (-report_html.severity_rank(f["severity"]), f["rule"],
                                                         f.get("mountpoint") or ""))
    view, section = None, report.get("probe")
    if report["host"] in sections.plotted:
        record, own = sections.probe_records.get(report["host"]), report_html.probe_actions.own_levels(report)
        view = report_html._probe_view(section, report_html._dspans_of(record), digest["index"], own,
                                       report_html._own_dspans(record, sections.plan, own))
    actions = report_html.probe_actions.sentences(report) if section else []
    not_used = [report_html.probe_actions.not_in_effect(report, c) for c in section["confirmations"]] if section else []
    return _template_section().render(
        h={"index": digest["index"], "row": {"worst": digest["row"]["worst"], "failing": len(digest["bad"])},
           "report": report, "findings": findings, "probe": section, "probe_view": view, "actions": actions,
           "not_used": not_used, "detailed": sections.detailed, "policy": report_html.policy_mod.describe(report)},
        article=lambda f: Markup(sections.article(f)))


def test_a_host_section_with_a_probe_is_the_text_the_template_wrote(tmp_path, hostile_catalog):
    """The probe block is still a template (host_probe.html.j2); around it, the section is the same."""
    run_dir = str(tmp_path / "run-1")
    summary, host_reports = make_run(run_dir, hostile_catalog)
    plotted = [HOSTILE]
    for hosts in (3, 500):
        sections = report_html.Sections(summary["policy"], hosts, hostile_catalog, plotted,
                                         *report_html._dspan_records(run_dir, set(plotted)))
        for index, report in enumerate(host_reports):
            digest = dict(reports.digest(report, "high"), index=index)
            assert sections.render(report, digest) == _section_by_template(sections, report, digest)
    assert report.get("probe") is None and host_reports[0]["probe"]["sweep"]["runs_completed"]


_SOME = st.none() | st.integers(0, 2 ** 40) | _TEXT
_REPORT = st.fixed_dictionaries({"host": _TEXT, "findings": st.lists(st.fixed_dictionaries(
    {"severity": st.sampled_from(["info", "low", "medium", "high", "critical"]), "rule": _TEXT}).flatmap(
        lambda key: _FINDING.map(lambda f: dict(f, **key))), max_size=3)}, optional=dict(
    status=st.sampled_from(["audited", "unreachable", "failed"]) | _TEXT, reason=st.none() | _TEXT,
    groups=st.lists(_TEXT, max_size=3),
    policy=st.none() | st.fixed_dictionaries({"fail_on": _TEXT, "severity_overrides": st.dictionaries(
        _TEXT, st.fixed_dictionaries({"severity": _TEXT, "reason": _TEXT}), max_size=2)}),
    skipped=st.lists(st.fixed_dictionaries({"rule": _TEXT, "reason": _TEXT}), max_size=2),
    undetermined=st.lists(_maybe(rule=_TEXT, missing=st.lists(_TEXT, max_size=2), mountpoint=st.none() | _TEXT,
                                 device=st.none() | _TEXT), max_size=2),
    errors=st.lists(_maybe(where=_SCALAR, reason=_SCALAR), max_size=2),
    kernel=st.none() | _maybe(release=_SCALAR, upstream=_SCALAR, vendor=_SCALAR, vendor_version=_SCALAR,
                              backports=st.none() | st.booleans(), page_size=st.none() | st.integers(0, 65536),
                              os_release=st.none() | _TEXT | _maybe(PRETTY_NAME=_SCALAR),
                              notes=st.none() | st.lists(_TEXT, max_size=2)),
    filesystems=st.lists(_maybe(
        mountpoint=_SCALAR, device=_SCALAR, fstype=_SCALAR, options=st.none() | st.lists(_TEXT, max_size=3),
        options_source=st.none() | st.sampled_from(["proc", "inferred"]) | _TEXT,
        superblock=st.none() | st.fixed_dictionaries({"block_size": _SOME.filter(lambda v: not isinstance(v, str)),
                                                      "journal_bytes": st.none() | st.integers(0, 2 ** 40)}, optional=dict(
            block_count=st.none() | st.integers(0, 2 ** 32), inode_size=_SCALAR,
            features=st.none() | st.lists(_TEXT, max_size=3))),
        queue=st.none() | _maybe(rotational=_SCALAR, write_cache=_SCALAR, discard_max_bytes=_SCALAR),
        fstab=st.none() | st.just({"line": 3}),
        fstab_drift=st.none() | st.lists(st.fixed_dictionaries({"effective": _SCALAR | st.lists(_TEXT, max_size=2)},
                                                               optional={"option": _SCALAR}), max_size=2)), max_size=3),
    netfs=st.lists(_maybe(mountpoint=_SCALAR, fstype=_SCALAR, source=_SCALAR), max_size=2)))


@settings(max_examples=300, deadline=None)
@given(_REPORT, st.sampled_from([None, "low", "high"]), st.booleans(), st.integers(0, 20000))
def test_a_host_section_is_the_text_the_template_wrote(report, worst, failing, index):
    """Sections.render writes a host's section in Python (Jinja took 2 ms a host): the same text
    as the template it replaced, for hostile strings, missing and null fields and every optional part."""
    for hosts in (5, 500):
        sections = report_html.Sections({"fail_on": "high"}, hosts, None)
        sections.rationales = {"a": RULE_MARKUP}
        digest = {"index": index, "row": {"worst": worst}, "bad": [("A", "high")] if failing else []}
        assert sections.render(report, digest) == _section_by_template(sections, report, digest)


_COUNT = st.integers(0, 3)
_DIGEST = st.fixed_dictionaries({
    "index": st.integers(0, 20000), "host": _TEXT, "status": st.sampled_from(["audited", "unreachable"]) | _TEXT,
    "section": st.booleans(), "bad": st.lists(st.just(("A", "high")), max_size=1),
    "by_severity": st.fixed_dictionaries(dict((s, _COUNT) for s in report_html.SEVERITIES)),
    "row": st.fixed_dictionaries({"worst": st.none() | st.sampled_from(report_html.SEVERITIES), "waived": _COUNT,
                                  "errors": _COUNT, "probe": st.none() | _TEXT})})


@settings(max_examples=300, deadline=None)
@given(st.lists(_DIGEST, max_size=4))
def test_the_fleet_data_is_data_whatever_the_host_strings(digests):
    """html.fleet_data: hostile host names and statuses stay inside the page's data block (never
    end it), and the block decodes, as a browser's parser reads it, to every row."""
    page = '<script type="application/json" id="fleet-data">%s</script>' % report_html.fleet_data(digests)
    parsed = Page(page)
    assert len(parsed.scripts) == 1 and not parsed.text
    data = json.loads(parsed.scripts[0])
    assert [row[0] for row in data["rows"]] == [d["host"] for d in digests]
    assert [data["statuses"][row[1]] for row in data["rows"]] == [d["status"] for d in digests]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(_TEXT, _TEXT, _TEXT), min_size=1, max_size=3))
def test_a_details_chunk_hands_hostile_strings_to_the_page_as_data(tmp_path_factory, names):
    """html.Details: a chunk is one call of the page's window.ext4auditHosts with a JSON object:
    host names, mount points and messages are JSON strings in it, read back exactly."""
    folder = str(tmp_path_factory.mktemp("data"))
    details = report_html.Details(folder)
    hosts = []
    for index, (host, mountpoint, message) in enumerate(names):
        report = {"host": "%d %s" % (index, host), "status": "audited", "findings": [
            {"rule": "R", "severity": "high", "title": "t", "message": message, "mountpoint": mountpoint}],
            "filesystems": [{"mountpoint": mountpoint, "device": host, "fstype": "ext4", "options": [message]}]}
        details.add(report, {"index": index, "row": {"worst": "high"}, "bad": []})
        hosts.append(report)
    details.flush()
    text = open(os.path.join(folder, "hosts-000000.js"), encoding="utf-8").read()
    assert text.startswith("ext4auditHosts(0, {") and text.endswith("});\n")
    chunk = json.loads(text[len("ext4auditHosts(0, "):-3])
    strings = chunk["s"]
    for report, host in zip(hosts, chunk["h"]):
        assert host["n"] == report["host"]
        assert strings[host["f"][0][3]] == report["findings"][0]["message"]
        assert strings[host["m"][0][0]] == report["filesystems"][0]["mountpoint"]
        assert strings[host["j"]] == report_html.host_link(report["host"])
