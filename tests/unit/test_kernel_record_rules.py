"""The kernel CNA records as findings: facts in, KERNEL_EXT4_*_UNFIXED findings out (one host rule
per record class, rules/catalog.yml), on the committed rules/kernel_cna_records.json."""

import copy
import datetime
import os

import pytest
import yaml

from ext4audit import catalog as catalog_mod, engine, kernel_records, waivers
from test_rules import CATALOG, DEFAULT_SB, facts, kernel

DEBIAN_6_1_192 = kernel("6.1.0-41-amd64", "Linux version 6.1.0-41-amd64 (debian-kernel@lists.debian.org) "
                        "(gcc-12) #1 SMP PREEMPT_DYNAMIC Debian 6.1.192-1 (2026-01-01)")
RHEL_9 = kernel("5.14.0-570.el9.x86_64")
RULE_OF_CLASS = {"data corruption": "KERNEL_EXT4_DATA_CORRUPTION_UNFIXED", "crash/BUG": "KERNEL_EXT4_CRASH_UNFIXED",
                 "hang/deadlock": "KERNEL_EXT4_HANG_UNFIXED", "memory safety": "KERNEL_EXT4_MEMORY_SAFETY_UNFIXED",
                 "leak": "KERNEL_EXT4_LEAK_UNFIXED", "other": "KERNEL_EXT4_OTHER_UNFIXED"}
NOW = datetime.datetime(2026, 11, 25, tzinfo=datetime.timezone.utc)


def with_features(*features):
    sb = copy.deepcopy(DEFAULT_SB)
    sb["features"] = list(sb["features"]) + list(features)
    return sb


def evaluate(fact_tree):
    """{rule: finding}, {rule: undetermined entry} of the kernel record rules only."""
    findings, undetermined, _ = engine.evaluate_host(fact_tree, CATALOG)
    rules = set(RULE_OF_CLASS.values())
    return (dict((f["rule"], f) for f in findings if f["rule"] in rules),
            dict((u["rule"], u) for u in undetermined if u["rule"] in rules))


def record_ids(finding):
    return [item["id"] for item in finding["evidence"]["kernel_records"]]


def test_one_rule_per_class_and_its_severity():
    assert set(RULE_OF_CLASS) == set(CATALOG.records["classes"])
    severities = dict((rule, CATALOG.by_id[rule]["severity"]) for rule in RULE_OF_CLASS.values())
    assert severities == {"KERNEL_EXT4_DATA_CORRUPTION_UNFIXED": "high", "KERNEL_EXT4_CRASH_UNFIXED": "medium",
                          "KERNEL_EXT4_HANG_UNFIXED": "low", "KERNEL_EXT4_MEMORY_SAFETY_UNFIXED": "medium",
                          "KERNEL_EXT4_LEAK_UNFIXED": "low", "KERNEL_EXT4_OTHER_UNFIXED": "info"}


def test_rhel_records_are_advisory_and_never_fail():
    findings, undetermined = evaluate(facts(kernel=RHEL_9))
    assert findings == {}
    assert set(undetermined) == set(RULE_OF_CLASS.values())
    for entry in undetermined.values():
        assert entry["missing"] and all("advisory (rhel kernel 5.14.0-570.el9.x86_64 backports fixes" in m
                                        for m in entry["missing"])


def test_fast_commit_records_count_only_with_fast_commit():
    without, _ = evaluate(facts(kernel=kernel("6.1.50")))
    with_fc, _ = evaluate(facts(kernel=kernel("6.1.50"), sb=with_features("fast_commit")))
    fast_commit = {"KERNEL_EXT4_HANG_UNFIXED": "CVE-2024-43828", "KERNEL_EXT4_LEAK_UNFIXED": "CVE-2026-43066",
                   "KERNEL_EXT4_OTHER_UNFIXED": "CVE-2026-72225"}
    for rule, record in fast_commit.items():
        assert record in record_ids(with_fc[rule])
        assert record not in record_ids(without.get(rule) or {"evidence": {"kernel_records": []}})
        if rule in without:
            assert record + ": fast_commit is not enabled on any ext4 filesystem of the host" in \
                without[rule]["evidence"]["kernel_records_set_aside"]


