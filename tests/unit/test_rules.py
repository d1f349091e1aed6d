"""Rule truth tables: the catalog evaluated by the engine over facts built from real fixtures."""

import copy
import os

import pytest

from ext4audit.parsers import ext4_parsers as p, kernel_version
from conftest import ROOT, fixture_text
from ext4audit import catalog as catalog_mod, engine

CATALOG = catalog_mod.load()
DEFAULT_OPTIONS = p.parse_ext4_options(fixture_text("ext4_options", "kernel-6.18-defaults.txt"))
DEFAULT_SB = p.parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-default-2g.txt"))
MAINLINE_618 = dict(kernel_version.identify("6.18.44-fc-v669", "Linux version 6.18.44-fc-v669 #1 SMP"),
                    page_size=4096)


def facts(options=None, sb=None, kernel=None, queue=None, fstab_drift=(), netfs=(), source="proc"):
    fs = {"device": "/dev/loop0", "mountpoint": "/data", "fstype": "ext4", "options_source": source,
          "options": list(options if options is not None else DEFAULT_OPTIONS),
          "superblock": copy.deepcopy(DEFAULT_SB) if sb is None else sb,
          "queue": queue if queue is not None else {"write_cache": "write through", "rotational": 0},
          "fstab": {"line": 3, "options": ["defaults"]}, "fstab_drift": list(fstab_drift), "jbd2": None}
    return {"kernel": kernel or MAINLINE_618, "filesystems": [fs], "netfs": list(netfs)}


def with_options(*changes):
    """The default option list with some options replaced, e.g. with_options('nodelalloc')."""
    result = list(DEFAULT_OPTIONS)
    for change in changes:
        name = p.option_map([change]).popitem()[0]
        result = [o for o in result if p.option_map([o]).popitem()[0] != name] + [change]
    return result


def rules(fact_tree):
    findings, undetermined, passed = engine.evaluate_host(fact_tree, CATALOG)
    return dict((f["rule"], f["severity"]) for f in findings)


def kernel(release, proc_version=""):
    return dict(kernel_version.identify(release, proc_version), page_size=4096)


def test_defaults_give_only_informational_findings():
    assert rules(facts()) == {"EXT4_AUTO_DA_ALLOC_RENAME": "info", "EXT4_ERRORS_CONTINUE": "info"}


@pytest.mark.parametrize("options, expected", [
    (["noauto_da_alloc"], {}),
    (["nodelalloc"], {"EXT4_DIOREAD_NOLOCK_NODELALLOC": "low"}),
    (["nodioread_nolock", "nodelalloc"], {}),
    (["data=journal", "nodelalloc", "nodioread_nolock"], {"EXT4_DATA_JOURNAL": "low"}),
    (["data=writeback"], {"EXT4_DATA_WRITEBACK": "high"}),
    (["nobarrier"], {"EXT4_NOBARRIER": "medium", "EXT4_AUTO_DA_ALLOC_RENAME": "info"}),
    (["commit=60"], {"EXT4_LONG_COMMIT": "medium", "EXT4_AUTO_DA_ALLOC_RENAME": "info"}),
    (["commit=59"], {"EXT4_AUTO_DA_ALLOC_RENAME": "info"}),
    (["discard"], {"EXT4_ONLINE_DISCARD": "low", "EXT4_AUTO_DA_ALLOC_RENAME": "info"}),
    (["errors=remount-ro"], {"EXT4_AUTO_DA_ALLOC_RENAME": "info", "ERRORS": None}),
    (["journal_async_commit", "data=writeback"], {"EXT4_JOURNAL_ASYNC_COMMIT": "high", "EXT4_DATA_WRITEBACK": "high"}),
])
def test_option_truth_table(options, expected):
    found = rules(facts(options=with_options(*options)))
    found.pop("EXT4_ERRORS_CONTINUE", None)
    expected = dict((k, v) for k, v in expected.items() if k != "ERRORS")
    if "data=ordered" in with_options(*options) and "nodelalloc" not in options and "noauto_da_alloc" not in options:
        expected.setdefault("EXT4_AUTO_DA_ALLOC_RENAME", "info")
    assert found == expected


def test_nobarrier_on_write_back_cache_is_high():
    found = rules(facts(options=with_options("nobarrier"), queue={"write_cache": "write back"}))
    assert found["EXT4_NOBARRIER"] == "high"


