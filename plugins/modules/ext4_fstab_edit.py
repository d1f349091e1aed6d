#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Ansible module: add and drop mount options of one fstab entry, as text, and remount to apply."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_fstab_edit
short_description: Add and drop mount options of one fstab entry, then remount if the kernel allows
description:
  - Edits the options field of the fstab entry whose mount point is O(mountpoint) as text; the
    entry's other options keep their order, the other fields, comments, blank lines and spacing are
    kept byte for byte. Mount points are compared unescaped (C(\040) is a space), so sources by
    device, C(UUID=) or C(LABEL=) all work.
  - An added C(key=value) replaces the entry's other values of that key; O(drop) names options with
    or without C(=value). An entry left without options gets C(defaults).
  - Before the file is replaced, the new text is written beside it and checked with
    C(findmnt --verify --tab-file) where findmnt has it (refused if it has more errors than the
    original); a backup of the original is kept beside it; the new file replaces the original by
    rename in the same folder with the original's owner and mode. Files are opened relative to the
    folder, and the temporary file never through a symlink.
  - With O(remount), a mounted filesystem is remounted with the added options and the options in
    effect (C(/proc/fs/ext4/DEV/options) and the mount's super options) are read back. A remount the
    kernel refuses, or accepts without the options taking effect, is reported in C(pending); it takes
    effect at the next mount. Never reported as applied unless read back.
options:
  path:
    description: The fstab file.
    type: path
    default: /etc/fstab
  mountpoint:
    description: The mount point of the entry (unescaped).
    type: str
    required: true
  add:
    description: Options to have in the entry.
    type: list
    elements: str
    default: []
  drop:
    description: Options to remove from the entry (a name drops every C(name=value) too).
    type: list
    elements: str
    default: []
  remount:
    description: Remount a mounted filesystem with O(add) now.
    type: bool
    default: false
  present:
    description: Option tokens that show the change in effect on the mounted filesystem.
    type: list
    elements: str
    default: []
  absent:
    description: Option tokens that must be gone from the mounted filesystem for the change to be in effect.
    type: list
    elements: str
    default: []
  backup:
    description: Keep a copy of the original beside it (C(PATH.YYYYmmddTHHMMSS~)).
    type: bool
    default: true
attributes:
  check_mode:
    support: full
    description: Computes the new line and reports what would change; writes and remounts nothing.
  diff_mode:
    support: full
    description: The old and new fstab text.
author:
  - ext4 fleet audit maintainers (@ext4audit)
"""

EXAMPLES = r"""
- name: Barriers on /data, now and at every mount
  ext4audit.fleet.ext4_fstab_edit:
    mountpoint: /data
    add: [barrier]
    drop: [nobarrier, barrier=0]
    remount: true
    present: [barrier]
"""

RETURN = r"""
line:
  description: The fstab line number (from 1) of the entry.
  returned: always
  type: int
before:
  description: The entry's line before.
  returned: always
  type: str
after:
  description: The entry's line after.
  returned: always
  type: str
backup_file:
  description: The backup of the original, when one was written.
  returned: when changed and not in check mode
  type: str
effective:
  description: Whether the options in effect show the change (null when not mounted).
  returned: always
  type: bool
remount:
  description: What the remount did (not needed, would remount, applied, refused, no effect, not mounted, not asked).
  returned: always
  type: str
pending:
  description: Why the change is not in effect yet (null when it is).
  returned: always
  type: str
"""

import datetime
import os
import re
import stat

from ansible.module_utils.basic import AnsibleModule

_ESCAPE = re.compile(r"\\([0-7]{3})")
_SUMMARY = re.compile(r"(\d+) parse errors?, (\d+) errors?")


def unescape(field):
    """fstab's octal escapes (\\040 space, \\011 tab, \\134 backslash)."""
    return _ESCAPE.sub(lambda m: chr(int(m.group(1), 8)), field)


def _name(option):
    return option.split("=", 1)[0]


def new_options(options, add, drop):
    """The options list with drop removed and add present; order of the others kept."""
    dropped = set(d for d in drop if "=" not in d)
    exact = set(d for d in drop if "=" in d)
    added_keys = set(_name(a) for a in add if "=" in a)
    kept = [o for o in options if o in add or not (
        o in exact or _name(o) in dropped or _name(o) in added_keys)]
    for option in add:
        if option not in kept:
            kept.append(option)
    return kept or ["defaults"]


def edit_text(text, mountpoint, add, drop):
    """(line number, old line, new line, new text) of the entry for mountpoint; ValueError if none or several."""
    lines = text.splitlines(True)
    found = []
    for index, line in enumerate(lines):
        fields = list(re.finditer(r"\S+", line))
        if not fields or fields[0].group().startswith("#") or len(fields) < 2:
            continue
        if unescape(fields[1].group()) == mountpoint:
            found.append((index, fields))
    if not found:
        raise ValueError("no entry for %s" % mountpoint)
    if len(found) > 1:
        raise ValueError("%d entries for %s (lines %s): fix fstab first" % (
            len(found), mountpoint, ", ".join(str(i + 1) for i, _fields in found)))
    index, fields = found[0]
    line = lines[index]
    if len(fields) < 3:
        raise ValueError("line %d has no filesystem type" % (index + 1))
    if len(fields) >= 4:
        old = fields[3].group().split(",")
        start, end = fields[3].span()
    else:
        old, start, end = ["defaults"], fields[2].end(), fields[2].end()
    options = new_options(old, add, drop)
    joined = ",".join(options)
    new_line = line[:start] + ("" if len(fields) >= 4 else " ") + joined + line[end:] if options != old else line
    lines[index] = new_line
    return index + 1, line, new_line, "".join(lines)


def verify_errors(module, path):
    """Parse errors + errors findmnt --verify finds in an fstab file; None without findmnt --verify."""
    findmnt = module.get_bin_path("findmnt")
    if not findmnt:
        return None
    rc, out, err = module.run_command([findmnt, "--verify", "--tab-file", path], environ_update={"LC_ALL": "C"})
    found = _SUMMARY.search(out + err)
    if found:
        return int(found.group(1)) + int(found.group(2))
    if "unrecognized option" in err or "invalid option" in err:
        return None
    return 0 if rc == 0 else 1


def _write_beside(dir_fd, name, data, like):
    """Write data to a new file name in the folder (never through a symlink), with like's owner and mode."""
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600, dir_fd=dir_fd)
    try:
        os.fchown(fd, like.st_uid, like.st_gid)
        os.fchmod(fd, stat.S_IMODE(like.st_mode))
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view):]
        os.fsync(fd)
    finally:
        os.close(fd)


