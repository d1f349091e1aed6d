"""Live filesystem use on real loop filesystems (issue 26, section 4), and a real xfs listed as not
audited (section 5): the real ext4_facts module, run by ansible as tests/integration/
test_fact_paths.py runs it, and the real engine over its record.

The superblock's Free inodes and Free blocks are written back only at unmount, freeze or error:
an ext4 with few inodes (mke2fs -N) filled after mount still reads nearly empty there, and one
filled, unmounted, mounted again and emptied still reads full. The rules go by statvfs."""

import os
import subprocess

from conftest import ansible_playbook, load_json, needs_root, run
from ext4audit.formats import markdown
from ext4audit.model import contract
from ext4audit.rules import catalog as catalog_mod, engine
from test_module_errors import run_module

pytestmark = needs_root
CATALOG = catalog_mod.load()


def facts_of(tmp_path, mountpoint):
    """The module's record, and this filesystem's part of it."""
    record = run_module("fstab_path=/dev/null", tmp_path)["ext4_facts"]
    fs, = [fs for fs in record["filesystems"] if fs["mountpoint"] == mountpoint]
    return record, fs


def use_findings(record, mountpoint):
    findings, undetermined, _ = engine.evaluate_host(record, CATALOG)
    assert [u for u in undetermined if u["mountpoint"] == mountpoint and u["rule"].startswith(
        ("EXT4_FS_NEARLY_FULL", "EXT4_INODES_NEARLY_EXHAUSTED"))] == []
    return dict((f["rule"], f) for f in findings if f["mountpoint"] == mountpoint
                and f["rule"] in ("EXT4_FS_NEARLY_FULL", "EXT4_INODES_NEARLY_EXHAUSTED"))


def test_inode_and_block_use_are_live_and_a_stale_superblock_is_not_believed(loopfs, tmp_path):
    made = loopfs.make("fewinodes", size="16M", mkfs_args=["-N", "64"])
    mnt, device = made["mountpoint"], made["device"]
    start = os.statvfs(mnt)
    files = [os.path.join(mnt, "f%d" % i) for i in range(start.f_ffree - 1)]
    for path in files:  # every inode but one
        open(path, "w").close()
    os.sync()

    record, fs = facts_of(tmp_path, mnt)
    live = os.statvfs(mnt)
    assert fs["usage"] == {"block_size": live.f_frsize, "blocks": live.f_blocks, "blocks_free": live.f_bfree,
                           "blocks_avail": live.f_bavail, "inodes": live.f_files, "inodes_free": 1}
    # The superblock has not caught up (it was written when the filesystem was mounted, empty).
    assert fs["superblock"]["inode_count"] == live.f_files and fs["superblock"]["free_inodes"] > 1
    contract.check(dict(record, schema=contract.FACTS_SCHEMA), contract.Facts, "facts")
    found = use_findings(record, mnt)
    assert set(found) == {"EXT4_INODES_NEARLY_EXHAUSTED"}
    inodes = found["EXT4_INODES_NEARLY_EXHAUSTED"]
    assert inodes["severity"] == "high" and inodes["evidence"]["derived.use_source"] == "statvfs"
    assert "(1 free; live counts, statvfs)" in inodes["message"]

    # Filled, unmounted (the superblock now says full), mounted again and emptied.
    run(["umount", mnt])
    run(["mount", "-t", "ext4", device, mnt])
    for path in files:
        os.unlink(path)
    os.sync()
    record, fs = facts_of(tmp_path, mnt)
    assert fs["superblock"]["free_inodes"] == 1  # stale the other way
    assert fs["usage"]["inodes_free"] == os.statvfs(mnt).f_ffree == start.f_ffree
    assert use_findings(record, mnt) == {}

    # Blocks: fill what ordinary users may use; df's Use% is then 100%.
    with open(os.path.join(mnt, "big"), "wb") as handle:
        handle.write(b"\0" * (os.statvfs(mnt).f_bavail * os.statvfs(mnt).f_frsize))
        handle.flush()
        os.fsync(handle.fileno())
    record, fs = facts_of(tmp_path, mnt)
    assert fs["usage"]["blocks_avail"] == 0 and fs["usage"]["blocks_free"] > 0  # root's reserve is left
    full = use_findings(record, mnt)["EXT4_FS_NEARLY_FULL"]
    assert full["severity"] == "high" and full["evidence"]["derived.block_use"] == 1.0
    os.unlink(os.path.join(mnt, "big"))
    os.sync()
    assert use_findings(facts_of(tmp_path, mnt)[0], mnt) == {}


