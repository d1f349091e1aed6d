#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Documentation of the action ext4_audit_unreachable (plugins/action/): it runs in Ansible's
worker process on the controller, so there is no module code here."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_audit_unreachable
short_description: Count a host the facts step could not reach as unreachable in Ansible's stats
description:
  - Answers for the task's host as if it could not be reached, with O(msg), without contacting it, so
    Ansible counts the host C(unreachable) in its stats (the C(PLAY RECAP), ansible-runner's C(dark), the
    host's state in AWX) and takes it out of the play.
  - The audit's facts task keeps a host it cannot reach with C(ignore_unreachable), so that the report
    step still records it (and the play goes on when a whole batch is down); Ansible counts that as
    C(ignored). The audit's report step runs this action on those hosts after the report and before
    the gate, so that Ansible's stats say what the report says.
  - Runs on the controller as an action, without a module run, and changes nothing.
options:
  msg:
    description: The reason to give, the facts task's message for the host.
    type: str
extends_documentation_fragment:
  - ext4audit.fleet.common
  - ext4audit.fleet.common.controller
"""

EXAMPLES = r"""
- name: Count the hosts that could not be reached as unreachable
  ext4audit.fleet.ext4_audit_unreachable:
    msg: "{{ ext4_audit_facts.msg }}"
  when: ext4_audit_facts.unreachable | default(false)
"""

RETURN = r"""
unreachable:
  description: Always true.
  returned: always
  type: bool
  sample: true
"""
