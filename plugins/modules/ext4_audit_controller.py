#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Documentation of the action ext4_audit_controller (plugins/action/): it runs in Ansible's
worker process on the controller, so there is no module code here."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_audit_controller
short_description: Run a command of the controller package (ext4audit) on the controller
description:
  - Runs O(argv) on the controller, whatever the task's host, without a shell and with no input,
    and returns its exit code and output as M(ansible.builtin.command) does.
  - Runs on the controller as an action, without a module run (about half a second less per call).
  - A command that cannot be started gives C(rc) 2, the reason in C(msg) and empty output.
  - Its commands read the catalog and write the run's reports on the controller, not a change to
    any audited host, so it runs under check mode too and reports no change.
options:
  argv:
    description: The command and its arguments.
    type: list
    elements: str
    required: true
extends_documentation_fragment:
  - ext4audit.fleet.common
  - ext4audit.fleet.common.controller
"""

EXAMPLES = r"""
- name: Check the rule catalog
  ext4audit.fleet.ext4_audit_controller:
    argv: [ext4audit, check]
  register: checked
"""

RETURN = r"""
rc:
  description: The command's exit code (2 when it could not be started).
  returned: always
  type: int
  sample: 0
stdout:
  description: What the command wrote to stdout, without the final newline.
  returned: always
  type: str
stderr:
  description: What the command wrote to stderr, without the final newline.
  returned: always
  type: str
stdout_lines:
  description: RV(stdout) split into lines.
  returned: always
  type: list
  elements: str
stderr_lines:
  description: RV(stderr) split into lines.
  returned: always
  type: list
  elements: str
"""
