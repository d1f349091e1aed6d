"""Site rule files and per-host policies: the checks the playbook test (tests/integration/
test_tailoring.py) does not reach, each with the file or host, the rule and the field."""

import os
import shutil

import pytest

from conftest import ROOT
from ext4audit.rules import catalog as catalog_mod, policy

CATALOG = catalog_mod.load()
SITE_RULE = """schema: ext4-fleet-audit/rules/v1
rules:
  - id: SITE_RULE
    title: t
    scope: filesystem
    kind: operability
    severity: low
    when: {fact: opt.lazytime, eq: true}
    message: "{mountpoint}"
    rationale: r
    remediation: {steps: s, cost: c}
    references: []
    tags: [site]
"""


def site(tmp_path, **files):
    folder = tmp_path / "site"
    folder.mkdir()
    for name, text in files.items():
        (folder / name).write_text(text)
    return str(folder)


@pytest.mark.parametrize("files, message", [
    ({"a.yml": SITE_RULE, "b.yaml": SITE_RULE}, "b.yaml: rule SITE_RULE is defined in "),
    ({"a.yml": SITE_RULE.replace("tags: [site]", "tags: site")}, "a.yml: rule SITE_RULE: tags must be a list of names"),
    ({"a.yml": SITE_RULE.replace("id: SITE_RULE", "id: site rule")}, "a.yml: rule 'site rule': id must be upper-case"),
    ({"a.yml": SITE_RULE.replace("schema: ext4-fleet-audit/rules/v1", "schema: v2")}, "a.yml: a rule file is a mapping"),
    ({"a.yml": SITE_RULE.replace("    severity: low", "    severity: lo")}, "a.yml: rule SITE_RULE: severity 'lo'"),
])
def test_a_bad_site_rule_file_is_an_error_naming_it(tmp_path, files, message):
    with pytest.raises(catalog_mod.CatalogError) as caught:
        catalog_mod.load(catalog_mod.RULES_DIR, [site(tmp_path, **files)])
    assert message in str(caught.value)


def test_overrides_is_for_site_rules_only(tmp_path):
    rules = tmp_path / "rules"
    shutil.copytree(os.path.join(ROOT, "rules"), str(rules))
    text = (rules / "catalog.yml").read_text().replace("  - id: EXT4_INODE_128\n", "  - id: EXT4_INODE_128\n"
                                                        "    overrides: true\n", 1)
    (rules / "catalog.yml").write_text(text)
    with pytest.raises(catalog_mod.CatalogError, match="catalog.yml: rule EXT4_INODE_128: overrides is for site"):
        catalog_mod.load(str(rules))


def test_a_missing_site_folder_is_an_error(tmp_path):
    with pytest.raises(catalog_mod.CatalogError, match="ext4_audit_rules_dirs: .*/nothing is not a folder"):
        catalog_mod.load(catalog_mod.RULES_DIR, [str(tmp_path / "nothing")])


@pytest.mark.parametrize("doc, message", [
    ({"severity_overrides": {"EXT4_NOPE": {"severity": "high", "reason": "x"}}},
     "ext4_audit_severity_overrides.EXT4_NOPE: 'EXT4_NOPE' is not a rule id"),
    ({"severity_overrides": {"EXT4_INODE_128": {"severity": "hi", "reason": "x"}}}, "severity 'hi' is not one of"),
    ({"severity_overrides": {"EXT4_INODE_128": {"severity": "high"}}}, "needs exactly severity and reason"),
    ({"rules_skip": "performance"}, "ext4_audit_rules_skip must be a list"),
    ({"fail_on": "high", "rules": []}, "the policy is a mapping of"),
])
def test_a_bad_policy_names_the_host_and_the_variable(doc, message):
    with pytest.raises(policy.PolicyError) as caught:
        policy.make(doc, CATALOG, "host db-1", "high")
    assert str(caught.value).startswith("host db-1: ") and message in str(caught.value)


def test_a_record_without_a_policy_gets_the_default_and_skips_nothing():
    assert policy.make(None, CATALOG, "host h", "medium") == (
        {"fail_on": "medium", "rules_select": [], "rules_skip": [], "severity_overrides": {},
         "kernel_no_fix_counts": False, "capacity_limits": policy.CAPACITY_LIMITS}, {})
