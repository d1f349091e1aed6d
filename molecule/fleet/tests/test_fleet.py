"""Verify molecule/fleet: the reports of the run in which one host went down, and the hosts.

Reports are read locally. The hosts are checked over SSH with Testinfra's ansible backend and
the fleet's own inventory, as the audit reached them. Runs under `molecule verify`, or by hand
while the fleet is up: .venv/bin/pytest molecule/fleet/tests
"""

import json
import socket
from pathlib import Path

import pytest
import testinfra

from ext4audit.report import host_report as host_reports

ROOT = Path(__file__).resolve().parents[3]
STATE = ROOT / ".cache" / "testhosts" / "fleet"     # fleet_up.yml: expected.json, inventory.yml
SCENARIO = ROOT / ".cache" / "molecule" / "fleet"   # prepare: before/, converge: converge.json, reports/


def load(path):
    with open(path) as handle:
        return json.load(handle)


EXPECTED = load(STATE / "expected.json")
VICTIM = load(SCENARIO / "converge.json")["victim"]
SURVIVORS = sorted(name for name in EXPECTED["hosts"] if name != VICTIM)
REPORTS = SCENARIO / "reports" / "latest"


def host_report(name):
    """A host's report in full (v2 files refer to the run's shared file and facts record)."""
    return host_reports.read(str(REPORTS / "hosts" / (name + ".json")))


def by_mountpoint(report):
    """mount point -> {rule: severity}, from a host report's findings."""
    found = {}
    for finding in report["findings"]:
        found.setdefault(finding["mountpoint"], {})[finding["rule"]] = finding["severity"]
    return found


def test_the_summary_is_incomplete_because_of_the_victim_alone():
    summary = load(REPORTS / "summary.json")
    assert summary["verdict"] == "incomplete"
    assert [entry["host"] for entry in summary["hosts_not_audited"]] == [VICTIM]
    assert summary["hosts_not_audited"][0]["status"] == "unreachable"
    statuses = {row["host"]: row["status"] for row in summary["hosts"]}
    assert statuses == dict({name: "audited" for name in SURVIVORS}, **{VICTIM: "unreachable"})
    assert load(SCENARIO / "converge.json")["audit_rc"] != 0


def test_the_victim_is_reported_unreachable_with_its_reason():
    report = host_report(VICTIM)
    assert report["status"] == "unreachable"
    assert report["filesystems"] == [] and report["findings"] == []
    # Ansible's words for an SSH session that died under it, with the host's address.
    assert EXPECTED["hosts"][VICTIM]["address"] in report["reason"], report["reason"]
    assert "ssh" in report["reason"].lower(), report["reason"]
    summary = load(REPORTS / "summary.json")
    assert summary["hosts_not_audited"][0]["reason"] == report["reason"]


def test_the_victim_is_down():
    with socket.socket() as sock:
        sock.settimeout(2)
        assert sock.connect_ex((EXPECTED["hosts"][VICTIM]["address"], 22)) != 0


@pytest.mark.parametrize("name", SURVIVORS)
def test_each_other_host_got_exactly_its_expected_findings(name):
    report = host_report(name)
    assert report["status"] == "audited" and report["host"] == name
    expected = EXPECTED["hosts"][name]["filesystems"]
    found = by_mountpoint(report)
    for mountpoint, filesystem in expected.items():
        assert found.get(mountpoint, {}) == filesystem["rules"], (name, mountpoint, filesystem["kind"])
    # It saw its own filesystems and the machine's root, and none of the other hosts'.
    assert {fs["mountpoint"] for fs in report["filesystems"]} == set(expected) | {"/"}
    # None: host-wide findings (the kernel CNA records this machine's kernel lacks), the same on every host.
    assert set(found) <= set(expected) | {"/", None}


def test_the_machine_root_gets_the_same_findings_on_every_host():
    """Every host sees the machine's real `/` (same kernel and /proc): one answer for all."""
    answers = {name: by_mountpoint(host_report(name)).get("/", {}) for name in SURVIVORS}
    assert len({json.dumps(answer, sort_keys=True) for answer in answers.values()}) == 1, answers


@pytest.fixture(scope="module", params=SURVIVORS)
def seen(request):
    """What a surviving host shows over SSH now, read once (each command is an SSH connection)."""
    name = request.param
    host = testinfra.get_host("ansible://" + name, ansible_inventory=str(STATE / "inventory.yml"))
    before = load(SCENARIO / "before" / (name + ".json"))
    superblocks = {}
    for device in before["superblocks"]:
        result = host.run("env LC_ALL=C dumpe2fs -h %s", device)
        assert result.rc == 0, result.stderr
        superblocks[device] = result.stdout
    return {"name": name, "before": before, "hostname": host.check_output("hostname"),
            "mountinfo": host.file("/proc/self/mountinfo").content_string, "superblocks": superblocks}


def test_each_host_is_a_machine_of_its_own(seen):
    """Its own hostname (UTS namespace) and its own ext4 mounts (mount namespace): of the fleet's
    mounts (/srv/fleet/), exactly its own. The machine's other mounts (a container runtime's bind
    of its storage, say) show in every host's copy of the namespace and are no host's own."""
    assert seen["hostname"] == seen["name"]
    mounted = {line.split()[4] for line in seen["mountinfo"].splitlines() if " - ext4 " in line}
    assert "/" in mounted
    assert {m for m in mounted if m.startswith("/srv/fleet/")} == set(EXPECTED["hosts"][seen["name"]]["filesystems"])


def test_the_audit_changed_nothing_on_the_host(seen):
    """Same mount table (as the host sees it) and same superblocks as before the audit."""
    before = seen["before"]
    assert seen["mountinfo"] == before["mountinfo"]
    assert len(before["superblocks"]) == len(EXPECTED["hosts"][seen["name"]]["filesystems"])
    for device, superblock in before["superblocks"].items():
        assert seen["superblocks"][device].rstrip("\n") == superblock.rstrip("\n"), (seen["name"], device)
