#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Ansible module: deploy the probe with its job into a private directory, run it, return its result."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_probe_run
short_description: Deploy, run and collect the ext4 probe in one module run
description:
  - Makes the private directory O(workdir) (mode 0700; refused if anything is there already),
    writes the probe's code and its job into it, runs the probe as the module's user, reads the
    probe's result and progress lines, and removes the files it wrote and the directory.
  - One module run instead of five (temporary directory, copies, job, result, removal). Run it as
    an async job and follow O(workdir)C(/progress.log) with M(ext4audit.fleet.ext4_probe_progress),
    which returns this module's result once the job ends.
  - Its action plugin builds the probe's payload (one zip of its code), puts the plan into O(job) from
    the file on the controller its C(plan_file) argument names, and picks O(workdir); a task gives
    only O(job) (without its plan) and C(plan_file).
  - Changes nothing on the host. The probe works in its own scratch directory and removes what it
    made; this module removes what it wrote, and first what it and the probe wrote in the private
    directories of earlier runs that were killed before they could (named as its action names them,
    the module's user's, mode 0700, unlocked so no module of a run still going holds it, and older than
    a minute), and those directories when nothing else is in them.
options:
  job:
    description: The probe's job (plan, filesystem facts, limits); C(progress_file) is set here.
    type: dict
    required: true
  workdir:
    description: The directory to make for the probe's files (set by the action plugin).
    type: path
    required: true
  probe:
    description: The probe's payload, C(ext4_probe.pyz) (a zip of its package and the parsers it imports),
      base64-encoded (set by the action plugin).
    type: str
    required: true
attributes:
  check_mode:
    support: none
    description: The probe attaches loop devices and mounts scratch filesystems; the role does not run it under check mode.
  action:
    support: full
    description: Its action plugin adds the probe's code and the private directory's name.
  async:
    support: full
    description: Meant to run as an async job, followed by M(ext4audit.fleet.ext4_probe_progress).
notes:
  - The chopper_probe role calls it; there is no use for it outside a probe run.
extends_documentation_fragment:
  - ext4audit.fleet.common
"""

EXAMPLES = r"""
- name: Start the probe
  ext4audit.fleet.ext4_probe_run:
    plan_file: "{{ run_dir }}/probe/plan.json"
    job: "{{ probe_job }}"
  async: 600
  poll: 0
  register: probe_started
"""

RETURN = r"""
rc:
  description: The probe's exit code (0 ok or partial, 4 refused, anything else failed).
  returned: always
  type: int
result:
  description: The probe's result (its result.json), or null when it wrote none.
  returned: always
  type: dict
progress:
  description: The probe's progress lines (at most 64 KiB of them).
  returned: always
  type: list
  elements: str
stderr_lines:
  description: The last lines the probe wrote to stderr (at most 8 KiB).
  returned: always
  type: list
  elements: str
"""

import base64
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule

FILES = ("ext4_probe.pyz", "job.json")
EARLIER_FILES = ("ext4_probe.py", "ext4_parsers.py")  # the code as versions before the payload wrote it
OUTPUTS = ("result.json", "progress.log")
RESULT_MAX = 16 * 1024 * 1024
PROGRESS_MAX = 64 * 1024
STDERR_TAIL = 8 * 1024
WORKDIR_NAME = re.compile(r"^ext4-probe-[0-9a-f]{24}$")  # as the action plugin names it
STALE_AFTER_S = 60


def make_workdir(path):
    """The new private directory, held by descriptor and locked for as long as this module runs
    (sweep_stale leaves it alone); nothing that was there before is used."""
    os.mkdir(path, 0o700)  # EEXIST for anything already at this path, a symlink included
    fd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
    info = os.fstat(fd)
    if info.st_uid != os.geteuid() or info.st_mode & 0o777 != 0o700:
        os.close(fd)
        raise OSError("%s: not the private directory just made (owner %d, mode %o)" % (path, info.st_uid, info.st_mode & 0o777))
    fcntl.flock(fd, fcntl.LOCK_EX)
    return fd


def sweep_stale(parent):
    """Removes what this module and the probe wrote in the private directories of earlier runs that
    were killed before they could (an async job's timeout, a Ctrl-C), then those directories: only
    directories named as the action names them, this user's, mode 0700, not locked by a module
    still running, and older than STALE_AFTER_S (one made a moment ago may not be locked yet). A
    directory holding anything else is left. Nothing is followed: each is opened relative to the
    parent's descriptor, without following a symlink."""
    parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for name in os.listdir(parent_fd):
            if not WORKDIR_NAME.match(name):
                continue
            try:
                fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=parent_fd)
            except OSError:
                continue  # a symlink, not a directory, or gone
            try:
                info = os.fstat(fd)
                if info.st_uid != os.geteuid() or info.st_mode & 0o777 != 0o700 or time.time() - info.st_mtime < STALE_AFTER_S:
                    continue
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except OSError:
                    continue  # its module is still running
                remove_files(fd)
                os.rmdir(name, dir_fd=parent_fd)
            except OSError:
                continue  # something else is in it: left as it is
            finally:
                os.close(fd)
    finally:
        os.close(parent_fd)


