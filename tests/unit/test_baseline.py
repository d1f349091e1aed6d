"""Baselines: the diff against an earlier run, fail_on_new, broken baselines, and the terminal output."""

import copy
import json
import os

import msgspec
import pytest
import yaml

from conftest import ROOT
from ext4audit.formats import terminal
from ext4audit.model import contract
from ext4audit.report import baseline, reports
from test_reports import HOSTILE, cli, write_run
from test_rules import facts, with_options


def host_facts(*mounts):
    """Facts of one host with an ext4 filesystem per (mountpoint, options) pair, each on a device
    with a volatile write cache (so nobarrier is high)."""
    tree = facts(queue={"write_cache": "write back", "rotational": 0})
    tree["schema"] = "ext4-fleet-audit/facts/v1"
    template = tree["filesystems"][0]
    tree["filesystems"] = []
    for number, (mountpoint, options) in enumerate(mounts):
        fs = copy.deepcopy(template)
        fs.update(device="/dev/loop%d" % number, mountpoint=mountpoint, options=options)
        tree["filesystems"].append(fs)
    return tree


def record(host, *mounts, status="audited"):
    if status != "audited":
        return {"host": host, "groups": [], "status": status, "reason": "ssh: connection refused"}
    return {"host": host, "groups": [], "status": "audited", "facts": host_facts(*mounts)}


DEFAULTS = with_options()
NOBARRIER = with_options("nobarrier")          # EXT4_NOBARRIER: high
# nodelalloc ends the rename finding; discard is EXT4_ONLINE_DISCARD: low (nodelalloc alone is no
# finding on this 6.18 kernel, which ignores dioread_nolock without delalloc).
NODELALLOC_DISCARD = with_options("nodelalloc", "discard")


def make_run(tmp_path, name, records):
    path = str(tmp_path / "reports" / name)
    write_run(path, records)
    return path


def keys(entries):
    return sorted((e["host"], e["rule"], e["mountpoint"]) for e in entries)


# ------------------------------------------------------------------ the diff itself
def host_report(host, findings, status="audited"):
    return {"host": host, "status": status, "findings": [dict(f) for f in findings]}


def finding(rule, severity, mountpoint="/data", device="/dev/loop0", waived=False):
    return {"rule": rule, "severity": severity, "mountpoint": mountpoint, "device": device, "waived": waived}


class InMemoryBaseline(baseline.Baseline):
    """A Baseline whose host reports are given, not read from a folder."""

    def __init__(self, entries):
        super().__init__("run-0", "/nowhere", dict((host, entry["status"]) for host, entry in entries.items()))
        self.entries = entries

    def host_findings(self, host):
        return self.entries[host]


def base_of(hosts):
    """A Baseline as load() makes it, from {host: (status, [findings])}."""
    return InMemoryBaseline(dict(
        (host, {"status": status, "findings": dict((baseline.identity(host, f), f["severity"]) for f in found)})
        for host, (status, found) in hosts.items()))


def test_compare_new_resolved_persisting_and_hosts():
    base = base_of({
        "a": ("audited", [finding("R1", "high"), finding("R2", "low"), finding("R3", "medium", "/x", "/dev/loop1"),
                          finding("R4", "medium")]),
        "gone": ("audited", [finding("R1", "high")]),
        "down-now": ("audited", [finding("R1", "high")]),
        "down-before": ("unreachable", []),
    })
    current = [
        host_report("a", [finding("R1", "high"),                      # persisting
                          finding("R2", "medium"),                    # worse: new
                          finding("R3", "medium", "/y", "/dev/loop1"),  # other mount point: new (and /x resolved)
                          finding("R4", "low"),                       # better: persisting
                          finding("R5", "info", waived=True)]),       # new, waived
        host_report("added", [finding("R1", "high")]),
        host_report("down-now", [], status="unreachable"),
        host_report("down-before", [finding("R1", "high")]),
    ]
    diff = baseline.compare(current, base)
    why = dict(((e["host"], e["rule"]), e["why"]) for e in diff["new"])
    assert why == {("a", "R2"): "worsened", ("a", "R3"): "new", ("a", "R5"): "new", ("added", "R1"): "host_added",
                   ("down-before", "R1"): "not_audited_in_baseline"}
    assert [e["was"] for e in diff["new"] if e["why"] == "worsened"] == ["low"]
    assert [e["waived"] for e in diff["new"] if e["rule"] == "R5"] == [True]
    # The unreachable host resolves nothing; the removed host is listed, not matched to the added one.
    assert keys(diff["resolved"]) == [("a", "R3", "/x")]
    assert diff["persisting"] == 2
    assert diff["hosts_added"] == ["added"] and diff["hosts_removed"] == ["gone"]
    assert [h["host"] for h in diff["hosts_not_compared"]] == ["down-now"]
    marks = dict((f["rule"], f["baseline"]) for f in current[0]["findings"])
    assert marks == {"R1": "persisting", "R2": "new", "R3": "new", "R4": "persisting", "R5": "new"}


