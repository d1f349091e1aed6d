"""Live filesystem use (issue 26, section 4) and the filesystems the audit does not cover
(section 5): which mounts the facts modules list as not audited, the use rules' source of counts
(statvfs on a host, the superblock only in a disk image), the per-host capacity limits, and where
a host's not-audited filesystems are shown. The real module on real loop filesystems:
tests/integration/test_live_usage.py."""

import copy
import datetime
import os

import pytest

from conftest import ROOT, fixture_text
from ext4audit.formats import html as report_html, markdown
from ext4audit.model import contract
from ext4audit.report import reports
from ext4audit.steps import fleet
from ext4audit.rules import catalog as catalog_mod, engine, policy
from ext4audit.formats import terminal
from ext4audit.model import safe_yaml
from ext4audit.parsers.ext4_parsers.common import NETFS_TYPES
from ext4audit.parsers.ext4_parsers.fstab import fstab_not_audited, parse_fstab
from ext4audit.parsers.ext4_parsers.mounts import not_audited, parse_mountinfo
from ext4audit.parsers.ext4_parsers.superblock import parse_dumpe2fs
from test_rules import CATALOG, facts

NOW = datetime.datetime(2026, 11, 29, 4, 0, tzinfo=datetime.timezone.utc)


def listed(text):
    return [(m["fstype"], m["mountpoint"]) for m in parse_mountinfo(text) if not_audited(m, NETFS_TYPES)]


def test_an_xfs_and_its_bind_mount_are_listed_but_not_pseudo_filesystems_or_an_overlay_at_a_folder():
    # Captured here: xfs on a loop device, a bind mount of it, an overlay at a folder, tmpfs, cgroups.
    assert listed(fixture_text("mountinfo", "xfs-overlay-bind-6.18.txt")) == [
        ("xfs", "/dev/shm/livefs-cap-RT0D/xfs"), ("xfs", "/dev/shm/livefs-cap-RT0D/bind")]
    assert listed(fixture_text("mountinfo", "host-vda.txt")) == []  # ext4 root and pseudo filesystems only


@pytest.mark.parametrize("line, expected", [
    ("1801 1800 0:95 / / rw,relatime - overlay overlay rw,lowerdir=/var/lib/docker/overlay2/l/ABC", True),
    ("30 1 0:52 / / rw,relatime - zfs rpool/ROOT/ubuntu rw", True),
    ("31 30 0:45 /@home /home rw,relatime - btrfs /dev/nvme0n1p3 rw,ssd,space_cache=v2,subvol=/@home", True),
    ("32 30 259:1 / /boot/efi rw,relatime - vfat /dev/nvme0n1p1 rw,fmask=0077,dmask=0077", True),
    ("33 30 7:3 / /snap/core22/1380 ro,nodev,relatime - squashfs /dev/loop3 ro,errors=continue", False),
    ("34 30 0:30 / /tmp rw,nosuid,nodev - tmpfs tmpfs rw,size=65536k", False),
    ("35 1 0:51 / / rw,relatime - nfs4 10.0.0.2:/export/root rw", False),  # a network mount: listed as netfs
    ("36 30 254:0 / /srv rw,relatime - ext4 /dev/vda rw", False),  # audited
])
def test_which_mounts_are_not_audited(line, expected):
    assert bool(listed(line + "\n")) is expected


def test_an_image_fstab_lists_its_vfat_but_not_swap_tmpfs_cd_drives_or_network_mounts():
    entries, _ = parse_fstab(fixture_text("fstab", "fstab-mixed.txt"))
    assert [(e["fstype"], e["mountpoint"]) for e in entries if fstab_not_audited(e)] == [("vfat", "/boot/efi")]


# ------------------------------------------------------------------ where the counts come from
FULL_SB = dict(parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-default-2g.txt")), free_inodes=100,
               free_blocks=10000)


def use_finding(tree, rule, limits=None):
    findings, undetermined, _ = engine.evaluate_host(tree, CATALOG, limits=limits)
    return ([f for f in findings if f["rule"] == rule], [u for u in undetermined if u["rule"] == rule])