def replace_file(module, path, text):
    """Validate, back up and atomically replace path with text; returns the backup's path or None."""
    real = os.path.realpath(path)
    folder, base = os.path.split(real)
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        like = os.stat(base, dir_fd=dir_fd, follow_symlinks=False)
        with open(os.open(base, os.O_RDONLY | os.O_NOFOLLOW, dir_fd=dir_fd), "rb") as handle:
            original = handle.read()
        temp = ".%s.%d.tmp" % (base, os.getpid())
        _write_beside(dir_fd, temp, text.encode("utf-8", "surrogateescape"), like)
        try:
            before = verify_errors(module, real)
            after = verify_errors(module, os.path.join(folder, temp))
            if after is not None and before is not None and after > before:
                module.fail_json(msg="%s: findmnt --verify finds %d error(s) in the new text (%d before); "
                                     "nothing changed" % (path, after, before))
            backup = None
            if module.params["backup"]:
                backup = "%s.%s~" % (base, datetime.datetime.now().strftime("%Y%m%dT%H%M%S%f"))
                _write_beside(dir_fd, backup, original, like)
            os.rename(temp, base, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
        except BaseException:
            try:
                os.unlink(temp, dir_fd=dir_fd)
            except OSError:
                pass
            raise
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)
    return os.path.join(folder, backup) if backup else None


