# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""A host's policy from the role's variables, and which hosts' policies the controller must check.

The action ext4_audit_policy (plugins/action/) uses these on the controller: a host's policy is
saved with its facts record and judged by the report step (ext4audit/rules/policy.py FIELDS are the
same fields: tests/unit/test_policy_vars.py). Python 3.8 stdlib only, as every module_utils file.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from typing import Any, Callable, Dict, Iterable, Optional, Tuple

# The policy's fields and the role variable that gives each (per host: group_vars, host_vars, -e).
VARIABLES = (
    ("fail_on", "ext4_audit_fail_on"),
    ("rules_select", "ext4_audit_rules_select"),
    ("rules_skip", "ext4_audit_rules_skip"),
    ("severity_overrides", "ext4_audit_severity_overrides"),
    ("capacity_limits", "ext4_audit_capacity_limits"),
    ("kernel_no_fix_counts", "ext4_audit_kernel_no_fix_counts"),
)


def policy_of(value_of: Callable[[str], Any]) -> Dict[str, Any]:
    """A host's policy: each field the value of its variable, value_of(variable name)."""
    return dict((field, value_of(variable)) for field, variable in VARIABLES)


def policies_to_check(policies: Iterable[Tuple[str, Any]], checked: Optional[Dict[str, Any]]) -> Dict[str, Any]:
    """Of (host, policy) pairs in play order, {host: policy} for the first host of each distinct
    policy, but none for `checked` (the policy the prepare step checked already; None: none was)."""
    seen = [] if checked is None else [checked]
    found = {}
    for host, policy in policies:
        if policy not in seen:  # policies are dicts (unhashable): compared by value
            seen.append(policy)
            found[host] = policy
    return found
