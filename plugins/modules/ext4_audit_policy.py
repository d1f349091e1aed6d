#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Documentation of the action ext4_audit_policy (plugins/action/): it runs in Ansible's worker
process on the controller, so there is no module code here."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_audit_policy
short_description: Note a host's audit policy from its variables, or list the hosts whose policies are still to check
description:
  - Without O(hosts), sets the fact C(ext4_audit_policy) of the host from the role's variables as the host sees
    them (group_vars, host_vars, extra vars, the role's defaults) - C(fail_on) from C(ext4_audit_fail_on),
    C(rules_select), C(rules_skip), C(severity_overrides), C(capacity_limits) and C(kernel_no_fix_counts) from
    the variables of the same names. The facts task saves it with the host's facts record.
  - With O(hosts), returns in RV(policies) the first host of each distinct noted policy of those hosts, for the
    controller's C(ext4audit check --policies), leaving out the policy the prepare step checked already (C(localhost)'s
    C(ext4_audit_policy) when its C(ext4_audit_policy_checked) is true).
  - Runs on the controller as an action, without a module run, and never changes anything, so it runs under
    check mode too and reports no change.
options:
  hosts:
    description: Inventory host names whose noted policies to compare (the play's batch).
    type: list
    elements: str
extends_documentation_fragment:
  - ext4audit.fleet.common
  - ext4audit.fleet.common.controller
"""

EXAMPLES = r"""
- name: Note this host's policy
  ext4audit.fleet.ext4_audit_policy:

- name: Pick the policies still to check
  ext4audit.fleet.ext4_audit_policy:
    hosts: "{{ ansible_play_batch }}"
  register: to_check
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
ansible_facts:
  description: Without O(hosts), the host's policy as C(ext4_audit_policy).
  returned: without hosts
  type: dict
  sample: {"ext4_audit_policy": {"fail_on": "high", "rules_select": [], "rules_skip": [], "severity_overrides": {},
           "capacity_limits": {"block_use_high": 0.97}, "kernel_no_fix_counts": false}}
policies:
  description: With O(hosts), host to policy, the first host of each distinct policy but the one checked already.
  returned: with hosts
  type: dict
  sample: {"db-1": {"fail_on": "medium", "rules_select": [], "rules_skip": [], "severity_overrides": {},
           "capacity_limits": {}, "kernel_no_fix_counts": false}}
"""
