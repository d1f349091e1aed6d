"""Kernel record findings at fleet level: grouped by kernel and action in summary.json, the
end-of-run table, summary.md and report.html ("6.1.0-40-amd64 on 3 hosts: upgrade ..."), with
host-provided kernel strings escaped in each."""

import json
import os

import pytest

from test_kernel_record_rules import DEBIAN_6_1_153, RHEL_9
from test_reports import cli, write_run
from test_rules import facts, kernel

HOSTILE_RELEASE = "6.1.153-evil<script>|`$(x)`\n"


def record(host, kernel_facts):
    tree = facts(kernel=kernel_facts)
    tree["schema"] = "ext4-fleet-audit/facts/v1"
    tree["errors"] = []
    return {"host": host, "groups": [], "status": "audited", "facts": tree}


@pytest.fixture
def fleet(tmp_path):
    path = str(tmp_path / "reports" / "night")
    write_run(path, [record("web-%d" % n, DEBIAN_6_1_153) for n in range(1, 4)]
              + [record("db-1", RHEL_9), record("odd-1", kernel(HOSTILE_RELEASE))])
    return path


def test_the_fleets_kernel_findings_are_one_group_per_kernel_and_action(fleet):
    rc, out, err = cli("report", fleet)
    assert rc == 0, (out, err)  # the Debian hosts' in-branch upgrade closes crash fixes: medium, below high
    groups = json.load(open(os.path.join(fleet, "summary.json")))["kernel_groups"]
    debian = [g for g in groups if g["kernel"] == "6.1.0-40-amd64"]
    assert [(g["rule"], g["severity"], g["hosts"]) for g in debian] == [
        ("KERNEL_EXT4_UPGRADE_IN_BRANCH", "medium", 3), ("KERNEL_EXT4_NO_FIX_IN_BRANCH", "low", 3)]
    assert debian[0]["sample"] == ["web-1", "web-2", "web-3"]
    assert debian[0]["action"] == "upgrade to a kernel based on 6.1.175 or later: closes 11 records (2 of them crash/BUG)"
    rhel = [g for g in groups if g["kernel"] == RHEL_9["release"]]
    assert [(g["rule"], g["severity"], g["hosts"]) for g in rhel] == [("KERNEL_EXT4_VENDOR_ADVISORY", "info", 1)]
    assert groups[0] == debian[0]  # worst and largest first

    rc, table, _ = cli("gate", fleet, "--table")
    lines = table.splitlines()
    start = lines.index("kernel findings by kernel:")
    kernel_lines = [line for line in lines[start + 1:] if line.startswith("  ")]
    assert len(kernel_lines) == len(groups)
    assert kernel_lines[0] == ("  6.1.0-40-amd64 (upstream 6.1.153) on 3 hosts [medium]: upgrade to a kernel based on"
                               " 6.1.175 or later: closes 11 records (2 of them crash/BUG)")
    assert "\\n" in table and HOSTILE_RELEASE not in table  # the host's newline shown, not obeyed

    markdown = open(os.path.join(fleet, "summary.md")).read()
    assert "### Kernel findings by kernel" in markdown
    assert "| 6.1.0\\-40\\-amd64 \\(upstream 6.1.153\\) | 3 | medium | upgrade to a kernel based on" in markdown
    assert "<script>" not in markdown and "&lt;script&gt;" in markdown
    html = open(os.path.join(fleet, "report.html")).read()
    section = html[html.index('<section id="kernel-groups">'):]
    section = section[:section.index("</section>")]
    assert section.count("<tr>") == len(groups) + 1
    assert "<script>" not in section and "&lt;script&gt;" in section


def test_a_single_debian_hosts_kernel_findings_are_two_lines_of_the_table(tmp_path):
    path = str(tmp_path / "reports" / "one")
    write_run(path, [record("web-1", DEBIAN_6_1_153)])
    cli("report", path)
    _, table, _ = cli("gate", path, "--table")
    lines = table.splitlines()
    start = lines.index("kernel findings by kernel:")
    assert [line.split(" [")[1].split("]")[0] for line in lines[start + 1:start + 3]] == ["medium", "low"]
    assert not lines[start + 3].startswith("  ")