def test_quota_records_count_with_a_quota_option_and_unread_superblocks_keep_records():
    quota = [item["id"] for item in kernel_records.open_records(CATALOG.records, kernel("5.15.40"))
             if item["needs"] == "quota"]
    assert quota
    ids = lambda found: set(i for f in found.values() for i in record_ids(f))  # noqa: E731
    assert not set(quota) & ids(evaluate(facts(kernel=kernel("5.15.40")))[0])
    assert set(quota) <= ids(evaluate(facts(kernel=kernel("5.15.40"), options=["rw", "usrjquota=aquota.user"]))[0])
    assert set(quota) <= ids(evaluate(facts(kernel=kernel("5.15.40"), sb=False))[0])


AMAZON_5_10_201 = kernel("5.10.201-191.748.amzn2.x86_64")
PMEM = {"device": "/dev/pmem0", "queue": {"device": "pmem0", "rotational": 0, "write_cache": "write through"}}


def on_pmem(fact_tree):
    fact_tree["filesystems"][0].update(copy.deepcopy(PMEM))
    return fact_tree


def small_filesystem():
    """The default superblock at 8 block groups: mb_optimize_scan is off by default below 16."""
    sb = copy.deepcopy(DEFAULT_SB)
    sb["block_count"] = 8 * sb["blocks_per_group"]
    return sb


# (record, feature it needs, host kernel, facts of a host without the feature, with it). The records
# were read for the feature; the ones marked * have no keyword of it in their title.
FEATURE_RECORDS = [
    ("CVE-2024-26601", "fast_commit", AMAZON_5_10_201, {}, {"sb": with_features("fast_commit")}),  # * fc replay
    ("CVE-2022-49347", "inline_data", kernel("5.15.40"), {}, {"sb": with_features("inline_data")}),  # *
    ("CVE-2022-50344", "quota", kernel("5.15.40"), {}, {"sb": with_features("quota")}),  # *
    ("CVE-2022-50344", "quota", kernel("5.15.40"), {}, {"options": ["rw", "usrquota"]}),
    ("CVE-2022-50436", "encrypt", kernel("5.15.40"), {}, {"sb": with_features("encrypt")}),
    ("CVE-2022-50277", "encrypt", kernel("6.0.10"), {}, {"options": ["rw", "inlinecrypt"]}),  # *
    ("CVE-2023-53662", "casefold", kernel("6.1.50"), {}, {"sb": with_features("casefold")}),
    ("CVE-2025-40167", "verity", kernel("6.1.50"), {}, {"sb": with_features("verity")}),  # *
    ("CVE-2022-50020", "bigalloc", kernel("5.15.40"), {}, {"sb": with_features("bigalloc")}),  # *
    ("CVE-2023-53089", "ea_inode", kernel("5.15.40"), {}, {"sb": with_features("ea_inode")}),  # *
    ("CVE-2021-47342", "mmp", kernel("5.10.60"), {}, {"sb": with_features("mmp")}),
    ("CVE-2025-40179", "orphan_file", kernel("6.1.50"), {}, {"sb": with_features("orphan_file")}),  # *
    ("CVE-2024-50015", "dax", kernel("6.1.50"), {}, {"options": ["rw", "dax=always"]}),
    ("CVE-2024-50015", "dax", kernel("6.1.50"), {}, {"options": ["rw", "dax"]}),
    ("CVE-2024-50015", "dax", kernel("6.1.50"), {"options": ["rw", "dax=never"], "pmem": True},
     {"options": ["rw", "dax=inode"]}),
    ("CVE-2024-50015", "dax", kernel("6.1.50"), {}, {"pmem": True}),  # per-file DAX on a pmem device
    ("CVE-2024-26774", "mb_optimize_scan", kernel("6.1.50"), {"options": ["rw", "mb_optimize_scan=0"]}, {}),  # *
    ("CVE-2024-40955", "mb_optimize_scan", kernel("6.6.30"), {"sb": small_filesystem()},
     {"sb": small_filesystem(), "options": ["rw", "mb_optimize_scan=1"]}),  # *
]


def host(release, pmem=False, **fields):
    fact_tree = facts(kernel=release, **fields)
    return on_pmem(fact_tree) if pmem else fact_tree


