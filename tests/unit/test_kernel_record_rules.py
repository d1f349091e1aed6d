"""The kernel CNA records as findings an owner can act on: facts in, KERNEL_EXT4_* findings out
(one host rule per action: an upgrade within the branch, no fix in the branch, the vendor's
advisories; rules/catalog.yml), on the committed rules/kernel_cna_records.json and
rules/kernel_branches.yml."""

import copy
import datetime
import json
import os

import pytest
import yaml

from ext4audit.report import reports
from ext4audit.rules import catalog as catalog_mod, engine, kernel_records, policy, waivers
from ext4audit.parsers import kernel_version
from test_rules import CATALOG, DEFAULT_SB, facts, kernel

UPGRADE, NO_FIX, ADVISORY = "KERNEL_EXT4_UPGRADE_IN_BRANCH", "KERNEL_EXT4_NO_FIX_IN_BRANCH", "KERNEL_EXT4_VENDOR_ADVISORY"
RULE_OF_ACTION = {"upgrade": UPGRADE, "no_fix_in_branch": NO_FIX, "advisory": ADVISORY}
NOW = datetime.datetime(2026, 11, 25, tzinfo=datetime.timezone.utc)


def debian(upstream, abi=40):
    """A Debian 12 kernel as the facts module reads it (uname -r and /proc/version)."""
    release = "6.1.0-%d-amd64" % abi
    return kernel(release, "Linux version %s (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC Debian %s-1"
                           " (2026-01-01)" % (release, upstream))


def ubuntu(release, signature):
    return dict(kernel_version.identify(release, "", signature), page_size=4096)


DEBIAN_6_1_153 = debian("6.1.153")
RHEL_9 = kernel("5.14.0-427.13.1.el9_4.x86_64")
UBUNTU_24_04 = ubuntu("6.8.0-45-generic", "Ubuntu 6.8.0-45.45-generic 6.8.12")


def with_features(*features):
    sb = copy.deepcopy(DEFAULT_SB)
    sb["features"] = list(sb["features"]) + list(features)
    return sb


def evaluate(fact_tree):
    """{rule: finding}, {rule: undetermined entry} of the kernel record rules only."""
    findings, undetermined, _ = engine.evaluate_host(fact_tree, CATALOG)
    rules = set(RULE_OF_ACTION.values())
    return (dict((f["rule"], f) for f in findings if f["rule"] in rules),
            dict((u["rule"], u) for u in undetermined if u["rule"] in rules))


def record_ids(finding):
    return [item["id"] for item in finding["evidence"]["kernel_records"]]


def test_one_rule_per_action_and_their_default_severities():
    by_action = dict((rule["when"]["kernel_records"], rule) for rule in CATALOG.rules if "kernel_records" in rule["when"])
    assert set(by_action) == set(kernel_records.ACTIONS)
    assert dict((a, by_action[a]["id"]) for a in by_action) == RULE_OF_ACTION
    assert [by_action[a]["severity"] for a in kernel_records.ACTIONS] == ["info", "low", "info"]
    assert [bool(by_action[a].get("severity_by_records")) for a in kernel_records.ACTIONS] == [True, False, False]
    assert set(kernel_records.CLASS_SEVERITY) == set(CATALOG.records["classes"])


def test_an_up_to_date_debian_12_host_passes_the_default_gate_with_its_branchless_records_reported():
    newest = CATALOG.records["last_seen"]["6.1"]
    findings, undetermined = evaluate(facts(kernel=debian(newest, abi=43)))
    assert set(findings) == {NO_FIX} and not undetermined
    assert findings[NO_FIX]["severity"] == "low"
    assert "data corruption" in findings[NO_FIX]["message"]


def test_a_debian_12_hosts_kernel_findings_are_two_lines_that_say_what_to_do():
    findings, _ = evaluate(facts(kernel=DEBIAN_6_1_153))
    assert set(findings) == {UPGRADE, NO_FIX}
    upgrade, no_fix = findings[UPGRADE], findings[NO_FIX]
    assert "upgrade to a kernel based on 6.1.175 or later: closes 11 records (2 of them crash/BUG)" in upgrade["message"]
    assert upgrade["severity"] == "medium" and upgrade["escalated_because"] == "its records include crash/BUG fixes (medium)"
    # the upgrade closes exactly the records whose 6.1 fix is later than 6.1.153, and names the last of those
    fixed_in = [item["fixed_in"] for item in upgrade["evidence"]["kernel_records"]]
    assert all(kernel_version.compare_upstream(v, "6.1.153") > 0 for v in fixed_in)
    assert max(fixed_in, key=kernel_version._upstream_key) == "6.1.175"
    assert "the nearest maintained branch with every fix is 6.12 (6.12.97 or later)" in no_fix["message"]
    for finding in findings.values():
        assert "\n" not in finding["message"] and len(finding["message"].encode()) < 250
        assert "CVE-" not in finding["message"]  # the ids are in the evidence
        assert all(set(item) == {"id", "title", "class", "fixed_in", "fixed_mainline", "link"}
                   for item in finding["evidence"]["kernel_records"])