def test_fail_on_new_counts_only_new_failing_findings():
    old_high = dict(finding("R1", "high"), waived=False, baseline="persisting")
    new_low = dict(finding("R2", "low"), baseline="new")
    new_high_waived = dict(finding("R3", "critical", waived=True), baseline="new")
    hosts = [host_report("a", [old_high, new_low, new_high_waived])]
    assert reports.verdict(hosts, "high", True)[0] == "fail"
    assert reports.verdict(hosts, "high", True, fail_on_new=True) == (
        "pass", "no unwaived new finding at or above high on 1 host(s)")
    hosts[0]["findings"].append(dict(finding("R4", "high", "/z"), baseline="new"))
    assert reports.verdict(hosts, "high", True, fail_on_new=True)[0] == "fail"


# ------------------------------------------------------------------ loading a baseline
@pytest.fixture
def two_runs(tmp_path):
    """run-1: host a with nobarrier on /data (high) and defaults on /srv; host b. run-2: /srv got
    nodelalloc and discard (one new low finding), b is gone, c is new."""
    first = make_run(tmp_path, "run-1", [record("a", ("/data", NOBARRIER), ("/srv", DEFAULTS)),
                                         record("b", ("/data", DEFAULTS))])
    rc, out, err = cli("report", first)
    assert rc == 1, (out, err)
    second = make_run(tmp_path, "run-2", [record("a", ("/data", NOBARRIER), ("/srv", NODELALLOC_DISCARD)),
                                          record("c", ("/data", DEFAULTS))])
    return first, second


def test_report_with_a_baseline(two_runs):
    first, second = two_runs
    rc, out, err = cli("report", second, "--baseline", first, "--fail-on-new", "true")
    # The nobarrier finding (high) persists; what is new is low or info: fail_on_new passes.
    assert rc == 0, (out, err)
    summary = json.load(open(os.path.join(second, "summary.json")))
    assert summary["verdict"] == "pass" and summary["policy"]["fail_on_new"] is True
    assert summary["reason"].startswith("no unwaived new finding at or above high on 2 host(s); since baseline run-1")
    diff = summary["baseline"]
    assert set(diff) >= {"run_id", "new", "resolved", "persisting", "hosts_added", "hosts_removed"}
    assert diff["run_id"] == "run-1" and diff["hosts_added"] == ["c"] and diff["hosts_removed"] == ["b"]
    news = dict(((e["host"], e["rule"], e["mountpoint"]), e["why"]) for e in diff["new"])
    assert [k for k in news if k[0] == "a"] == [("a", "EXT4_ONLINE_DISCARD", "/srv")]
    assert news[("a", "EXT4_ONLINE_DISCARD", "/srv")] == "new"
    # (6.18.y has no fix for one hang record of the kernel CNA's, CVE-2026-74307: a host rule, low)
    assert sorted(k[1] for k in news if k[0] == "c") == ["EXT4_AUTO_DA_ALLOC_RENAME", "EXT4_ERRORS_CONTINUE",
                                                          "KERNEL_EXT4_NO_FIX_IN_BRANCH"]
    assert all(why == "host_added" for (host, _, _), why in news.items() if host == "c")
    # nodelalloc turned delalloc off on /srv: its rename finding is resolved; host b's are not
    # "resolved" (b is gone, not fixed).
    assert keys(diff["resolved"]) == [("a", "EXT4_AUTO_DA_ALLOC_RENAME", "/srv")]
    assert diff["persisting"] == 5  # /data: nobarrier, rename, errors=continue; /srv: errors=continue; the hang fix
    lines = out.splitlines()
    assert lines[-1].startswith("verdict: pass: ")
    assert "since baseline run-1: 4 new, 1 resolved, 5 persisting; hosts added: c; hosts removed: b" in lines
    markdown = open(os.path.join(second, "summary.md")).read()
    assert "### Since baseline run\\-1" in markdown and "| new host | c | EXT4\\_ERRORS\\_CONTINUE | info | /data |" in markdown
    assert "Hosts removed (1): b" in markdown and "| resolved | a | EXT4\\_AUTO\\_DA\\_ALLOC\\_RENAME | info | /srv |" in markdown
    host_a = json.load(open(os.path.join(second, "hosts", "a.json")))
    marks = dict(("%s %s" % (f["mountpoint"], f["rule"]), f["baseline"]) for f in host_a["findings"])
    assert marks["/data EXT4_NOBARRIER"] == "persisting" and marks["/srv EXT4_ONLINE_DISCARD"] == "new"
    assert cli("gate", second)[0] == 1  # without fail_on_new the old high finding fails the gate


