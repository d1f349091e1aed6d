#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Ansible module: run a remediation's e2fsprogs commands on one ext4 device, offline only if asked."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_tune
short_description: Run e2fsck, tune2fs or resize2fs commands of a fix on one device
description:
  - Runs the argument lists in O(commands) one after the other (never through a shell) and stops at
    the first that fails. Only C(e2fsck), C(tune2fs) and C(resize2fs) are run; C(e2fsck) exiting 1
    (errors corrected) counts as success.
  - With O(unmounted), refuses to run anything while O(device) is mounted anywhere (its device
    number in C(/proc/self/mountinfo)), so an offline change never reaches a mounted filesystem.
  - In check mode it runs nothing and returns the commands it would run.
options:
  device:
    description: The block device (or image file) the commands work on.
    type: path
    required: true
  commands:
    description: Argument lists, each starting with e2fsck, tune2fs or resize2fs.
    type: list
    elements: list
    required: true
  unmounted:
    description: Require the device to be unmounted.
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Runs nothing; returns the commands.
  diff_mode:
    support: none
    description: Commands, not files; they are in C(commands).
author:
  - ext4 fleet audit maintainers (@ext4audit)
"""

EXAMPLES = r"""
- name: A 64 MiB journal on an unmounted filesystem
  ext4audit.fleet.ext4_tune:
    device: /dev/vdb
    commands:
      - [e2fsck, -f, -p, /dev/vdb]
      - [tune2fs, -O, ^has_journal, /dev/vdb]
      - [tune2fs, -O, has_journal, -J, size=64, /dev/vdb]
"""

RETURN = r"""
commands:
  description: The commands, each with its exit status and output (rc null when not run).
  returned: always
  type: list
  elements: dict
mounted:
  description: Whether the device was mounted.
  returned: always
  type: bool
"""

import os
import stat

from ansible.module_utils.basic import AnsibleModule

TOOLS = ("e2fsck", "tune2fs", "resize2fs")


def is_mounted(device):
    """Whether the device's number (or, for an image file, its path) is a mount source."""
    st = os.stat(device)
    number = "%d:%d" % (os.major(st.st_rdev), os.minor(st.st_rdev)) if stat.S_ISBLK(st.st_mode) else None
    real = os.path.realpath(device)
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            tail = fields[fields.index("-") + 1:]
            if (number and fields[2] == number) or (len(tail) > 1 and os.path.realpath(tail[1]) == real):
                return True
    return False


def main():
    module = AnsibleModule(
        argument_spec=dict(device=dict(type="path", required=True),
                           commands=dict(type="list", elements="list", required=True),
                           unmounted=dict(type="bool", default=True)),
        supports_check_mode=True)
    device = module.params["device"]
    commands = [[str(arg) for arg in argv] for argv in module.params["commands"]]
    for argv in commands:
        if not argv or argv[0] not in TOOLS:
            module.fail_json(msg="commands: each starts with one of %s (got %r)" % (", ".join(TOOLS), argv))
    try:
        mounted = is_mounted(device)
    except OSError as exc:
        module.fail_json(msg="device %s: %s" % (device, exc), mounted=None, commands=[])
    listed = [dict(argv=argv, rc=None, output=None) for argv in commands]
    if mounted and module.params["unmounted"]:
        module.fail_json(msg="%s is mounted: an offline change runs only on an unmounted filesystem" % device,
                         mounted=True, commands=listed)
    if module.check_mode:
        module.exit_json(changed=True, mounted=mounted, commands=listed)
    for entry in listed:
        argv = entry["argv"]
        rc, out, err = module.run_command([module.get_bin_path(argv[0], required=True)] + argv[1:],
                                          environ_update={"LC_ALL": "C"})
        entry.update(rc=rc, output=(out + err).strip()[-4000:])
        if rc not in ((0, 1) if argv[0] == "e2fsck" else (0,)):
            module.fail_json(msg="%s failed (rc=%d): %s" % (" ".join(argv), rc, entry["output"]),
                             mounted=mounted, commands=listed)
    module.exit_json(changed=True, mounted=mounted, commands=listed)


if __name__ == "__main__":
    main()