@pytest.mark.parametrize("release, proc_version, severity", [
    ("4.19.24-9.al7.x86_64", "", "high"),        # first affected Alibaba build
    ("4.19.91-25.al7.x86_64", "", "high"),
    ("4.19.91-26.al7.x86_64", "", "low"),        # fixed build
    ("5.6.12", "", "high"),                     # upstream before c8980e1980cc
    ("5.6.13", "", "low"),
    ("6.1.0-17-amd64", "Linux version 6.1.0-17-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.69-1 (2023-12-30)", "low"),
])
def test_dioread_nolock_nodelalloc_by_kernel(release, proc_version, severity):
    found = rules(facts(options=with_options("nodelalloc"), kernel=kernel(release, proc_version)))
    assert found["EXT4_DIOREAD_NOLOCK_NODELALLOC"] == severity


def test_dioread_nolock_nodelalloc_on_rhel_stays_low_not_guessed():
    found = rules(facts(options=with_options("nodelalloc"), kernel=kernel("4.18.0-513.5.1.el8_9.x86_64")))
    assert found["EXT4_DIOREAD_NOLOCK_NODELALLOC"] == "low"


@pytest.mark.parametrize("journal_blocks, options, severity", [
    (16384, (), None),            # 64 MiB: the default for 2 GiB
    (8192, ("nodioread_nolock",), "low"),     # half the default, no dioread_nolock
    (8192, (), "medium"),         # half, dioread_nolock in effect on >= 5.6
    (4096, (), "high"),           # a quarter
    (1024, (), "high"),           # 4 MiB
])
def test_small_journal(journal_blocks, options, severity):
    sb = copy.deepcopy(DEFAULT_SB)
    sb["journal_blocks"], sb["journal_bytes"] = journal_blocks, journal_blocks * 4096
    assert rules(facts(sb=sb, options=with_options(*options))).get("EXT4_SMALL_JOURNAL") == severity


def test_real_old_superblocks():
    # CentOS 7: 50 GiB with a 128 MiB journal (default would be 256 MiB); a 300 GiB LUKS volume with 128 MiB.
    centos = p.parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.42-centos7-root-orphan.txt"))
    assert rules(facts(sb=centos, options=with_options("nodioread_nolock")))["EXT4_SMALL_JOURNAL"] == "low"
    luks = p.parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.45-luks-music-journal-128m.txt"))
    assert rules(facts(sb=luks))["EXT4_SMALL_JOURNAL"] == "high"


def test_inode_128_escalates_with_small_journal():
    sb = p.parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-small-journal-inode128.txt"))
    found = rules(facts(sb=sb))
    assert found["EXT4_INODE_128"] == "medium" and found["EXT4_SMALL_JOURNAL"] == "high"
    sb["journal_blocks"], sb["journal_bytes"] = 16384, 64 << 20
    assert rules(facts(sb=sb))["EXT4_INODE_128"] == "low"


def test_no_journal_from_superblock_or_options():
    sb = p.parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-nojournal.txt"))
    options = p.parse_ext4_options(fixture_text("ext4_options", "kernel-6.18-nojournal.txt"))
    assert rules(facts(sb=sb, options=options))["EXT4_NO_JOURNAL"] == "medium"
    # dumpe2fs could not run (as on this machine's root): the complete option list still tells.
    assert rules(facts(sb=False, options=options))["EXT4_NO_JOURNAL"] == "medium"


def test_missing_superblock_is_undetermined_not_clean():
    findings, undetermined, passed = engine.evaluate_host(facts(sb=False), CATALOG)
    missing = dict((u["rule"], u["missing"]) for u in undetermined)
    assert missing["EXT4_INODE_128"] == ["sb.inode_size"]
    assert "EXT4_SMALL_JOURNAL" in missing
    assert "EXT4_INODE_128" not in [f["rule"] for f in findings]


@pytest.mark.parametrize("release, proc_version, expected", [
    ("6.1.0-14-amd64", "Linux version 6.1.0-14-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.64-1 (2023-11-30)", True),
    ("6.1.0-15-amd64", "Linux version 6.1.0-15-amd64 #1 SMP PREEMPT_DYNAMIC Debian 6.1.66-1 (2023-12-09)", False),
    ("6.1.65", "", True),
    ("6.1.63", "", False),
])
def test_dio_corruption_kernel(release, proc_version, expected):
    found = rules(facts(kernel=kernel(release, proc_version)))
    assert ("KERNEL_DIO_CORRUPTION_6_1_64" in found) == expected
    if expected:
        assert found["KERNEL_DIO_CORRUPTION_6_1_64"] == "critical"