def test_a_host_is_judged_by_its_live_counts_never_by_its_superblock():
    # The superblock says nearly every inode and block is in use (as after filling, unmounting,
    # mounting again and emptying); statvfs says the filesystem is all but empty.
    tree = facts(sb=copy.deepcopy(FULL_SB))
    assert use_finding(tree, "EXT4_INODES_NEARLY_EXHAUSTED") == ([], [])
    assert use_finding(tree, "EXT4_FS_NEARLY_FULL") == ([], [])
    tree["filesystems"][0]["usage"] = None  # statvfs not read: undetermined, not the superblock's word
    _, undetermined = use_finding(tree, "EXT4_INODES_NEARLY_EXHAUSTED")
    assert undetermined[0]["missing"] == ["derived.inode_use", "derived.use_source"]


def test_a_disk_image_is_judged_by_its_superblock_and_the_evidence_says_so():
    tree = facts(sb=copy.deepcopy(FULL_SB))
    tree["filesystems"][0]["usage"] = None  # what ext4_image_facts records
    tree["image"] = {"fstab_unresolved": []}
    (finding,), _ = use_finding(tree, "EXT4_INODES_NEARLY_EXHAUSTED")
    assert finding["severity"] == "high" and finding["evidence"]["derived.use_source"] == "superblock"
    assert finding["message"].endswith("(100 free; the image's superblock).")
    (full,), _ = use_finding(tree, "EXT4_FS_NEARLY_FULL")  # 10000 free, 26214 reserved: none left to users
    assert full["severity"] == "high" and full["evidence"]["derived.block_use"] == 1.0


# ------------------------------------------------------------------ the host's capacity limits
def ninety_two_percent_full():
    return facts(usage={"block_size": 4096, "blocks": 1000, "blocks_free": 130, "blocks_avail": 76,
                        "inodes": 1000, "inodes_free": 500})


def test_the_limits_are_the_hosts_own():
    (finding,), _ = use_finding(ninety_two_percent_full(), "EXT4_FS_NEARLY_FULL")
    assert finding["severity"] == "medium"
    assert list(finding["evidence"].items()) == [("derived.block_use", 870 / 946.0), ("limit.block_use_medium", 0.9),
                                                 ("derived.use_source", "statvfs")]
    loose = policy.capacity_limits({"block_use_medium": 0.95}, "host a")
    assert use_finding(ninety_two_percent_full(), "EXT4_FS_NEARLY_FULL", loose) == ([], [])
    strict = policy.capacity_limits({"block_use_high": 0.91}, "host a")
    (finding,), _ = use_finding(ninety_two_percent_full(), "EXT4_FS_NEARLY_FULL", strict)
    assert finding["severity"] == "high" and finding["escalated_because"].startswith(
        "91.0% or more is in use (ext4_audit_capacity_limits.block_use_high)")


def test_the_limits_reach_the_engine_from_the_hosts_policy_record():
    tree = ninety_two_percent_full()
    tree.update(schema=contract.FACTS_SCHEMA, errors=[])
    record = {"host": "db-1", "status": "audited", "facts": tree,
              "policy": {"fail_on": "high", "capacity_limits": {"block_use_medium": 0.95}}}
    report = fleet.build_host_report(record, CATALOG, [], "run-1", NOW)
    assert "EXT4_FS_NEARLY_FULL" not in [f["rule"] for f in report["findings"]]
    assert report["policy"]["capacity_limits"] == dict(policy.CAPACITY_LIMITS, block_use_medium=0.95)
    contract.check(report, contract.HostReport, "host report")
    record["policy"] = {"fail_on": "high"}  # a record without limits: the defaults
    assert "EXT4_FS_NEARLY_FULL" in [f["rule"] for f in fleet.build_host_report(record, CATALOG, [], "run-1",
                                                                                NOW)["findings"]]


