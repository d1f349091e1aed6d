# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The workload player: Chopper's directory tree and write plans, played on fresh copies of a
pristine image, two run slots at a time (the sweep).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import concurrent.futures
import os

from .base import DIRECTORY, PAYLOAD, ProbeError, ScratchFull, now, syncfs, umount
from .extents import extent_metrics, fiemap
from .loops import Mounted
from .replica import copy_sparse


def tree_path(node):
    """Chopper's directory tree: a complete binary tree, BFS ids, only levels >= 2 created."""
    parts = []
    while node >= 3:
        parts.append("dir.%d" % node)
        node = (node - 1) // 2
    return "/".join(reversed(parts))


TREE = tuple(tree_path(node) for node in range(3, 31))  # made once: play() runs 256 times a sweep


def file_dirs(file_count, span):
    """Files sit at evenly spaced places among dirs 3 .. 2+span (1 file: the last one)."""
    candidates = list(range(3, 3 + span))
    if file_count == 1:
        return [candidates[-1]]
    return [candidates[round(i * (len(candidates) - 1) / (file_count - 1))] for i in range(file_count)]


def write_plan(treatment):
    """The writes of one file, in order: a list of passes, each a list of (offset, length)."""
    chunks, size, density = treatment["ChunkCount"], treatment["FileSize"], treatment["InternalDensity"]
    chunk = size // chunks
    order = treatment["ChunkOrder"]
    if density <= 1:
        solid = int(chunk * density)
        return [[(chunk * i + chunk - solid, solid) for i in order]]
    tail = int(chunk * (density - 1))
    return [[(chunk * i, chunk) for i in order], [(chunk * i + chunk - tail, tail) for i in order]]


def play(mountpoint, treatment, cpus, log=None):
    """Play one treatment; returns the file paths written. Two files are written interleaved,
    chunk by chunk; Fsync and Sync bitmaps apply in write order; a Sync bit closes the file
    and syncs the scratch filesystem (syncfs, not the whole machine). `log`, if a list, gets
    every file operation in order (the tests check them against Chopper's semantics)."""
    record = log.append if log is not None else (lambda op: None)
    # Every file operation is relative to the mount's root, opened once: the mount point's path
    # goes through /proc/<pid>/fd (Scratch.path), which costs a lookup per use.
    root = os.open(mountpoint, DIRECTORY)
    names = [os.path.join(TREE[d - 3], "%d.file" % i)
             for i, d in enumerate(file_dirs(treatment["FileCount"], treatment["DirectorySpan"]))]
    fsync_bits, sync_bits = treatment["Fsync"], treatment["Sync"]
    previous = os.sched_getaffinity(0)
    fds = dict.fromkeys(names)
    try:
        for path in TREE:
            os.mkdir(path, dir_fd=root)
        os.sched_setaffinity(0, cpus[:treatment["CPUCount"]])
        for writes in write_plan(treatment):
            for k, (offset, length) in enumerate(writes):
                for i, name in enumerate(names):
                    if fds[name] is None:
                        fds[name] = os.open(name, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644, dir_fd=root)
                        record(("open", i))
                    os.pwrite(fds[name], PAYLOAD[:length], offset)
                    record(("write", i, offset, length))
                    if fsync_bits[k]:
                        os.fsync(fds[name])
                        record(("fsync", i))
                    if sync_bits[k]:
                        os.close(fds[name])
                        fds[name] = None
                        record(("close", i))
                        syncfs(root)
                        record(("syncfs",))
    finally:
        for fd in fds.values():
            if fd is not None:
                os.close(fd)
        os.sched_setaffinity(0, previous)
        os.close(root)
    return [os.path.join(mountpoint, name) for name in names]


def measure_run(paths, block_size, file_size):
    files = []
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            metrics = extent_metrics(fiemap(fd), block_size)
            metrics.update(name=os.path.basename(path), bytes=os.fstat(fd).st_size)
        finally:
            os.close(fd)
        files.append(metrics)
    return {"dspan": max(f["dspan"] for f in files), "ideal": file_size,
            "extents": sum(f["extents"] for f in files),
            "layout_score": min(f["layout_score"] for f in files), "files": files}


