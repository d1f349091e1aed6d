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
                   "KERNEL_EXT4_MEMORY_SAFETY_UNFIXED": "CVE-2026-72225"}
    for rule, record in fast_commit.items():
        assert record in record_ids(with_fc[rule])
        assert record not in record_ids(without.get(rule) or {"evidence": {"kernel_records": []}})
        if rule in without:
            assert record + ": fast_commit is not enabled on any ext4 filesystem of the host" in \
                without[rule]["evidence"]["kernel_records_set_aside"]


def test_quota_records_count_with_a_quota_option_and_unread_superblocks_keep_records():
    quota = [item["id"] for item in kernel_records.open_records(CATALOG.records, kernel("5.15.40"))
             if "quota" in item["title"]]
    assert quota
    ids = lambda found: set(i for f in found.values() for i in record_ids(f))  # noqa: E731
    assert not set(quota) & ids(evaluate(facts(kernel=kernel("5.15.40")))[0])
    assert set(quota) <= ids(evaluate(facts(kernel=kernel("5.15.40"), options=["rw", "usrjquota=aquota.user"]))[0])
    assert set(quota) <= ids(evaluate(facts(kernel=kernel("5.15.40"), sb=False))[0])


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
