# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The probe's job and its command line, as ext4_probe_run starts it from its payload:

    python3 -I -S -B ext4_probe.pyz run JOB.json OUT.json     run a job (plan + filesystem facts), write results
    python3 -I -S -B ext4_probe.pyz sweep-stale SCRATCH_DIR   remove what a killed run left behind, then exit

Exit codes: 0 ok or partial, 1 error, 2 the job cannot be read, 3 stopped by a signal,
4 refused (the scratch path is not the probe's own, or another probe holds it); OUT.json says
which and why for 0, 1 and 4. A program of its own, not an Ansible module: it writes its own
stdout and stderr, which ext4_probe_run reads, and main() returns its exit code.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import json
import os
import signal
import sys
import tempfile
import time

from ..ext4_parsers.common import CONFIRM_SCOPES, PROBE_RESULT_SCHEMA
from .allocator import Allocator
from .base import Interrupted, MiB, ProbeError, Refused, now, private_mounts
from .confirmations import Confirmations, mkdir_existing_latency
from .image_cache import Images
from .loops import mountable_options
from .player import sweep
from .replica import NOT_REPLAYED, copy_sparse, mkfs_argv, replica
from .scratch_dir import Scratch


RESULT_SCHEMA = PROBE_RESULT_SCHEMA
JOB_SCHEMA = "ext4-fleet-audit/probe-job/v1"
EXIT_CODES = {"ok": 0, "partial": 0, "error": 1, "refused": 4}  # by result status; 2: bad job, 3: signal
REFUSED_EXIT = EXIT_CODES["refused"]


def load_job(path):
    with open(path, encoding="utf-8") as handle:
        job = json.load(handle)
    if not isinstance(job, dict) or job.get("schema") != JOB_SCHEMA:
        raise ProbeError("%s is not a %s document" % (path, JOB_SCHEMA))
    if not isinstance(job.get("filesystem"), dict) or "mountpoint" not in job["filesystem"]:
        raise ProbeError("the job names no filesystem to replicate")
    job.setdefault("confirm_scope", "all")  # a job of an older controller: every confirmation it lists ran
    if job["confirm_scope"] not in CONFIRM_SCOPES:
        raise ProbeError("the job's confirm_scope is %s, not one of %s"
                         % (json.dumps(job["confirm_scope"]), ", ".join(CONFIRM_SCOPES)))
    return job


def probe_with(result, scratch, images, job, mkfs, options, adjustments, started, progress):
    """The replica's mount options (those this kernel takes, tried on a copy so the cached image
    stays as built), the sweep and the confirmation probes, into the result as they are done."""
    check_image = scratch.path("runs", "check.img")
    copy_sparse(images.get(256 * MiB, 0, 6), check_image)
    try:
        options, dropped = mountable_options(check_image, scratch.path("mnt", "check"), options)
    finally:
        os.unlink(check_image)
    images.options = options
    if dropped:
        adjustments.append("options this kernel refused on the scratch mount: " + ",".join(dropped))
    result["replica"] = {"mkfs_args": mkfs_argv(mkfs, 256 * MiB, "IMAGE")[:-2],
                         "mount_options": ",".join(options), "adjustments": adjustments}
    if job.get("plan"):
        result["sweep"] = sweep(scratch, images, job["plan"], started + float(job.get("sweep_budget_s", 30)), progress)
    if job.get("allocator"):
        deadline = now() + float(job.get("allocator_budget_s", 20))
        result["allocator"] = Allocator(scratch, images, deadline).run(progress)
    else:
        result["allocator"] = {"status": "skipped", "reason": "not asked for (the job's allocator is false)",
                               "issues": []}
    confirm_deadline = now() + float(job.get("confirm_budget_s", 30))
    confirmations = Confirmations(scratch, images, job.get("netfs") or [], int(job.get("repetitions", 5)),
                                  confirm_deadline, job["confirm_scope"], job["filesystem"]["mountpoint"],
                                  bool(job.get("mount_options")))
    result["confirmations"] = confirmations.run(job.get("confirmations") or [], progress)


def run_job(job, progress):
    started_wall, started = time.time(), now()
    result = {"schema": RESULT_SCHEMA, "status": "error", "reason": None, "kernel": os.uname().release,
              "started_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(started_wall)),
              "duration_s": None, "mountpoint": job["filesystem"]["mountpoint"], "replica": None,
              "released_stale": [], "sweep": None, "allocator": None, "confirmations": [], "resources": None}
    cap = int(job.get("scratch_cap_bytes", 128 * MiB))
    scratch = Scratch(job.get("scratch_dir", "/dev/shm/ext4-audit-probe"), cap, bool(job.get("keep_cache")),
                      float(job.get("lock_wait_s", 0)))
    try:
        # First: mount(2) refuses a target reached through a descriptor opened in another mount
        # namespace, so the scratch directory is opened (Scratch) in the private one. What an older
        # version's killed probe left mounted in the host's namespace is released there by sweep-stale.
        private_mounts()
        with scratch:
            result["released_stale"] = scratch.released
            mkfs, options, adjustments = replica(job["filesystem"])
            if job.get("mount_options"):  # a named option set to compare, instead of the host's
                options = [o for o in job["mount_options"] if o.split("=")[0] not in NOT_REPLAYED]
                adjustments.append("mount options given by the job, not the host's: " + ",".join(options))
            smallest_disk = min([t["DiskSize"] for t in (job.get("plan") or {}).get("treatments", [])] or [256 * MiB])
            if (mkfs.get("journal_bytes") or 0) > smallest_disk // 8:
                adjustments.append("journal of %d MiB capped at an eighth of each scratch disk (%d MiB on the "
                                   "smallest)" % (mkfs["journal_bytes"] // MiB, smallest_disk // 8 // MiB))
            options = options + ["noinit_itable"]  # no background zeroing of the scratch inode tables
            images = Images(scratch, mkfs, options)
            try:
                probe_with(result, scratch, images, job, mkfs, options, adjustments, started, progress)
                if scratch.keep_cache:
                    images.prune()
            finally:
                images.close()
            scratch.used()
        sweep_done = result["sweep"] is None or result["sweep"]["stopped_by"] is None
        result["status"] = "ok" if sweep_done else "partial"
        if not sweep_done:
            sweep_result = result["sweep"]
            result["reason"] = "sweep stopped by %s after %d of %d runs (%d missing)" % (
                sweep_result["stopped_by"], sweep_result["completed"], sweep_result["planned"],
                sweep_result["planned"] - sweep_result["completed"])
    except Refused as exc:
        result.update(status="refused", reason=str(exc))
    except ProbeError as exc:
        result["reason"] = str(exc)
    except OSError as exc:
        result["reason"] = "%s (%s)" % (exc, type(exc).__name__)
    result["duration_s"] = round(now() - started, 3)
    result["resources"] = {"peak_rss_bytes": peak_rss(),
                           "scratch_peak_bytes": scratch.peak}
    return result


def peak_rss():
    """This process's own high-water RSS (VmHWM). getrusage's ru_maxrss would carry over the
    parent's peak through fork and exec."""
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) * 1024
    return None


def write_json_atomic(path, doc):
    folder = os.path.dirname(os.path.abspath(path))
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".probe-")
    with os.fdopen(handle, "w") as out:
        # dumps, not dump: json.dump streams through the pure-Python encoder, dumps uses the C one
        out.write(json.dumps(doc, sort_keys=True, separators=(",", ":")))
    os.replace(tmp, path)


class Progress:
    """Progress lines to stderr and, when the job names a file, appended to it line by line: the
    playbook reads that file while the probe runs (Ansible returns an async job's stderr only at
    its end). The file is in the playbook's own private temporary directory, beside job.json."""

    def __init__(self, path):
        self.fd = None if not path else os.open(
            path, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)

    def __call__(self, text):
        line = "ext4_probe: " + text
        sys.stderr.write(line + "\n")
        sys.stderr.flush()
        if self.fd is not None:
            os.write(self.fd, (line + "\n").encode("utf-8", "replace"))


def _interrupt(signum, _frame):
    raise Interrupted("signal %d" % signum)


def main(argv):
    if len(argv) == 3 and argv[0] == "run":
        for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
            signal.signal(sig, _interrupt)
        try:
            job = load_job(argv[1])
        except (OSError, ValueError, ProbeError) as exc:
            sys.stderr.write("ext4_probe: cannot read the job: %s\n" % exc)
            return 2
        progress = Progress(job.get("progress_file"))
        try:
            result = run_job(job, progress)
        except Interrupted as exc:
            progress("stopped by %s; scratch cleaned up" % exc)
            return 3
        write_json_atomic(argv[2], result)
        progress("%s in %.1f s" % (result["status"], float(result["duration_s"])))  # set by run_job
        return EXIT_CODES[result["status"]]
    if len(argv) == 2 and argv[0] == "sweep-stale":
        try:
            with Scratch(argv[1], 0):
                pass
        except Refused as exc:
            sys.stderr.write("ext4_probe: refused: %s\n" % exc)
            return REFUSED_EXIT
        return 0
    if len(argv) == 2 and argv[0] == "mkdir-latency":
        sys.stdout.write("%s\n" % mkdir_existing_latency(argv[1]))
        return 0
    sys.stderr.write(__doc__ + "\n")
    return 2
