#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Documentation of the action ext4_audit_run_folder (plugins/action/): it runs in Ansible's
worker process on the controller, so there is no module code here."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_audit_run_folder
short_description: Make an audit run folder on the controller and write a batch of facts or probe records into it
description:
  - Makes the run folder with its C(facts/) and C(probe/) subfolders when they are missing.
  - Writes each record of O(facts) into C(facts/) and of O(probe) into C(probe/) atomically (a
    temporary name, flushed, renamed), so a killed run never leaves half a record.
  - Runs on the controller as an action, without a module run; it writes the run's reports, not a
    change to any audited host, so it runs under check mode too and reports no change.
options:
  path:
    description: The run folder.
    type: path
    required: true
  facts:
    description:
      - Records to write into C(facts/), file name to text. Names must be plain file names ending
        in C(.json); anything else is refused before anything is written.
    type: dict
    default: {}
  probe:
    description:
      - Probe records to write into C(probe/), file name to text; the same rules as O(facts).
    type: dict
    default: {}
  exit_file:
    description:
      - The private file C(ext4audit run) gives the playbook (the extra variable
        C(ext4_audit_exit_file)); the report step names the run folder it gated on there, as a JSON
        object with the keys C(run_dir) and C(gate), mode 0600, written atomically as the records.
    type: path
  gate:
    description:
      - Written into O(exit_file). False when the run reports only (C(ext4_audit_gate) false), and
        C(ext4audit run) then exits as ansible-playbook did instead of with the verdict's code.
    type: bool
    default: true
extends_documentation_fragment:
  - ext4audit.fleet.common
  - ext4audit.fleet.common.controller
"""

EXAMPLES = r"""
- name: Create the run folder
  ext4audit.fleet.ext4_audit_run_folder:
    path: /srv/audit/reports/20261124-120000-000000
"""

RETURN = r"""
path:
  description: The run folder.
  returned: always
  type: str
  sample: /srv/audit/reports/20261124-120000-000000
written:
  description: How many records were written into C(facts/) and C(probe/).
  returned: always
  type: int
  sample: 12
"""
