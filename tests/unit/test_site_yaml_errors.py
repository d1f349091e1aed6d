"""The waiver file and rule files decode through the contract's models (contract.WaiverFile,
contract.RuleFile): one test per kind of error, each from the YAML text a site would write, with
the whole message: the file, the waiver or rule, the field, the value, and a hint where YAML's
typing is the likely cause (a bare 7, yes or 2027-01-01 where text belongs)."""

import os

import pytest

from ext4audit.rules import catalog as catalog_mod, waivers
from test_tailoring_checks import SITE_RULE as TAILORING_RULE

WAIVER = ("waivers:\n  - rule: EXT4_NOBARRIER\n    justification: battery-backed cache\n"
          "    approver: storage-team\n    expires: 2027-01-01\n")


def waiver_error(tmp_path, old, new):
    path = tmp_path / "waivers.yml"
    assert old in WAIVER
    path.write_text(WAIVER.replace(old, new, 1))
    with pytest.raises(waivers.WaiverError) as raised:
        waivers.load(str(path), {"EXT4_NOBARRIER"})
    return str(raised.value).replace(str(path), "waivers.yml")


@pytest.mark.parametrize("old, new, message", [
    # a required field: missing, null or empty
    ("    approver: storage-team\n", "", "waivers.yml: waiver #1 (EXT4_NOBARRIER) has no approver; every waiver "
                                       "needs rule, justification, approver, expires"),
    # an unknown field (a misspelt scope would widen the waiver)
    ("    approver:", "    host: [db-1]\n    approver:",
     "waivers.yml: waiver #1 (EXT4_NOBARRIER): unknown field host "
     "(fields: rule, justification, approver, expires, hosts, groups, mountpoints, records)"),
    # a bare number, boolean or date where text belongs: the hint says to quote it
    ("storage-team", "7", "waivers.yml: waiver #1 (EXT4_NOBARRIER): approver must be text (quote numbers), got 7"),
    ("battery-backed cache", "yes", "waivers.yml: waiver #1 (EXT4_NOBARRIER): justification must be text "
                                    "(quote yes, no, on, off, true and false), got True"),
    ("storage-team", "2026-01-01", "waivers.yml: waiver #1 (EXT4_NOBARRIER): approver must be text (quote dates), "
                                   "got datetime.date(2026, 1, 1)"),
    ("    approver:", "    hosts: [db-1, 1024]\n    approver:",
     "waivers.yml: waiver #1 (EXT4_NOBARRIER): hosts must be a list of names (quote numbers), got ['db-1', 1024]"),
    # the wrong shape: no hint, the value as written
    ("    approver:", "    groups: tikv\n    approver:",
     "waivers.yml: waiver #1 (EXT4_NOBARRIER): groups must be a list of names, got 'tikv'"),
    # a pattern (a rule id): refused even where no catalog is given to check it against
    ("rule: EXT4_NOBARRIER", "rule: ext4_nobarrier",
     "waivers.yml: waiver #1 (ext4_nobarrier): rule must be a rule id, got 'ext4_nobarrier'"),
    ("    approver:", "    records: [cve-2026-1]\n    approver:",
     "waivers.yml: waiver #1 (EXT4_NOBARRIER): records must be a non-empty list of CVE ids (CVE-YYYY-NNNN), "
     "got ['cve-2026-1']"),
    # the file's own shape: what the model says is wrong, and where
    ("waivers:\n", "waiver:\n", "waivers.yml: expected a mapping with a 'waivers' list "
                                "($: Object contains unknown field `waiver`)"),
    ("waivers:\n  - rule", "waivers: 3\nx:\n  - rule", "waivers.yml: expected a mapping with a 'waivers' list "
                                                       "($.waivers: Expected `array | null`, got `int`)"),
    # the named checks a model cannot say: blank text, the expiry's date and year
    ("battery-backed cache", "' '", "waivers.yml: waiver #1 (EXT4_NOBARRIER): justification must be text, got ' '"),
    ("2027-01-01", "'next week'", "waivers.yml: waiver #1 (EXT4_NOBARRIER): expires 'next week' is not a date "
                                  "(YYYY-MM-DD, UTC)"),
])
def test_a_bad_waiver_names_the_file_the_waiver_and_the_field(tmp_path, old, new, message):
    assert waiver_error(tmp_path, old, new) == message


