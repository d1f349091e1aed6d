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
short_description: Claim an audit run folder on the controller and write the facts or probe records of a batch into it
description:
  - With O(reports_dir) and O(run_id), claims the run folder C(reports_dir/run_id) with its C(facts/) and
    C(probe/) subfolders, with mkdir; a folder that exists is refused (two runs never share one), and so is a
    run id that is not a plain folder name, and a reports folder (or a folder above it that is not sticky)
    that another user could write or that belongs to another user.
  - With O(path), opens the run folder from C(/) without following a symbolic link (the same checks) and
    writes records into it atomically (a temporary name, flushed, renamed), so a killed run never leaves half
    a record.
  - O(collect) writes a facts record for every host of the play that has an answer in that registered
    variable, audited or not, and the play's host list (C(play-hosts.json)). An answer that was skipped,
    failed, could not be read, or breaks a bound (size, counts, string lengths, nesting) makes a failed
    record with the reason. The report step fails a host of the list without a record.
  - Runs on the controller as an action, without a module run; it writes the run's reports, not a
    change to any audited host, so it runs under check mode too and reports no change.
options:
  reports_dir:
    description: The reports folder in which to claim the run folder O(run_id) (made when missing).
    type: path
  run_id:
    description: The run folder's name, with O(reports_dir); a plain folder name.
    type: str
  path:
    description: The run folder to write into (claimed before).
    type: path
  collect:
    description:
      - The name of the variable the facts task registered; a record is written for every host of the play
        that has it (and every host of the batch), and the play's host list.
    type: str
  probe:
    description:
      - Probe records to write into C(probe/), file name to text. Names must be plain file names ending
        in C(.json); anything else is refused before anything is written.
    type: dict
    default: {}
extends_documentation_fragment:
  - ext4audit.fleet.common
  - ext4audit.fleet.common.controller
"""

EXAMPLES = r"""
- name: Claim the run folder
  ext4audit.fleet.ext4_audit_run_folder:
    reports_dir: /srv/audit/reports
    run_id: 20261124-120000-000000

- name: Save the facts of every host on the controller
  ext4audit.fleet.ext4_audit_run_folder:
    path: /srv/audit/reports/20261124-120000-000000
    collect: ext4_audit_facts
  run_once: true
  delegate_to: localhost
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
