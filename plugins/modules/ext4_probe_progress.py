#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Ansible module: the new progress lines of a running probe, and whether its async job ended."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_probe_progress
short_description: Wait for the next progress line of a probe started as an async job
description:
  - Waits up to O(wait_s) seconds for the probe to append a line to its progress file or for its
    async job to end, then returns every line of the file, so an C(until) loop around it shows the
    probe's progress while it runs (Ansible gives an async job's output only at its end). The
    stdout callback C(ext4audit.fleet.audit) prints the lines it has not printed yet.
  - Returns as soon as the file has more lines than O(seen) (after at least O(min_wait_s), and a
    quarter of a second after the first new line, so a burst of lines, such as the last ones and the
    job's end, comes back in one call) or the job has ended, so polling adds no waiting after the
    probe is done. Its action plugin sets O(seen) to the number of lines the previous attempt of
    the same C(until) loop returned.
  - Once the job has ended, returns its result too (what M(ext4audit.fleet.ext4_probe_run) returned,
    read from the job's status file), with the probe's progress lines from that result, so no
    C(async_status) task is needed after the loop; the status file is then removed, as
    C(async_status) does with C(mode=cleanup) (each probe run would otherwise leave its result in
    the async directory).
  - Changes nothing but the removal of the ended job's status file; reads at most 64 KiB of
    progress, and 4 KiB of the job file per call while the job runs (32 MiB once it has ended).
options:
  path:
    description: The probe's progress file (named in its job as C(progress_file)).
    type: path
    required: true
  seen:
    description: Lines already returned; set by the action plugin from the previous attempt of the loop.
    type: int
    default: 0
  results_file:
    description: The async job's status file (C(results_file) of the task that started the probe).
    type: path
    required: true
  wait_s:
    description: Longest wait for something new, in seconds.
    type: float
    default: 5.0
  min_wait_s:
    description: Shortest wait while the job runs, in seconds, so that an C(until) loop makes at most
      one call per O(min_wait_s) and its C(retries) bound a time.
    type: float
    default: 0.5
attributes:
  action:
    support: full
    description: Its action plugin passes O(seen) from the previous attempt; the module runs on the host.
notes:
  - The chopper_probe role calls it; there is no use for it outside a probe run.
extends_documentation_fragment:
  - ext4audit.fleet.common
"""

EXAMPLES = r"""
- name: Follow the probe
  ext4audit.fleet.ext4_probe_progress:
    path: "{{ probe_tmp }}/progress.log"
    results_file: "{{ probe_job.results_file }}"
  register: probe_progress
  until: probe_progress.finished
  retries: 1200  # each call lasts at least min_wait_s while the job runs: 600 s
  delay: 0
"""

RETURN = r"""
lines:
  description: Every complete line of the progress file so far (at most 64 KiB of them).
  returned: always
  type: list
  elements: str
  sample: ["ext4_probe: sweep 32/256 runs, 2.1 s"]
finished:
  description: Whether the async job has ended (its status file no longer says it is running).
  returned: always
  type: bool
  sample: false
job:
  description: The async job's result once it has ended (null while it runs, or when its status
    file is gone or unreadable; then C(job_error) says why).
  returned: always
  type: dict
job_error:
  description: Why there is no job result although the job has ended.
  returned: when the job ended without a readable result
  type: str
"""

import errno
import json
import os
import time

from ansible.module_utils.basic import AnsibleModule

PROGRESS_MAX = 64 * 1024
JOB_FILE_MAX = 4096  # the "still running" record is tiny; a module's full result is what ends it
JOB_RESULT_MAX = 32 * 1024 * 1024  # the probe's result and progress: about 100 KB
POLL_S = 0.05
SETTLE_S = 0.25  # what comes this soon after a new line is returned with it (the probe ends just after its last line)


def read_lines(path):
    """The file's complete lines (its first 64 KiB); none when the probe has not made it yet."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return []
        raise
    try:
        data = os.read(fd, PROGRESS_MAX)
    finally:
        os.close(fd)
    return data[:data.rfind(b"\n") + 1].decode("utf-8", "replace").splitlines()


def job_state(results_file):
    """(finished, its result or None, why there is none): the job ended when its status file is gone
    or is no longer the small "still running" record."""
    try:
        fd = os.open(results_file, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENOENT:
            return True, None, "the job's status file %s is gone" % results_file
        raise
    with os.fdopen(fd, "rb") as handle:
        data = handle.read(JOB_FILE_MAX + 1)
        if len(data) > JOB_FILE_MAX:
            data += handle.read(JOB_RESULT_MAX + 1 - len(data))
    if len(data) > JOB_RESULT_MAX:
        return True, None, "the job's status file %s is larger than %d bytes" % (results_file, JOB_RESULT_MAX)
    try:
        record = json.loads(data.decode("utf-8", "replace"))
    except ValueError:
        return True, None, "the job's status file %s is not JSON" % results_file
    if not isinstance(record, dict):
        return True, None, "the job's status file %s is not a JSON object" % results_file
    if record.get("started") and not record.get("finished"):
        return False, None, None
    return True, record, None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            seen=dict(type="int", default=0),
            results_file=dict(type="path", required=True),
            wait_s=dict(type="float", default=5.0),
            min_wait_s=dict(type="float", default=0.5),
        ),
        supports_check_mode=True,
    )
    params = module.params
    started = time.monotonic()
    first_new_at = None
    try:
        while True:
            finished, job, job_error = job_state(params["results_file"])
            if finished and job is not None and isinstance(job.get("progress"), list):
                lines = job["progress"]  # the module removed the file; its result has every line
            else:
                lines = read_lines(params["path"])  # after the check: a finished job's last lines come too
            now = time.monotonic()
            if first_new_at is None and len(lines) > params["seen"]:
                first_new_at = now
            if finished or now - started >= params["wait_s"] or (
                    first_new_at is not None and now - started >= params["min_wait_s"] and now - first_new_at >= SETTLE_S):
                break
            time.sleep(POLL_S)
    except OSError as exc:
        module.fail_json(msg="cannot read the probe's progress: %s" % exc)
    extra = {"job_error": job_error} if job_error else {}
    if job is not None:
        try:
            os.unlink(params["results_file"])  # read: nobody needs the job's status any more
        except FileNotFoundError:
            pass
        except OSError as exc:
            module.warn("could not remove the ended job's status file %s: %s" % (params["results_file"], exc))
    module.exit_json(changed=False, lines=lines, finished=finished, job=job, **extra)


if __name__ == "__main__":
    main()
