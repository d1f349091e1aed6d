"""The real ext4_facts module, run by ansible, turns what it cannot read into error entries."""

import json
import os
import subprocess

import pytest

from conftest import ROOT, VENV_BIN, needs_root

pytestmark = needs_root


def run_module(args, tmp_path):
    """ansible's ad-hoc mode with the tree callback: one JSON result file per host."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    tree = str(tmp_path / "tree")
    result = subprocess.run([os.path.join(VENV_BIN, "ansible"), "localhost", "-m", "ext4_facts", "-a", args,
                             "--tree", tree], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == 0, result.stdout.decode()
    with open(os.path.join(tree, "localhost")) as handle:
        return json.load(handle)


@pytest.mark.parametrize("dumpe2fs, reason", [
    ("/nonexistent/dumpe2fs", "dumpe2fs not found (/nonexistent/dumpe2fs); install e2fsprogs"),
    ("/bin/false", "failed (rc=1)"),
    ("/bin/echo", "no superblock header"),
])
def test_superblock_problems_become_errors(loopfs, tmp_path, dumpe2fs, reason):
    made = loopfs.make("plain", size="256M")
    result = run_module("dumpe2fs=%s" % dumpe2fs, tmp_path)
    assert result["changed"] is False and result.get("failed", False) is False
    facts = result["ext4_facts"]
    mine = [fs for fs in facts["filesystems"] if fs["mountpoint"] == made["mountpoint"]][0]
    assert mine["superblock"] is None
    assert mine["options_source"] == "proc" and "data=ordered" in mine["options"]
    errors = [e for e in facts["errors"] if e["where"] == "filesystem " + made["mountpoint"]]
    assert len(errors) == 1 and reason in errors[0]["reason"], facts["errors"]


def test_unreadable_and_malformed_fstab(tmp_path):
    missing = run_module("fstab_path=%s superblock=false" % (tmp_path / "nope"), tmp_path)["ext4_facts"]
    assert [e for e in missing["errors"] if e["where"] == "fstab" and "No such file" in e["reason"]]
    bad = tmp_path / "fstab"
    bad.write_text("/dev/sda1 /only-two\nUUID=x / ext4 defaults 0 1\n")
    facts = run_module("fstab_path=%s superblock=false" % bad, tmp_path)["ext4_facts"]
    assert [e for e in facts["errors"] if "fstab line 1 has 2 fields" in e["reason"]]


def test_check_mode_is_supported():
    env_args = "superblock=false"
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    result = subprocess.run([os.path.join(VENV_BIN, "ansible"), "localhost", "--check", "-m", "ext4_facts",
                             "-a", env_args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = result.stdout.decode()
    assert result.returncode == 0 and "localhost | SUCCESS" in out and "changed: false" in out, out


def test_volume_facts_reach_the_new_rules(loopfs, tmp_path):
    """The facts the catalog review added, read by the real module from real loop filesystems:
    the disk kind and reported I/O size (a loop device has no RAID geometry), the device size, the
    superblock counts, and the norecovery option as the kernel prints it."""
    from ext4audit.rules import catalog as catalog_mod, engine
    striped = loopfs.make("striped", size="256M", mkfs_args=["-E", "stride=16,stripe_width=64"])
    unjournalled = loopfs.make("noload", size="256M", mount_options="noload")
    facts = run_module("fstab_path=%s" % (tmp_path / "nope"), tmp_path)["ext4_facts"]
    mine = dict((fs["mountpoint"], fs) for fs in facts["filesystems"])
    fs = mine[striped["mountpoint"]]
    assert fs["queue"]["kind"] == "loop" and fs["queue"]["optimal_io_size"] == 0
    assert fs["device_bytes"] == 256 << 20
    sb = fs["superblock"]
    assert sb["error_count"] == 0 and sb["state"] == "clean"
    assert 0 < sb["free_inodes"] < sb["inode_count"] and sb["reserved_block_count"] > 0
    assert "norecovery" in mine[unjournalled["mountpoint"]]["options"]
    facts["filesystems"] = [fs, mine[unjournalled["mountpoint"]]]
    findings = engine.evaluate_host(facts, catalog_mod.load())[0]
    found = dict(((f["mountpoint"], f["rule"]), f["severity"]) for f in findings)
    assert found[(striped["mountpoint"], "EXT4_STRIPE_WITHOUT_RAID")] == "low"
    assert found[(unjournalled["mountpoint"], "EXT4_NORECOVERY")] == "high"
