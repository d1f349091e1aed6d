"""The report step's terminal output at fleet size: one screen for 1,000 hosts with mixed results
(unreachable hosts, failing and waived findings, unreadable superblocks, an expired waiver), the
undetermined rules collapsed across hosts and the expired waivers shown."""

import os
import re
import sys

import pytest

from conftest import ROOT
from ext4audit.formats import terminal
from ext4audit.report import reports
from test_reports import cli

sys.path.insert(0, os.path.join(ROOT, "bench"))
import aggregate  # noqa: E402  (the benchmark's fleet: real fixtures, parsed by the real parsers)

SCREEN = 40  # issue 31: about one screen, whatever the fleet's size


@pytest.fixture(scope="module")
def fleet_run(tmp_path_factory):
    """A 1,000-host run folder as the playbook leaves it, and its waiver file (one waiver expired)."""
    folder = tmp_path_factory.mktemp("fleet")
    specs = aggregate.fleet(1000, 7, False)
    run = str(folder / "reports" / "run-1")
    aggregate.write_run(run, specs)
    aggregate.write_waivers(str(folder / "waivers.json"), specs)
    return run, str(folder / "waivers.json")


def test_one_thousand_hosts_fit_one_screen(fleet_run):
    run, waivers = fleet_run
    # the report step's command as roles/ext4_audit/tasks/report.yml runs it (the results store on)
    rc, out, err = cli("report", run, "--fail-on", "high", "--waivers", waivers)
    assert rc == 2, err  # 1% of the hosts unreachable: incomplete
    # what the playbook shows: stdout, stderr and the report path (the "Show the hosts" task)
    lines = out.splitlines() + err.splitlines() + ["report: %s/report.html" % run]
    text = "\n".join(lines)
    assert len(lines) <= SCREEN, text
    assert lines[0].startswith("history (") and lines[1].split()[:2] == ["host", "worst"]
    assert re.search(r"^\.\.\. \d+ more hosts: see report\.html$", text, re.M), text
    rows = [line for line in lines if line.startswith("host-")]
    assert len(rows) >= terminal.MIN_ROWS and all("not audited: unreachable" in row for row in rows[:12]), text

    # undetermined rules: one line per rule and missing facts, with the host count and examples
    assert re.search(r"^  EXT4_INODE_128 undetermined on [0-9,]+ hosts: missing sb\.inode_size "
                     r"\(e\.g\. host-\S+, host-\S+\)$", text, re.M), text
    assert not re.search(r"^  host-\S+: undetermined ", text, re.M), text  # no lines per host
    # the expired waiver, with its rule, date, approver and host
    assert "expired waivers (1): they no longer waive anything" in lines, text
    assert re.search(r"^  EXT4_NO_JOURNAL on 1 host: expired 2020-01-01, approver storage-team \(host-\S+\)$",
                     text, re.M), text
    assert lines[-2].startswith("verdict: incomplete: 12 host(s) not audited"), text


def test_each_group_counts_every_host_that_shares_it(fleet_run):
    run, _ = fleet_run
    summary = reports.read_json(os.path.join(run, reports.SUMMARY), "summary")
    groups = summary["unresolved_groups"]
    undetermined = [g for g in groups if g["kind"] == "undetermined" and g["subject"] == "EXT4_INODE_128"]
    assert [g["detail"] for g in undetermined] == ["sb.inode_size"]
    # every host whose superblock could not be read has EXT4_INODE_128 undetermined: same count
    unreadable = [h["host"] for h in summary["hosts"] if h["status"] == "audited" and h["errors"]]
    assert undetermined[0]["hosts"] == len(unreadable) > 3
    assert undetermined[0]["sample"] == unreadable[:reports.UNRESOLVED_GROUP_SAMPLE]
    assert [g["hosts"] for g in groups] == sorted((g["hosts"] for g in groups), reverse=True)


def test_a_small_run_keeps_every_host_and_names_each_gap():
    hosts = [{"host": "web-%d" % n, "status": "audited", "worst": "low", "findings": 1, "failing": 0, "waived": 0,
              "undetermined": 1, "errors": 0, "not_audited": ["xfs at /srv"] if n < 2 else []} for n in range(3)]
    summary = {"hosts": hosts, "verdict": "pass", "reason": "ok", "expired_waivers": [],
               "unresolved_groups": [{"kind": "undetermined", "subject": "EXT4_INODE_128", "detail": "sb.inode_size",
                                      "hosts": 3, "sample": ["web-0", "web-1", "web-2"]},
                                     {"kind": "read error", "subject": "filesystem /", "detail": "dumpe2fs: \x1b[2J",
                                      "hosts": 1, "sample": ["web-0"]}]}
    lines = terminal.table(summary).splitlines()
    assert len(lines) == 1 + 3 + 4 and not any(line.startswith("...") for line in lines)
    assert lines[4:] == ["  EXT4_INODE_128 undetermined on 3 hosts: missing sb.inode_size (e.g. web-0, web-1)",
                         "  read error (filesystem /) on 1 host: dumpe2fs: \\x1b[2J (web-0)",
                         "  not audited: xfs at /srv on 2 hosts (web-0, web-1)",
                         "verdict: pass: ok"]