def test_a_mount_point_covered_by_a_later_mount_is_not_asked_a_bind_mount_of_it_is(loopfs, tmp_path):
    made = loopfs.make("covered", size="64M")
    mnt = made["mountpoint"]
    bind = os.path.join(loopfs.base, "mnt", "covered-bind")
    os.makedirs(bind)
    run(["mount", "--bind", mnt, bind])
    loopfs.mounts.append(bind)
    run(["mount", "-t", "tmpfs", "-o", "size=1m,nr_inodes=5", "cover", mnt])  # hides the ext4 at mnt
    loopfs.mounts.append(mnt)
    try:
        record, fs = facts_of(tmp_path, mnt)
        # the ext4's counts, read through the bind mount (the tmpfs has 5 inodes)
        assert fs["usage"]["inodes"] == os.statvfs(bind).f_files != 5
        run(["umount", bind])
        loopfs.mounts.remove(bind)
        record, fs = facts_of(tmp_path, mnt)
        assert fs["usage"] is None
        errors = [e["reason"] for e in record["errors"] if e["where"] == "filesystem " + mnt]
        assert errors == ["no live use read: %s is below a later mount %s" % (mnt, mnt)]
    finally:
        subprocess.run(["umount", mnt], check=False)


def test_a_real_xfs_is_listed_as_not_audited_in_the_host_report_and_the_terminal(loopfs, tmp_path):
    image = os.path.join(loopfs.base, "xfs.img")
    run(["truncate", "-s", "320M", image])
    run(["mkfs.xfs", "-q", image])
    loop = run(["losetup", "--find", "--show", image]).strip()
    loopfs.loops.append(loop)
    mnt = os.path.join(loopfs.base, "mnt", "xfs <b>")
    os.makedirs(mnt)
    run(["mount", "-t", "xfs", loop, mnt])
    loopfs.mounts.append(mnt)
    bind = os.path.join(loopfs.base, "mnt", "xfs-bind")
    os.makedirs(bind)
    run(["mount", "--bind", mnt, bind])  # the same filesystem again: listed once
    loopfs.mounts.append(bind)

    record = run_module("fstab_path=/dev/null", tmp_path)["ext4_facts"]
    assert [m for m in record["not_audited"] if m["source"] == loop] == [
        {"mountpoint": mnt, "fstype": "xfs", "source": loop}]
    assert not [fs for fs in record["filesystems"] if fs["mountpoint"] in (mnt, bind)]

    reports = tmp_path / "reports"
    rc, out = ansible_playbook("playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                               "-e", "ext4_audit_fstab_path=/dev/null", "-e", "chopper_probe_enabled=false",
                               "-e", "ext4_audit_gate=false")
    assert rc == 0, out
    report = load_json(os.path.join(str(reports), "latest", "hosts", "localhost.json"))
    assert {"mountpoint": mnt, "fstype": "xfs", "source": loop} in report["not_audited"]
    assert "  not audited: xfs at %s on 1 host (localhost)" % mnt in out.splitlines()
    page = open(os.path.join(str(reports), "latest", "summary.md")).read()
    assert "- not audited: xfs at %s" % markdown.md(mnt) in page and "xfs <b>" not in page