def test_fail_on_new_fails_on_a_new_or_worse_finding(tmp_path):
    first = make_run(tmp_path, "run-1", [record("a", ("/data", NOBARRIER), ("/srv", DEFAULTS))])
    assert cli("report", first)[0] == 1
    second = make_run(tmp_path, "run-2", [record("a", ("/data", NOBARRIER), ("/srv", NOBARRIER))])
    rc, out, err = cli("report", second, "--baseline", first, "--fail-on-new", "true")
    assert rc == 1, (out, err)
    assert out.splitlines()[-1].startswith(
        "verdict: fail: 1 new finding(s) at or above high on 1 host(s), e.g. EXT4_NOBARRIER high on a")
    assert "  new: a EXT4_NOBARRIER high on /srv" in out
    # The gate re-evaluates offline against the same baseline, or with another policy.
    assert cli("gate", second, "--baseline", first, "--fail-on-new", "true")[0] == 1
    assert cli("gate", second, "--baseline", first, "--fail-on-new", "true", "--fail-on", "critical")[0] == 0


def test_the_findings_index_compares_as_the_host_reports_do(two_runs, monkeypatch):
    """A run's findings-index.json lists every host's findings (identity, severity) and status;
    a later run compares with it instead of the host reports, and gets the same diff. A baseline
    without one (an earlier version's), or with one another report of the run left, reads hosts/."""
    first, second = two_runs
    index = msgspec.json.decode(open(os.path.join(first, baseline.INDEX), "rb").read(), type=contract.FindingsIndex)
    summary = json.load(open(os.path.join(first, "summary.json")))
    assert (index.run_id, index.generated_at) == (summary["run_id"], summary["generated_at"])
    for host in ("a", "b"):
        report = json.load(open(os.path.join(first, "hosts", host + ".json")))
        assert index.hosts[host].status == report["status"] and len(report["findings"]) > 0
        assert [tuple(msgspec.structs.astuple(f)) for f in index.hosts[host].findings] == [
            (f["rule"], f["severity"], f.get("device"), f.get("mountpoint")) for f in report["findings"]]
    read = []
    monkeypatch.setattr(reports, "read_json",
                        lambda path, *args, **kwargs: read.append(path) or READ_JSON(path, *args, **kwargs))
    diffs = []
    for prepare in (lambda: None, lambda: rewrite_index(first, lambda doc: doc.update(run_id="another")),
                    lambda: os.unlink(os.path.join(first, baseline.INDEX))):
        prepare()
        del read[:]
        base = baseline.load(first, second)
        diffs.append(baseline.compare([json.load(open(os.path.join(first, "hosts", "a.json")))], base))
        assert (os.path.join(first, "hosts", "a.json") in read) is (len(diffs) > 1)
    assert diffs[0] == diffs[1] == diffs[2] and diffs[0]["persisting"] > 0


READ_JSON = reports.read_json