class RunSlots:
    """Two run slots that take turns, set up and torn down by one background thread: while one
    run plays, the previous run is unmounted (umount's journal flush) and the run after the
    playing one gets its fresh copy, loop device and mount. These are a run's largest fixed
    costs, and they touch other filesystems than the one being measured. The thread works in
    submission order, so a slot is set up again only after its last run was released; a run
    whose release failed stops the sweep (its mount would stay under the next)."""

    def __init__(self, scratch, options, helper):
        self.scratch, self.options, self.helper = scratch, options, helper
        self.paths = [(scratch.path("runs", "run%d.img" % k), scratch.path("mnt", "run%d" % k)) for k in (0, 1)]
        self.mounted = [False, False]
        self.stuck = [None, None]  # a release that failed, per slot
        self.pending = [None, None]

    def turn(self, slot, pristine, error=None):
        """Queue: release the slot's last run, then mount a fresh copy of `pristine` there (None:
        nothing). error: why the slot's next run has no image; ready() raises it."""
        self.pending[slot] = self.helper.submit(self._turn, slot, pristine, error)

    def wait(self, slot):
        """Wait for the slot's queued turn; its error, if any, is raised here, in the sweep's thread."""
        pending, self.pending[slot] = self.pending[slot], None
        if pending is not None:
            pending.result()

    def ready(self, slot):
        """The mount point of the slot's run, once it is set up (never a bare directory)."""
        self.wait(slot)
        if not self.mounted[slot]:
            raise ProbeError("run slot %d has no filesystem mounted" % slot)
        return self.paths[slot][1]

    def _turn(self, slot, pristine, error):
        image, target = self.paths[slot]
        if self.stuck[slot] is not None:  # never mount over it; Scratch's cleanup detaches it at the end
            if pristine is None and error is None:
                return
            raise self.stuck[slot]
        if self.mounted[slot]:
            try:
                umount(target)  # the loop device goes with it: autoclear
            except OSError as exc:
                self.stuck[slot] = ProbeError("the run before it could not be released from %s: %s" % (
                    os.path.join(self.scratch.real_path(), "mnt", "run%d" % slot), os.strerror(exc.errno)))
                raise self.stuck[slot]
            self.mounted[slot] = False
            os.unlink(image)
        if error is not None:
            raise error
        if pristine is None:
            return
        try:
            copy_sparse(pristine, image)
            Mounted(image, target, self.options).__enter__()  # the next turn unmounts it
        except OSError as exc:
            exc = self.scratch.full(exc)  # before the run image is freed
            if os.path.exists(image):
                os.unlink(image)
            raise exc
        self.mounted[slot] = True


def sweep(scratch, images, plan, deadline, progress):
    """Every treatment of the plan on a fresh sparse copy of its pristine image (RunSlots: the
    copies are made, mounted and released in the background). The pristine images are got in
    this thread, so building one (a cold cache) never overlaps a run and its time stays out of
    runs_seconds."""
    cpus = sorted(os.sched_getaffinity(0))
    runs, errors, stopped_by = [], [], None
    started = now()
    treatments = plan["treatments"]

    def queue(slot, number):
        """Queue the set-up of the plan's run `number` (1-based; past the end: a release only)."""
        if number > len(treatments):
            return slots.turn(slot, None)
        treatment = treatments[number - 1]
        try:
            pristine = images.get(treatment["DiskSize"], treatment["UsedRatio"], treatment["FreeSpaceLayout"])
        except (OSError, ProbeError) as exc:
            return slots.turn(slot, None, error=exc)
        return slots.turn(slot, pristine)

    with concurrent.futures.ThreadPoolExecutor(1) as helper:
        slots = RunSlots(scratch, images.options, helper)
        try:
            queue(1, 1)
            queue(0, 2)
            for number, treatment in enumerate(treatments, 1):
                slot = number % 2
                if now() > deadline:
                    stopped_by = "time budget"
                    break
                try:
                    try:
                        paths = play(slots.ready(slot), treatment, cpus)
                        result = measure_run(paths, images.mkfs["block_size"], treatment["FileSize"])
                    finally:
                        queue(slot, number + 2)
                    result["id"] = treatment["id"]
                    runs.append(result)
                except (OSError, ProbeError) as exc:
                    exc = scratch.full(exc)
                    errors.append("treatment %s: %s" % (treatment["id"], exc))
                    if isinstance(exc, ProbeError) or len(errors) >= 5:
                        stopped_by = exc.what if isinstance(exc, ScratchFull) else "error"
                        break
                if number % 32 == 0 or number == len(treatments):
                    progress("sweep %d/%d runs, %.1f s" % (number, len(treatments), now() - started))
        finally:
            for slot in (0, 1):  # whatever is queued or still mounted, released before the slots go
                try:
                    slots.wait(slot)
                except (OSError, ProbeError):
                    pass  # a set-up no run used: its error was the sweep's, or it never played
                slots.turn(slot, None)
                try:
                    slots.wait(slot)
                except (OSError, ProbeError) as exc:
                    errors.append("cleanup of the last runs: %s" % exc)
                    stopped_by = stopped_by or "error"
    return {"planned": len(treatments), "completed": len(runs), "stopped_by": stopped_by,
            "images_built": images.built, "images_reused": images.reused, "cache_rejected": images.rejected,
            "images_seconds": round(images.seconds, 3),
            "runs_seconds": round(now() - started - images.seconds, 3), "layouts": images.layouts,
            "runs": runs, "errors": errors}