def test_a_rhel_9_hosts_kernel_finding_is_one_line_with_a_count_and_the_vendors_advisories():
    findings, undetermined = evaluate(facts(kernel=RHEL_9))
    assert set(findings) == {ADVISORY} and not undetermined
    finding = findings[ADVISORY]
    assert finding["severity"] == "info"
    assert finding["message"].startswith("Kernel 5.14.0-427.13.1.el9_4.x86_64: Red Hat kernels backport fixes")
    assert "https://access.redhat.com/security/security-updates/cve" in finding["message"]
    assert len(record_ids(finding)) == 64 and "CVE-" not in finding["message"]
    assert "CVE-2021-47406" in finding["evidence"]["kernel_records_set_aside"][0]  # fast-commit replay: not in use
    assert "judged as" not in json.dumps(finding)  # never "judged as 5.14.0" of a kernel far ahead of it


@pytest.mark.parametrize("release, signature, advisory", [
    ("6.8.0-45-generic", "Ubuntu 6.8.0-45.45-generic 6.8.12", True),   # 6.8.y ended at 6.8.12
    ("6.8.0-31-generic", "Ubuntu 6.8.0-31.31-generic 6.8.4", True),
    ("5.15.0-1033-aws", "Ubuntu 5.15.0-1033.37-aws 5.15.98", False),   # 5.15 is maintained: exact
])
def test_an_ubuntu_kernel_on_a_branch_upstream_ended_gets_its_branchless_records_as_advisory(release, signature,
                                                                                             advisory):
    findings, _ = evaluate(facts(kernel=ubuntu(release, signature)))
    assert (NO_FIX in findings) is not advisory and (ADVISORY in findings) is advisory
    if advisory:
        assert "upstream 6.8.y ended at 6.8.12; Canonical backports fixes to its 6.8 kernels" in findings[ADVISORY]["message"]


def test_at_the_ended_branchs_boundary_fixes_it_did_get_are_still_an_upgrade():
    items = kernel_records.open_records(CATALOG.records, ubuntu("6.5.0-14-generic", "Ubuntu 6.5.0-14.14-generic 6.5.3"))
    upgrades = [item for item in items if item["action"] == "upgrade"]
    assert len(upgrades) == 4 and all(kernel_version.compare_upstream(item["fixed_in"], "6.5.13") <= 0 for item in upgrades)
    assert all(item["action"] == "advisory" for item in items if item["fixed_in"] is None)
    at_the_end = kernel_records.open_records(CATALOG.records, UBUNTU_24_04)
    assert not [item for item in at_the_end if item["action"] == "upgrade"]


def test_a_mainline_kernel_on_an_ended_branch_is_judged_exactly_and_says_the_branch_ended():
    findings, _ = evaluate(facts(kernel=kernel("6.8.12")))
    assert "no upstream fix in the 6.8 branch (the branch ended at 6.8.12)" in findings[NO_FIX]["message"]


def test_the_branch_table_agrees_with_the_records():
    table = CATALOG.records["branches"]
    seen = CATALOG.records["last_seen"]
    for branch, last in table["ended"].items():
        if branch in seen:
            assert kernel_version.compare_upstream(seen[branch], last) <= 0, branch
    assert not set(table["ended"]) & set(table["longterm"])


@pytest.mark.parametrize("edit, message", [
    (lambda doc: doc["branches"].append({"branch": "6.8", "ended": "6.8.12"}), "listed twice"),
    (lambda doc: doc["branches"].append({"branch": "6.9", "ended": "6.10.1"}), "is not a release of 6.9"),
    (lambda doc: doc["vendors"].update(gentoo={"name": "Gentoo", "advisories": "https://x"}), "vendors.gentoo"),
    (lambda doc: doc["branches"].append({"branch": "6.9", "lts": True}), r"branches\[\d+\]"),
])
def test_a_broken_branch_table_names_the_file_and_the_field(tmp_path, edit, message):
    doc = yaml.safe_load(open(kernel_records.BRANCHES_FILE))
    edit(doc)
    path = tmp_path / "kernel_branches.yml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(kernel_records.RecordsError, match=message) as caught:
        kernel_records.load_branches(str(path))
    assert str(path) in str(caught.value)


def test_without_a_branch_that_has_every_fix_the_message_names_mainline():
    items = [{"id": "CVE-2026-0001", "class": "leak", "fixed_in": None, "fixed_mainline": "7.3"}]
    text = kernel_records.action_text(CATALOG.records, {"upstream": "6.1.100"}, "no_fix_in_branch", items)
    assert text.endswith("no maintained branch has every fix yet; mainline has them from 7.3")