def snapshot(folder):
    result = {}
    for base, dirs, files in os.walk(folder):
        for name in files:
            path = os.path.join(base, name)
            result[path] = open(path, "rb").read()
    return result


def break_json(path):
    text = open(path).read()
    open(path, "w").write(text[:len(text) // 2])


def older(damage):
    """damage to a baseline of a version before the findings index (its host reports are read)."""
    def damage_older(run):
        os.unlink(os.path.join(run, baseline.INDEX))
        damage(run)
    return damage_older


def rewrite_index(run, change):
    path = os.path.join(run, baseline.INDEX)
    doc = json.load(open(path))
    change(doc)
    json.dump(doc, open(path, "w"))


@pytest.mark.parametrize("damage, message", [
    (lambda run: os.unlink(os.path.join(run, "summary.json")), "is incomplete: it has no summary.json"),
    (lambda run: break_json(os.path.join(run, "summary.json")), "is not valid JSON"),
    (older(lambda run: break_json(os.path.join(run, "hosts", "a.json"))), "is not valid JSON"),
    (lambda run: os.unlink(os.path.join(run, "hosts", "b.json")), "is incomplete: summary.json lists 2 host(s), hosts/ has 1"),
    (lambda run: json.dump({"schema": "something/else"}, open(os.path.join(run, "summary.json"), "w")),
     "is not a ext4-fleet-audit/summary/v1 document"),
    (older(lambda run: json.dump({"schema": reports.HOST_SCHEMA, "host": "a", "status": "audited",
                                  "findings": [{"rule": "R", "severity": "dreadful"}]},
                                 open(os.path.join(run, "hosts", "a.json"), "w"))),
     "a.json: $.findings[0].severity 'dreadful' is not one of"),
    (older(lambda run: json.dump([], open(os.path.join(run, "hosts", "a.json"), "w"))),
     "a.json: $: Expected `object`, got `array`"),
    (older(lambda run: json.dump({"schema": "something/else"}, open(os.path.join(run, "hosts", "a.json"), "w"))),
     "is not a ext4-fleet-audit/host-report/v1"),
    # the findings index (a baseline reported by this version)
    (lambda run: break_json(os.path.join(run, baseline.INDEX)), "findings-index.json is not valid JSON"),
    (lambda run: rewrite_index(run, lambda doc: doc.update(schema="something/else")),
     "findings-index.json: $.schema 'something/else' is not a ext4-fleet-audit/findings-index/v1 document"),
    (lambda run: rewrite_index(run, lambda doc: doc["hosts"]["a"]["findings"][0].__setitem__(1, "dreadful")),
     "findings-index.json (host 'a'): $.findings[0][1]: Invalid enum value 'dreadful'"),
    (lambda run: rewrite_index(run, lambda doc: doc["hosts"]["a"].update(status="unreachable")),
     "findings-index.json (host 'a'): status 'unreachable', its summary.json says 'audited'"),
    # an index that is not of this summary is not read: the host reports are
    (lambda run: (rewrite_index(run, lambda doc: doc.update(generated_at="2020-01-01T00:00:00Z")),
                  break_json(os.path.join(run, "hosts", "a.json"))), "a.json is not valid JSON"),
    (lambda run: (rewrite_index(run, lambda doc: doc["hosts"].pop("b")), break_json(os.path.join(run, "hosts", "a.json"))),
     "a.json is not valid JSON"),
])
def test_a_broken_baseline_is_an_error_and_nothing_is_written(two_runs, damage, message):
    first, second = two_runs
    damage(first)
    latest = os.path.join(os.path.dirname(first), "latest")
    before, link = snapshot(second), os.readlink(latest)
    rc, out, err = cli("report", second, "--baseline", first)
    assert rc == 2 and err.startswith("error: baseline") and message in err, (rc, out, err)
    assert snapshot(second) == before and os.readlink(latest) == link  # nothing written, latest not moved
    rc, out, err = cli("gate", second, "--baseline", first)
    # (a host's entry of the index is read when that host is compared: the gate stops before,
    # at the run the report step could not finish)
    assert rc == 2 and (message in err or "is incomplete" in err and "findings-index.json (host" in message)


def test_missing_baseline_or_none_with_fail_on_new(two_runs, tmp_path):
    first, second = two_runs
    rc, _, err = cli("report", second, "--baseline", str(tmp_path / "nope"))
    assert rc == 2 and "baseline %s: not found" % (tmp_path / "nope") in err
    rc, _, err = cli("report", second, "--fail-on-new", "true", "--store", "off")  # with a store: its last run
    assert rc == 2 and "--fail-on-new true needs --baseline" in err
    rc, _, err = cli("gate", first, "--baseline", os.path.join(os.path.dirname(first), "latest"))
    assert rc == 2 and "is the run itself" in err
    assert not os.path.exists(os.path.join(second, "summary.json"))


# ------------------------------------------------------------------ the terminal
def test_terminal_table_is_short_escaped_and_ends_with_the_verdict():
    hosts = [{"host": "h%03d" % n, "status": "audited", "worst": "low", "findings": 1, "failing": 0, "waived": 0,
              "probe": None, "new": None, "undetermined": 0, "errors": 0, "unresolved": []} for n in range(40)]
    hosts[30].update(worst="critical", findings=3, failing=2, waived=1, probe="ran", new=1)
    # a dumpe2fs refusal: two rules undetermined, one read error, each named under the table once
    # with the hosts that share it
    undetermined = [{"rule": "EXT4_SMALL_JOURNAL", "mountpoint": "/", "missing": ["superblock.journal_bytes"]},
                    {"rule": "EXT4_INODE_128", "mountpoint": "/", "missing": ["superblock.inode_size"]}]
    errors = [{"where": "dumpe2fs /dev/vda1", "reason": "Permission denied\x1b[2J"}]
    hosts[31].update(worst="medium", undetermined=2, errors=1, unresolved=reports.unresolved(undetermined, errors))
    hosts.append({"host": "evil\n\x1b[31mhost", "status": "unreachable", "worst": None, "findings": 0, "failing": 0,
                  "waived": 0, "probe": None, "new": None, "undetermined": 0, "errors": 0, "unresolved": []})
    diff = {"run_id": "run-0", "new": [{"host": "h030", "rule": "R", "severity": "critical", "mountpoint": HOSTILE,
                                        "device": "/dev/x", "why": "new"}],
            "resolved": [], "persisting": 5, "hosts_added": ["evil\n\x1b[31mhost"], "hosts_removed": []}
    groups = reports.unresolved_groups([{"host": "h031", "unresolved_keys": reports.unresolved_keys(undetermined, errors)}])
    text = terminal.table({"hosts": hosts, "verdict": "incomplete", "reason": "1 host(s) not audited (x\ny)",
                           "baseline": diff, "unresolved_groups": groups}, limit=10)
    lines = text.splitlines()
    assert lines[0].split() == ["host", "worst", "findings", "undetermined", "read", "errors", "probe"]
    assert lines[1].startswith("evil\\n\\x1b[31mhost  not audited: unreachable")  # not audited first
    assert lines[2].split()[:3] == ["h030", "critical", "3"] and "(2 failing, 1 new, 1 waived)" in lines[2]
    assert lines[3].split() == ["h031", "medium", "1", "2", "1", "-"]
    assert lines[11] == "... 31 more hosts: see summary.md"
    assert lines[12:15] == ["  EXT4_INODE_128 undetermined on 1 host: missing superblock.inode_size (h031)",
                            "  EXT4_SMALL_JOURNAL undetermined on 1 host: missing superblock.journal_bytes (h031)",
                            "  read error (dumpe2fs /dev/vda1) on 1 host: Permission denied\\x1b[2J (h031)"]
    assert lines[15].startswith("since baseline run-0: 1 new, 0 resolved, 5 persisting; hosts added: evil\\n")
    assert lines[-1] == "verdict: incomplete: 1 host(s) not audited (x\\ny)"
    assert "\x1b" not in text and len(lines) == 18


# ------------------------------------------------------------------ the role's variables
def test_the_report_step_passes_the_baseline_options():
    """(Their defaults and documentation: tests/unit/test_role_variables.py.)"""
    role = os.path.join(ROOT, "roles", "ext4_audit")
    report_task = open(os.path.join(role, "tasks", "report.yml")).read()
    assert "--baseline" in report_task and "--fail-on-new" in report_task