def test_kernel_issue_on_backporting_vendor_is_undetermined():
    findings, undetermined, passed = engine.evaluate_host(
        facts(kernel=kernel("4.18.0-513.5.1.el8_9.x86_64")), CATALOG)
    assert "KERNEL_DIO_CORRUPTION_6_1_64" in [u["rule"] for u in undetermined]
    assert "KERNEL_DIO_CORRUPTION_6_1_64" not in [f["rule"] for f in findings]


def test_stripe_rule_needs_kernel_and_stripe():
    striped = with_options("stripe=64")
    assert rules(facts(options=striped, kernel=kernel("6.6.10")))["KERNEL_STRIPE_ALLOC_SPIN"] == "medium"
    assert "KERNEL_STRIPE_ALLOC_SPIN" not in rules(facts(options=striped, kernel=kernel("6.8.1")))
    assert "KERNEL_STRIPE_ALLOC_SPIN" not in rules(facts(kernel=kernel("6.6.10")))  # stripe=0


def test_mb_optimize_scan_by_groups_and_option():
    # 2 GiB, 32768 blocks per group -> 16 groups: mb_optimize_scan on by default.
    assert rules(facts(kernel=kernel("5.15.30")))["KERNEL_MB_OPTIMIZE_SCAN_REGRESSION"] == "low"
    assert "KERNEL_MB_OPTIMIZE_SCAN_REGRESSION" not in rules(
        facts(kernel=kernel("5.15.30"), options=with_options("mb_optimize_scan=0")))
    assert "KERNEL_MB_OPTIMIZE_SCAN_REGRESSION" not in rules(facts(kernel=kernel("6.1.70")))


def test_fast_commit_and_subpage_and_checksum_v2():
    sb = p.parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-fast-commit-stride.txt"))
    assert rules(facts(sb=sb, kernel=kernel("5.15.100")))["KERNEL_FAST_COMMIT_EARLY"] == "medium"
    assert "KERNEL_FAST_COMMIT_EARLY" not in rules(facts(sb=sb, kernel=kernel("6.6.1")))
    arm = dict(kernel("5.8.0"), page_size=65536)
    assert rules(facts(kernel=arm))["KERNEL_DIOREAD_NOLOCK_SUBPAGE"] == "high"
    assert "KERNEL_DIOREAD_NOLOCK_SUBPAGE" not in rules(facts(kernel=kernel("5.8.0")))
    sb = copy.deepcopy(DEFAULT_SB)
    sb["journal_features"] = ["journal_incompat_revoke", "journal_checksum_v2"]
    assert rules(facts(sb=sb))["EXT4_JOURNAL_CHECKSUM_V2"] == "medium"


def test_fstab_drift_and_netfs():
    drift = [{"option": "errors=remount-ro", "wanted": "remount-ro", "effective": "continue"}]
    findings, _, _ = engine.evaluate_host(facts(fstab_drift=drift), CATALOG)
    message = [f for f in findings if f["rule"] == "EXT4_FSTAB_DRIFT"][0]["message"]
    assert message == "/data: fstab line 3 asks for errors=remount-ro (in effect: continue)."
    netfs = [{"mountpoint": "/home", "fstype": "nfs4", "source": "nfs:/export", "options": ["rw"]}]
    found = engine.evaluate_host(facts(netfs=netfs), CATALOG)[0]
    assert [f for f in found if f["rule"] == "NETFS_METADATA_ROUNDTRIP"][0]["mountpoint"] == "/home"


def test_evidence_names_the_facts():
    findings, _, _ = engine.evaluate_host(facts(options=with_options("nodelalloc")), CATALOG)
    combo = [f for f in findings if f["rule"] == "EXT4_DIOREAD_NOLOCK_NODELALLOC"][0]
    assert combo["evidence"] == {"opt.dioread_nolock": True, "opt.delalloc": False}