def test_an_expiry_with_a_time_of_day_is_still_read(tmp_path):
    """More than the model's date: a YAML timestamp is read as the moment it names, in UTC."""
    path = tmp_path / "waivers.yml"
    path.write_text(WAIVER.replace("2027-01-01", "2027-01-01T10:30:00+02:00"))
    assert waivers.load(str(path), {"EXT4_NOBARRIER"})[0]["expires"].isoformat() == "2027-01-01T08:30:00+00:00"


# the site rule of test_tailoring_checks, with an escalate entry
SITE_RULE = TAILORING_RULE + """    escalate:
      - {when: {fact: opt.lazytime, eq: true}, severity: medium, because: b}
"""


def rule_error(tmp_path, old, new):
    folder = tmp_path / "site"
    folder.mkdir()
    assert old in SITE_RULE
    (folder / "a.yml").write_text(SITE_RULE.replace(old, new, 1))
    with pytest.raises(catalog_mod.CatalogError) as raised:
        catalog_mod.load(catalog_mod.RULES_DIR, [str(folder)])
    return str(raised.value).replace(str(folder) + os.sep, "")


@pytest.mark.parametrize("old, new, message", [
    ("    rationale: r\n", "", "a.yml: rule SITE_RULE has no rationale"),
    ("remediation: {steps: s, cost: c}", "remediation: {steps: s}", "a.yml: rule SITE_RULE: remediation has no cost"),
    ("    tags:", "    tag: [x]\n    tags:",
     "a.yml: rule SITE_RULE: unknown field tag (fields: id, title, scope, kind, severity, when, message, rationale, "
     "remediation, references, tags, seed, escalate, severity_by_records, confirmation, overrides)"),
    ("because: b}", "becuase: b}",
     "a.yml: rule SITE_RULE: escalate[0]: unknown field becuase (fields: when, severity, because)"),
    ("title: t", "title: 1.5", "a.yml: rule SITE_RULE: title must be text (quote numbers), got 1.5"),
    ("tags: [site]", "tags: [site, 2026]", "a.yml: rule SITE_RULE: tags must be a list of names (quote numbers), "
                                           "got ['site', 2026]"),
    ("remediation: {steps: s, cost: c}", "remediation: {steps: 3, cost: c}",
     "a.yml: rule SITE_RULE: remediation.steps must be text (quote numbers), got 3"),
    ("    tags:", "    overrides: maybe\n    tags:", "a.yml: rule SITE_RULE: overrides must be true or false, got 'maybe'"),
    ("severity: medium", "severity: hgh",
     "a.yml: rule SITE_RULE: escalate[0].severity 'hgh' is not one of info, low, medium, high, critical"),
    ("    tags:", "    confirmation: {probe: xattr_set, confirmed_at: 1, escalate_to: high}\n    tags:",
     "a.yml: rule SITE_RULE: confirmation.confirmed_at must be a ratio above 1 (risky cost / safe cost), got 1"),
    ("id: SITE_RULE", "id: site-rule",
     "a.yml: rule 'site-rule': id must be upper-case letters, digits and _ (e.g. SITE_DATA_NOATIME), got 'site-rule'"),
    ("schema: ext4-fleet-audit/rules/v1", "schema: ext4-fleet-audit/rules/v2",
     "a.yml: a rule file is a mapping with rules (and schema: ext4-fleet-audit/rules/v1): "
     "$.schema 'ext4-fleet-audit/rules/v2' is not a ext4-fleet-audit/rules/v1 document"),
    ("rules:\n", "rules:\n  - just text\n", "a.yml: rules[0] is not a mapping"),
])
def test_a_bad_rule_names_the_file_the_rule_and_the_field(tmp_path, old, new, message):
    assert rule_error(tmp_path, old, new) == message