@pytest.mark.parametrize("value, error", [
    ({"blocks_medium": 0.9}, "'blocks_medium' is not one of block_use_medium"),
    ({"block_use_high": 97}, "block_use_high must be a share above 0 and at most 1"),
    ({"inode_use_high": True}, "inode_use_high must be a share"),
    ({"inode_use_medium": "0.9"}, "inode_use_medium must be a share"),
    ({"inode_use_medium": 0.99}, "inode_use_medium (0.99) is above inode_use_high (0.97)"),
    ([0.9], "must map block_use_medium"),
])
def test_bad_limits_are_an_error_naming_the_host_and_the_variable(value, error):
    with pytest.raises(policy.PolicyError) as exc:
        policy.make({"capacity_limits": value}, CATALOG, "host db-1", "high")
    assert str(exc.value).startswith("host db-1: ext4_audit_capacity_limits") and error in str(exc.value)


def test_the_role_defaults_are_the_engines():
    defaults = safe_yaml.load(os.path.join(ROOT, "roles", "ext4_audit", "defaults", "main.yml"))
    assert defaults["ext4_audit_capacity_limits"] == policy.CAPACITY_LIMITS  # the argument specs': test_role_variables.py


@pytest.mark.parametrize("when, error", [
    ({"fact": "derived.block_use", "gte": {"fact": "limit.block_use_low"}}, "fact 'limit.block_use_low' is not a fact"),
    ({"fact": "derived.block_use", "contains": {"fact": "limit.block_use_high"}}, "compared with another only by"),
    ({"fact": "derived.block_use", "gte": {"fact": "limit.block_use_high", "eq": 1}}, "compared with another only by"),
])
def test_a_rule_compares_a_fact_with_another_only_by_a_comparison_of_known_facts(tmp_path, when, error):
    rule = {"id": "SITE_FULL", "title": "t", "scope": "filesystem", "kind": "operability", "severity": "low",
            "when": when, "message": "{mountpoint}", "rationale": "r", "remediation": {"steps": "s", "cost": "c"},
            "references": ["https://example.org"], "tags": ["site"]}
    (tmp_path / "site.yml").write_text(contract.msgspec.json.encode({"rules": [rule]}).decode())
    with pytest.raises(catalog_mod.CatalogError) as exc:
        catalog_mod.load(site_dirs=[str(tmp_path)])
    assert "rule SITE_FULL" in str(exc.value) and error in str(exc.value)


# ------------------------------------------------------------------ shown in every report
HOSTILE = "/mnt/<b>x</b>\n$(id)"


def report_with_xfs():
    tree = facts(options=None)
    tree["filesystems"][0]["options"] = [o for o in tree["filesystems"][0]["options"] if o != "barrier"] + ["nobarrier"]
    tree.update(schema=contract.FACTS_SCHEMA, errors=[],
                not_audited=[{"mountpoint": "/srv/xfs", "fstype": "xfs", "source": "/dev/loop9"},
                             {"mountpoint": HOSTILE, "fstype": "btrfs", "source": "/dev/<i>"}])
    record = {"host": "web-1", "status": "audited", "facts": tree}
    return fleet.build_host_report(record, CATALOG, [], "run-1", NOW)


def test_the_host_report_and_the_terminal_name_every_filesystem_not_audited():
    report = report_with_xfs()
    contract.check(report, contract.HostReport, "host report")
    assert report["not_audited"][0] == {"mountpoint": "/srv/xfs", "fstype": "xfs", "source": "/dev/loop9"}
    summary = reports.summarize([report], "run-1", "high", True, NOW)
    contract.check(summary, contract.Summary, "summary")
    lines = terminal.table(summary).splitlines()
    assert "  not audited: xfs at /srv/xfs on 1 host (web-1)" in lines
    assert "  not audited: btrfs at /mnt/<b>x</b>\\n$(id) on 1 host (web-1)" in lines  # control characters escaped


def test_summary_md_and_report_html_escape_the_host_strings(tmp_path):
    report = report_with_xfs()
    summary = reports.summarize([report], "run-1", "high", True, NOW)
    text = markdown.document(summary, [report])
    assert "- not audited: xfs at /srv/xfs" in text and "<b>" not in text
    page = report_html.render(summary, [report], CATALOG, str(tmp_path))
    assert "not audited: xfs at <code class=\"host-data\">/srv/xfs</code>" in page
    assert "<b>x</b>" not in page and "&lt;b&gt;x&lt;/b&gt;" in page and "/dev/&lt;i&gt;" in page