def mounted(mountpoint):
    """(source, block device name) of the top mount at mountpoint, or None."""
    found = None
    with open("/proc/self/mountinfo") as handle:
        for line in handle:
            fields = line.split()
            if unescape(fields[4]) == mountpoint:
                tail = fields[fields.index("-") + 1:]
                found = (unescape(tail[1]), fields[2], tail[2] if len(tail) > 2 else "")
    if not found:
        return None
    source, devno, super_options = found
    try:
        name = os.path.basename(os.readlink("/sys/dev/block/%s" % devno))
    except OSError:
        name = os.path.basename(os.path.realpath(source))
    return source, name, super_options


def effective_tokens(mountpoint):
    """The option tokens in effect: /proc/fs/ext4/DEV/options and the mount's super options."""
    mount = mounted(mountpoint)
    if mount is None:
        return None
    source, name, super_options = mount
    tokens = set(super_options.split(","))
    try:
        with open("/proc/fs/ext4/%s/options" % name) as handle:
            tokens |= set(handle.read().split())
    except OSError:
        pass
    return tokens


def in_effect(tokens, present, absent):
    if tokens is None:
        return None
    return all(t in tokens for t in present) and not any(t in tokens for t in absent)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", default="/etc/fstab"), mountpoint=dict(type="str", required=True),
            add=dict(type="list", elements="str", default=[]), drop=dict(type="list", elements="str", default=[]),
            remount=dict(type="bool", default=False), present=dict(type="list", elements="str", default=[]),
            absent=dict(type="list", elements="str", default=[]), backup=dict(type="bool", default=True)),
        supports_check_mode=True)
    params = module.params
    path, mountpoint = params["path"], params["mountpoint"]
    bad = [o for o in params["add"] + params["drop"] if not o or re.search(r"[\s,#\\]", o)]
    if bad:
        module.fail_json(msg="add/drop: options are single tokens without spaces, commas, # or \\ (got %r)" % bad)
    try:
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", "surrogateescape")
        line, before, after, new_text = edit_text(text, mountpoint, params["add"], params["drop"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg="%s: %s" % (path, exc))
    result = dict(changed=before != after, line=line, before=before.rstrip("\n"), after=after.rstrip("\n"))
    if result["changed"]:
        result["diff"] = dict(before=text, after=new_text, before_header=path, after_header=path)
        if not module.check_mode:
            result["backup_file"] = replace_file(module, path, new_text)

    tokens = effective_tokens(mountpoint)
    result["effective"] = in_effect(tokens, params["present"], params["absent"])
    if tokens is None:
        result.update(remount="not mounted", pending="not mounted: takes effect when it is mounted")
    elif result["effective"]:
        result.update(remount="not needed", pending=None)
    elif not params["remount"]:
        result.update(remount="not asked", pending="takes effect at the next mount or reboot")
    elif module.check_mode:
        result.update(changed=True, remount="would remount", pending=None)
    else:
        source = mounted(mountpoint)[0]
        # source and target both named: mount(8) then ignores what fstab says for the mount point
        rc, out, err = module.run_command(
            [module.get_bin_path("mount", required=True), "-o", ",".join(["remount"] + params["add"]),
             source, mountpoint], environ_update={"LC_ALL": "C"})
        result["effective"] = in_effect(effective_tokens(mountpoint), params["present"], params["absent"])
        if rc != 0:
            result.update(remount="refused", pending="the kernel refused the remount (%s): takes effect at the "
                                                     "next mount or reboot" % (err or out).strip())
        elif not result["effective"]:
            result.update(remount="no effect", pending="the kernel kept the old options on remount: takes effect "
                                                       "at the next mount or reboot")
        else:
            result.update(changed=True, remount="applied", pending=None)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
