"""playbooks/remediate.yml on the loopback SSH fleet (testhosts/fleet, root): three hosts over real
SSH, each with its own ext4 loop mounts and its own fstab (/srv/fleet/fstab, inside its mount
namespace). --check --diff shows each host's own fstab lines and changes nothing; the run fixes
the live findings on every host that has one and leaves the offline one pending; a second run
changes nothing. Its own addresses, state and image folders: it never meets the Molecule fleet.

About two minutes here; `pytest --ignore=tests/fleet` skips it with the Molecule scenarios."""

import json
import os
import re
import sys

import pytest

from conftest import ROOT, ansible_playbook, needs_root, run

pytestmark = needs_root

HELPER = os.path.join(ROOT, "testhosts", "fleet", "fleet_host.py")
STATE = os.path.join(ROOT, ".cache", "testhosts", "remediate-fleet")
IMAGES = "/dev/shm/ext4audit-remediate-fleet"
FSTAB = "/srv/fleet/fstab"
# host i gets kinds i-1 and i of this order: fleet-01 commit60 + nobarrier, fleet-02 nobarrier +
# datajournal, fleet-03 datajournal + smalljournal (testhosts/fleet/kinds.yml)
FLEET = {"fleet_size": 3, "fleet_fs_per_host": 2, "fleet_address_prefix": "127.0.3",
         "fleet_kind_order": ["commit60", "nobarrier", "datajournal", "smalljournal"],
         "fleet_state_dir": STATE, "fleet_image_dir": IMAGES}
SHOW_DIFF = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "yaml",
             "PYTHONPATH": ROOT}
# the outcome task's lines: "ok: [fleet-01] => (item=RULE MOUNTPOINT) =>" then "msg: RULE on MOUNTPOINT: STATUS..."
OUTCOME = re.compile(r"^ok: \[(fleet-\d+)\] => \(item=\S+ \S+\) =>\s*\n\s+msg: '?(\S+) on (\S+): (\w+)", re.M)


def left_of_the_fleet():
    return json.loads(run([sys.executable, HELPER, "status", "--state", STATE, "--images", IMAGES]))


@pytest.fixture(name="fleet")
def loopback_fleet():
    """The fleet up, and always torn down: fleet_down.yml fails unless nothing of it is left."""
    rc, out = ansible_playbook("playbooks/testhosts/fleet_up.yml", "-e", json.dumps(FLEET))
    try:
        assert rc == 0, out
        with open(os.path.join(STATE, "expected.json")) as handle:
            yield json.load(handle)["hosts"]
    finally:
        rc, out = ansible_playbook("playbooks/testhosts/fleet_down.yml", "-e", json.dumps(FLEET))
        assert rc == 0 and sum(len(v) for v in left_of_the_fleet().values()) == 0, out


def in_host(host, *argv):
    """A command inside a fleet host's mount namespace (its fstab and mounts are seen there only)."""
    with open(os.path.join(STATE, host, "sshd.pid")) as handle:
        pid = handle.read().strip()
    return run(["nsenter", "--target", pid, "--mount", "--"] + list(argv))


def options(host, mountpoint):
    """The options in effect on a host's filesystem: /proc/fs/ext4/<its loop device>/options."""
    for line in in_host(host, "cat", "/proc/self/mountinfo").splitlines():
        fields = line.split()
        if fields[4] == mountpoint:
            device = line.split(" - ")[1].split()[1]
            return in_host(host, "cat", "/proc/fs/ext4/%s/options" % os.path.basename(device)).split()
    raise AssertionError("%s: %s is not mounted" % (host, mountpoint))


def remediate(tmp_path, *extra):
    return ansible_playbook("-i", os.path.join(STATE, "inventory.yml"), "playbooks/remediate.yml",
                            "-e", json.dumps({"ext4_audit_reports_dir": str(tmp_path / "reports"),
                                              "ext4_audit_fstab_path": FSTAB, "chopper_probe_enabled": False,
                                              "ext4_audit_waivers_file": str(tmp_path / "waivers.yml")}),
                            *extra, env=SHOW_DIFF)


def outcomes(out):
    """{(host, rule, mount point): status} of the fleet's filesystems, from the outcome task."""
    return dict(((host, rule, mountpoint), status) for host, rule, mountpoint, status in OUTCOME.findall(out)
                if mountpoint.startswith("/srv/fleet/"))


def test_check_diff_then_apply_on_every_host(fleet, tmp_path):
    (tmp_path / "waivers.yml").write_text("waivers: []\n")
    fstabs = dict((host, in_host(host, "cat", FSTAB)) for host in sorted(fleet))
    image = dict(((host, fs["kind"]), fs["image"]) for host, spec in fleet.items()
                 for fs in spec["filesystems"].values())

    # --check --diff: each host's own lines, nothing changed anywhere
    rc, out = remediate(tmp_path, "--check", "--diff")
    assert rc == 0, out
    for host, kind, line in (("fleet-01", "commit60", "loop,commit=5"), ("fleet-01", "nobarrier", "loop,barrier"),
                             ("fleet-02", "nobarrier", "loop,barrier")):
        assert "+%s /srv/fleet/%s ext4 %s 0 2" % (image[host, kind], kind, line) in out, out
    assert "smalljournal" not in "".join(re.findall(r"^\+.*$", out, re.M))  # offline: no fstab line
    assert dict((host, in_host(host, "cat", FSTAB)) for host in fstabs) == fstabs
    assert "commit=60" in options("fleet-01", "/srv/fleet/commit60")
    assert "nobarrier" in options("fleet-02", "/srv/fleet/nobarrier")

    # apply over SSH: live fixes in effect on every host, the offline one pending
    rc, out = remediate(tmp_path)
    assert outcomes(out) == {
        ("fleet-01", "EXT4_LONG_COMMIT", "/srv/fleet/commit60"): "fixed",
        ("fleet-01", "EXT4_NOBARRIER", "/srv/fleet/nobarrier"): "fixed",
        ("fleet-02", "EXT4_NOBARRIER", "/srv/fleet/nobarrier"): "fixed",
        ("fleet-03", "EXT4_SMALL_JOURNAL", "/srv/fleet/smalljournal"): "pending",
    }, out
    assert "commit=5" in options("fleet-01", "/srv/fleet/commit60")
    assert "barrier" in options("fleet-01", "/srv/fleet/nobarrier") and "barrier" in options("fleet-02",
                                                                                         "/srv/fleet/nobarrier")
    assert "data=journal" in options("fleet-02", "/srv/fleet/datajournal")  # low: not selected
    applied = dict((host, in_host(host, "cat", FSTAB)) for host in fstabs)
    assert "%s /srv/fleet/commit60 ext4 loop,commit=5 0 2" % image["fleet-01", "commit60"] in applied["fleet-01"]
    assert applied["fleet-03"] == fstabs["fleet-03"]
    backups = in_host("fleet-01", "sh", "-c", "ls /srv/fleet/fstab.*~ | wc -l").strip()
    assert backups == "2", backups  # one per edit, beside the fstab

    # a second run changes nothing on any host
    rc, out = remediate(tmp_path)
    recap = dict(re.findall(r"^(fleet-\d+)\s*:\s*ok=\d+\s+changed=(\d+)", out, re.M))
    assert sorted(recap) == ["fleet-01", "fleet-02", "fleet-03"] and set(recap.values()) == {"0"}, out
    assert dict((host, in_host(host, "cat", FSTAB)) for host in fstabs) == applied