def test_the_no_fix_policy_counts_branchless_records_at_their_class():
    doc = {"fail_on": "high", "kernel_no_fix_counts": True}
    checked, _ = policy.make(doc, CATALOG, "host h", "high")
    findings, _ = evaluate(facts(kernel=DEBIAN_6_1_153))
    no_fix = findings[NO_FIX]
    policy.override([no_fix], checked["severity_overrides"], checked["kernel_no_fix_counts"])
    assert no_fix["severity"] == "high" and no_fix["severity_override"]["from"] == "low"
    assert reports.failing(no_fix, "high")
    default, _ = policy.make({"fail_on": "high"}, CATALOG, "host h", "high")
    assert default["kernel_no_fix_counts"] is False
    with pytest.raises(policy.PolicyError, match="host h: ext4_audit_kernel_no_fix_counts must be true or false"):
        policy.make({"fail_on": "high", "kernel_no_fix_counts": "yes"}, CATALOG, "host h", "high")


def test_fast_commit_records_count_only_with_fast_commit():
    without, _ = evaluate(facts(kernel=kernel("6.1.50")))
    with_fc, _ = evaluate(facts(kernel=kernel("6.1.50"), sb=with_features("fast_commit")))
    for record in ("CVE-2024-43828", "CVE-2026-43066", "CVE-2026-72225"):
        assert record in record_ids(with_fc[UPGRADE])
        assert record not in record_ids(without[UPGRADE])
        assert record + ": fast_commit is not enabled on any ext4 filesystem of the host" in \
            without[UPGRADE]["evidence"]["kernel_records_set_aside"]


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
    rule = RULE_OF_ACTION[item["action"]]
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


@pytest.mark.parametrize("cve", ["CVE-2024-26601", "CVE-2021-47406", "CVE-2024-49983", "CVE-2024-50014"])
def test_the_fast_commit_replay_records_need_fast_commit(cve):
    assert next(r["needs"] for r in CATALOG.records["records"] if r["id"] == cve) == "fast_commit"


def waiver(**fields):
    return dict({"rule": UPGRADE, "justification": "replaced in Q1",
                 "approver": "storage-team", "expires": "2027-01-31"}, **fields)


def test_a_waiver_takes_records_out_recounts_the_finding_and_waives_it_when_none_is_left():
    findings, _ = evaluate(facts(kernel=kernel("6.6.50")))
    others, _ = evaluate(facts(kernel=kernel("6.6.50")))  # another host of the same kernel
    finding = findings[UPGRADE]
    corrupting = [item["id"] for item in finding["evidence"]["kernel_records"] if item["class"] == "data corruption"]
    assert len(corrupting) == 3 and finding["severity"] == "high"
    waivers.apply([finding], waivers.parse({"waivers": [waiver(records=corrupting)]}), "h", [], NOW)
    assert not finding["waived"] and not set(corrupting) & set(record_ids(finding))
    assert "closes 28 records" in finding["message"] and "data corruption" not in finding["message"]
    assert finding["severity"] == "medium"  # the worst record left is a crash or memory-safety fix
    assert len(finding["evidence"]["kernel_records_waived"]) == 3
    assert len(record_ids(others[UPGRADE])) == 31  # the lists the hosts of a kernel share are untouched
    assert others[UPGRADE]["severity"] == "high"
    waivers.apply([finding], waivers.parse({"waivers": [waiver(records=record_ids(finding))]}), "h", [], NOW)
    assert finding["waived"] and finding["waiver"]["status"] == "active"


def test_a_waiver_of_the_rule_waives_the_whole_action():
    findings, _ = evaluate(facts(kernel=DEBIAN_6_1_153))
    waivers.apply(list(findings.values()), waivers.parse({"waivers": [waiver(rule=NO_FIX)]}), "h", [], NOW)
    assert findings[NO_FIX]["waived"] and not findings[UPGRADE]["waived"]


@pytest.mark.parametrize("records", ["CVE-2026-45858", [], [2026], ["cve-2026-45858"], ["CVE-2026-45858 "]])
def test_waiver_records_are_typed(records):
    with pytest.raises(waivers.WaiverError, match="records must be"):
        waivers.parse({"waivers": [waiver(records=records)]})


@pytest.mark.parametrize("when, scope", [({"kernel_records": "data corruption"}, "host"),
                                         ({"kernel_records": "upgrade"}, "filesystem")])
def test_catalog_refuses_an_unknown_action_or_a_filesystem_rule(tmp_path, when, scope):
    doc = yaml.safe_load(open(os.path.join(catalog_mod.RULES_DIR, "catalog.yml")))
    doc["rules"][0].update(when=when, scope=scope, message="x")
    (tmp_path / "catalog.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "kernel_issues.yml").write_text(open(os.path.join(catalog_mod.RULES_DIR, "kernel_issues.yml")).read())
    with pytest.raises(catalog_mod.CatalogError, match="kernel_records .* needs a host rule and one of the actions"):
        catalog_mod.load(str(tmp_path))