def write(dir_fd: int, name: str, data: bytes) -> None:
    fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=dir_fd)
    with os.fdopen(fd, "wb") as out:
        out.write(data)


def read(dir_fd, name, limit):
    """At most `limit` bytes of a file the probe wrote, or None when it wrote none."""
    try:
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    with os.fdopen(fd, "rb") as handle:
        return handle.read(limit + 1)


def remove_files(dir_fd: int) -> None:
    """Removes what this module and the probe wrote in the directory."""
    for name in FILES + EARLIER_FILES + OUTPUTS:
        try:
            os.unlink(name, dir_fd=dir_fd)
        except FileNotFoundError:
            pass


def remove(dir_fd, path):
    """Removes what this module and the probe wrote, then the directory (left if anything else is in it)."""
    remove_files(dir_fd)
    os.close(dir_fd)
    os.rmdir(path)


def run_probe(params: dict, dir_fd: int, workdir: str) -> dict:
    # binascii.Error on anything but base64 is a ValueError: the module fails with it
    write(dir_fd, "ext4_probe.pyz", base64.b64decode(params["probe"], validate=True))
    job = dict(params["job"], progress_file=os.path.join(workdir, "progress.log"))
    write(dir_fd, "job.json", json.dumps(job).encode("utf-8"))
    # -I: no PYTHON* variables, user site or script directory on the path of code run as root;
    # -S: no site-packages (the probe is standard library only; a venv's .pth files cost 50 ms);
    # -B: no __pycache__ beside the probe, so there is nothing but FILES to remove.
    with tempfile.TemporaryFile() as stderr:
        rc = subprocess.call([sys.executable, "-I", "-S", "-B", os.path.join(workdir, "ext4_probe.pyz"), "run",
                              os.path.join(workdir, "job.json"), os.path.join(workdir, "result.json")],
                             stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=stderr)
        stderr.seek(max(0, stderr.tell() - STDERR_TAIL))
        stderr_lines = stderr.read().decode("utf-8", "replace").splitlines()
    raw = read(dir_fd, "result.json", RESULT_MAX)
    if raw is not None and len(raw) > RESULT_MAX:
        raise ValueError("result.json is larger than %d bytes" % RESULT_MAX)
    progress = read(dir_fd, "progress.log", PROGRESS_MAX) or b""
    progress = progress[:progress.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines()
    return dict(rc=rc, result=None if raw is None else json.loads(raw.decode("utf-8")),
                progress=progress, stderr_lines=stderr_lines)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            job=dict(type="dict", required=True),
            workdir=dict(type="path", required=True),
            probe=dict(type="str", required=True),
        ),
        supports_check_mode=False,
    )
    workdir = module.params["workdir"]
    try:
        sweep_stale(os.path.dirname(workdir))
    except OSError as exc:
        module.warn("could not look for the private directories of killed probe runs in %s: %s"
                    % (os.path.dirname(workdir), exc))
    try:
        dir_fd = make_workdir(workdir)
    except OSError as exc:
        module.fail_json(msg="cannot make the probe's private directory %s: %s" % (workdir, exc))
    try:
        outcome = run_probe(module.params, dir_fd, workdir)
    except (OSError, ValueError) as exc:
        outcome = dict(failed=True, msg="probe in %s: %s" % (workdir, exc))
    try:
        remove(dir_fd, workdir)
    except OSError as exc:
        module.warn("could not remove the probe's private directory %s: %s" % (workdir, exc))
    # Not echoed: the job (with its plan) and the probe's code, 200 KB that would go into the async
    # job's status file and come back with every read of it.
    module.exit_json(changed=False, invocation={"module_args": {"workdir": workdir}}, **outcome)


if __name__ == "__main__":
    main()