@pytest.mark.parametrize("cve, feature, release, without, with_", FEATURE_RECORDS)
def test_a_feature_record_is_set_aside_without_the_feature_and_kept_with_it(cve, feature, release, without, with_):
    item = next(item for item in kernel_records.open_records(CATALOG.records, release) if item["id"] == cve)
    assert item["needs"] == feature and not item["advisory"]
    rule = RULE_OF_CLASS[item["class"]]
    found_without, _ = evaluate(host(release, **without))
    found_with, _ = evaluate(host(release, **with_))
    assert cve in record_ids(found_with[rule])
    assert all(cve not in record_ids(finding) for finding in found_without.values())
    in_use = kernel_records.FeaturesInUse(host(release, **without)["filesystems"])
    assert kernel_records.set_aside(item, in_use) == \
        "%s is not enabled on any ext4 filesystem of the host" % feature
    if rule in found_without:
        assert "%s: %s is not enabled on any ext4 filesystem of the host" % (cve, feature) in \
            found_without[rule]["evidence"]["kernel_records_set_aside"]


def test_an_amazon_5_10_201_host_without_fast_commit_has_no_fast_commit_record_in_a_finding():
    findings, _ = evaluate(facts(kernel=AMAZON_5_10_201))
    failing = set(i for finding in findings.values() for i in record_ids(finding))
    aside = set(entry.split(":")[0] for finding in findings.values()
                for entry in finding["evidence"].get("kernel_records_set_aside", ()))
    fast_commit = set(item["id"] for item in kernel_records.open_records(CATALOG.records, AMAZON_5_10_201)
                      if item["needs"] == "fast_commit")
    assert {"CVE-2024-26601", "CVE-2024-49983"} <= fast_commit <= aside
    assert not fast_commit & failing
    assert "CVE-2024-26601" not in record_ids(findings["KERNEL_EXT4_DATA_CORRUPTION_UNFIXED"])


@pytest.mark.parametrize("cve", ["CVE-2024-26601", "CVE-2021-47406", "CVE-2024-49983", "CVE-2024-50014"])
def test_the_fast_commit_replay_records_need_fast_commit(cve):
    assert next(r["needs"] for r in CATALOG.records["records"] if r["id"] == cve) == "fast_commit"


def waiver(**fields):
    return dict({"rule": "KERNEL_EXT4_DATA_CORRUPTION_UNFIXED", "justification": "replaced in Q1",
                 "approver": "storage-team", "expires": "2027-01-31"}, **fields)


def test_a_waiver_takes_single_records_out_and_waives_the_finding_when_none_is_left():
    findings, _ = evaluate(facts(kernel=DEBIAN_6_1_192))
    finding = findings["KERNEL_EXT4_DATA_CORRUPTION_UNFIXED"]
    first, *rest = record_ids(finding)
    waivers.apply([finding], waivers.parse({"waivers": [waiver(records=[first])]}), "h", [], NOW)
    assert not finding["waived"] and record_ids(finding) == rest
    assert first not in finding["message"] and all(r in finding["message"] for r in rest)
    assert finding["evidence"]["kernel_records_waived"] == [first + " (waived by storage-team until 2027-01-31T00:00:00Z)"]
    waivers.apply([finding], waivers.parse({"waivers": [waiver(records=rest)]}), "h", [], NOW)
    assert finding["waived"] and finding["waiver"]["status"] == "active"
    # A record waiver waives only records: another rule's finding stays.
    other = findings["KERNEL_EXT4_CRASH_UNFIXED"]
    waivers.apply([other], waivers.parse({"waivers": [waiver(rule=other["rule"], records=["CVE-2000-0001"])]}),
                  "h", [], NOW)
    assert not other["waived"] and len(record_ids(other)) == 2


@pytest.mark.parametrize("records", ["CVE-2026-45858", [], [2026], ["cve-2026-45858"], ["CVE-2026-45858 "]])
def test_waiver_records_are_typed(records):
    with pytest.raises(waivers.WaiverError, match="records must be"):
        waivers.parse({"waivers": [waiver(records=records)]})


@pytest.mark.parametrize("when, scope", [({"kernel_records": "data loss"}, "host"),
                                         ({"kernel_records": "data corruption"}, "filesystem")])
def test_catalog_refuses_an_unknown_class_or_a_filesystem_rule(tmp_path, when, scope):
    doc = yaml.safe_load(open(os.path.join(catalog_mod.RULES_DIR, "catalog.yml")))
    doc["rules"][0].update(when=when, scope=scope, message="x")
    (tmp_path / "catalog.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "kernel_issues.yml").write_text(open(os.path.join(catalog_mod.RULES_DIR, "kernel_issues.yml")).read())
    with pytest.raises(catalog_mod.CatalogError, match="kernel_records .* needs a host rule and one of the classes"):
        catalog_mod.load(str(tmp_path))
