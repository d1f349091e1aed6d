"""A host's policy comes from the role's variables (plugins/module_utils/policy_vars.py, which the
action ext4_audit_policy runs): its fields are the ones the report step judges by, and the
controller checks each distinct policy once, never again the one the prepare step checked."""

import yaml

from conftest import ROOT

from ext4audit.rules import policy
from ext4audit.parsers import policy_vars

LOOSE = {"fail_on": "medium", "rules_select": [], "rules_skip": [], "severity_overrides": {},
         "capacity_limits": {}, "kernel_no_fix_counts": False}
STRICT = dict(LOOSE, fail_on="low")


def test_the_policy_has_the_fields_the_report_step_judges_by():
    assert sorted(field for field, _variable in policy_vars.VARIABLES) == sorted(policy.FIELDS)


def test_each_field_comes_from_its_role_variable_as_the_host_sees_it():
    with open(ROOT + "/roles/ext4_audit/defaults/main.yml") as handle:
        defaults = yaml.safe_load(handle)
    host_vars = dict(defaults, ext4_audit_fail_on="critical")  # e.g. its group_vars
    noted = policy_vars.policy_of(host_vars.__getitem__)
    assert noted == {"fail_on": "critical", "rules_select": [], "rules_skip": [], "severity_overrides": {},
                     "capacity_limits": policy.CAPACITY_LIMITS, "kernel_no_fix_counts": False}


def test_each_distinct_policy_is_checked_once_under_its_first_host():
    pairs = [("a", LOOSE), ("b", dict(LOOSE)), ("c", STRICT), ("d", LOOSE), ("e", dict(STRICT))]
    assert policy_vars.policies_to_check(pairs, None) == {"a": LOOSE, "c": STRICT}


def test_the_policy_checked_by_the_prepare_step_is_not_checked_again():
    assert policy_vars.policies_to_check([("a", LOOSE), ("b", STRICT)], dict(LOOSE)) == {"b": STRICT}
    assert policy_vars.policies_to_check([("a", LOOSE), ("b", LOOSE)], LOOSE) == {}  # no controller start