def test_evidence_order_and_missing_lists_are_pinned():
    # Reports show evidence in reading order (dict equality would not notice a reordering).
    findings, undetermined, _ = engine.evaluate_host(facts(
        options=with_options("nodelalloc", "nobarrier"), kernel=kernel("5.15.30"),
        queue={"write_cache": "write back"}), CATALOG)
    assert [(f["rule"], list(f["evidence"].items())) for f in findings] == [
        ("EXT4_DIOREAD_NOLOCK_NODELALLOC", [("opt.dioread_nolock", True), ("opt.delalloc", False)]),
        ("KERNEL_MB_OPTIMIZE_SCAN_REGRESSION", [("derived.mb_optimize_scan", True),
                                                ("kernel_issue.MB_OPTIMIZE_SCAN_REGRESSION", True)]),
        ("EXT4_NOBARRIER", [("opt.barrier", False)]),
        ("EXT4_ERRORS_CONTINUE", [("opt.errors", "continue")])]
    assert undetermined == []
    # No superblock on a backporting kernel: every undetermined rule with exactly what it missed.
    _, undetermined, _ = engine.evaluate_host(facts(sb=False, kernel=kernel("4.18.0-513.5.1.el8_9.x86_64")), CATALOG)
    rhel = "(kernel 4.18.0-513.5.1.el8_9.x86_64 cannot be compared)"
    assert [(u["mountpoint"], u["rule"], u["missing"]) for u in undetermined] == [
        ("/data", "EXT4_SMALL_JOURNAL", ["derived.journal_ratio"]),
        ("/data", "EXT4_INODE_128", ["sb.inode_size"]),
        (None, "KERNEL_DIO_CORRUPTION_6_1_64", ["kernel_issue.DIO_POSITION_CORRUPTION_6_1_64 " + rhel]),
        ("/data", "KERNEL_MB_OPTIMIZE_SCAN_REGRESSION",
         ["derived.mb_optimize_scan", "kernel_issue.MB_OPTIMIZE_SCAN_REGRESSION " + rhel]),
        ("/data", "KERNEL_FAST_COMMIT_EARLY", ["kernel_issue.FAST_COMMIT_EARLY " + rhel, "sb.features"]),
        ("/data", "KERNEL_DIOREAD_NOLOCK_SUBPAGE",
         ["derived.block_smaller_than_page", "kernel_issue.DIOREAD_NOLOCK_SUBPAGE_BLOCKS " + rhel]),
        ("/data", "EXT4_JOURNAL_CHECKSUM_V2", ["sb.journal_features"])]


def test_combinators_read_every_fact_and_present_settles_missing():
    when = {"all": [{"fact": "sb.inode_size", "gt": 0}, {"fact": "sb.inode_size", "present": False},
                    {"not": {"fact": "opt.nonexistent", "eq": True}},
                    {"any": [{"fact": "queue.write_cache", "eq": "write back"}, {"fact": "jbd2.transactions", "gt": 0}]}]}
    rule = dict(CATALOG.by_id["EXT4_NOBARRIER"], id="T", escalate=[], when=when)
    catalog = catalog_mod.Catalog([rule], CATALOG.kernel_issues)
    # sb.inode_size is unreadable, but present: false is about exactly that; an unlisted option
    # is unknown in fstab options and off in the complete /proc list.
    assert engine.evaluate_host(facts(sb=False, source="fstab"), catalog)[1][0]["missing"] == \
        ["jbd2.transactions", "opt.nonexistent"]
    assert engine.evaluate_host(facts(sb=False), catalog)[1][0]["missing"] == ["jbd2.transactions"]


def test_every_rule_traces_to_a_source():
    for rule in CATALOG.rules:
        assert rule["references"] and all(r.startswith("https://") for r in rule["references"]), rule["id"]
        assert rule["remediation"]["steps"].strip() and rule["remediation"]["cost"].strip(), rule["id"]
    seeds = set(r.get("seed") for r in CATALOG.rules)
    assert {"000", "001", "002", "003"} <= seeds
    seed_files = os.listdir(os.path.join(ROOT, "..", "shared", "seeds")) if os.path.isdir(
        os.path.join(ROOT, "..", "shared", "seeds")) else []
    for seed in seeds - {None}:
        assert not seed_files or any(name.startswith(seed + "_") for name in seed_files), seed


@pytest.mark.parametrize("broken, message", [
    ({"severity": "severe"}, "severity"),
    ({"scope": "cluster"}, "scope"),
    ({"when": {"fact": "opt.data", "equals": "x"}}, "fact predicate"),
    ({"when": {"kernel_issue": "NOPE"}}, "unknown kernel issue"),
    ({"remediation": {"steps": "x"}}, "remediation"),
])
def test_catalog_validation(tmp_path, broken, message):
    import yaml
    doc = yaml.safe_load(open(os.path.join(catalog_mod.RULES_DIR, "catalog.yml")))
    doc["rules"][0].update(broken)
    (tmp_path / "catalog.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "kernel_issues.yml").write_text(open(os.path.join(catalog_mod.RULES_DIR, "kernel_issues.yml")).read())
    with pytest.raises(catalog_mod.CatalogError, match=message):
        catalog_mod.load(str(tmp_path))
