# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Chopper's four allocator issues: each one's trigger against a control, with a sign test.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import math
import os

from .base import DIRECTORY, KiB, MiB, PAYLOAD, ProbeError, now, syncfs
from .extents import extent_metrics, fiemap
from .loops import Mounted
from .replica import copy_sparse


# He et al. (FAST '15, section 5) traced ext4's layout tail on 3.12 to four allocator policies. Each
# experiment below plays a workload that meets the policy's trigger, and the same workload with
# only the trigger taken away, on fresh copies of one pristine image (the same 256 MiB, unfragmented
# image every run uses), trigger and control alternating which goes first. The measure is Chopper's:
# the largest d-span (FIEMAP) among the files the policy places. Every write is flushed at once
# (fsync), so each chunk is one allocation request made in the writer's own thread, on its CPU, at
# the moment the workload chooses: the policies act per request, and a flush makes the request.
#
# Operations are tuples, the player's own log vocabulary (play): ("open", f), ("write", f, offset,
# length), ("fsync", f), ("close", f), ("syncfs",), plus ("cpu", k): run on the k-th allowed CPU.
ALLOCATOR_ISSUES = (("scheduler_dependency", "Scheduler Dependency"), ("special_end", "Special End"),
                    ("shared_global", "Shared Global"), ("normalization", "Normalization"))
ALLOCATOR_PAIRS = 12       # trigger/control pairs per issue
ALLOCATOR_MIN_PAIRS = 8    # fewer, and no effect is not evidence of absence
ALLOCATOR_ALPHA = 0.05
ALLOCATOR_MIN_RATIO = 1.2  # p90 d-span, trigger over control: smaller is not a layout problem
ALLOCATOR_TEST = "exact one-sided sign test (trigger d-span > control), ties dropped"


def flushed_writes(f, chunks, cpus=None):
    """Each (offset, length) written and flushed; cpus[i]: the CPU the i-th chunk runs on."""
    ops = []
    for i, (offset, length) in enumerate(chunks):
        if cpus is not None:
            ops.append(("cpu", cpus[i]))
        ops += [("write", f, offset, length), ("fsync", f)]
    return ops


def scheduler_dependency_ops(trigger):
    """Four small files (32 KiB, under mb_stream_req's 64 KiB), each written in four flushed 8 KiB
    chunks. Small files are placed in the preallocation of the flushing CPU's locality group: on
    one CPU the chunks of a file sit side by side; flushed from alternating CPUs they go to two
    preallocations (2 MiB each by default), so a file's d-span spans the distance between them."""
    ops = []
    for f in range(4):
        chunks = [(8 * KiB * i, 8 * KiB) for i in range(4)]
        ops += [("open", f)] + flushed_writes(f, chunks, [i % 2 if trigger else 0 for i in range(4)]) + [("close", f)]
    return ops + [("syncfs",)], [0, 1, 2, 3]


def special_end_ops(trigger):
    """A 256 KiB file: three 64 KiB chunks flushed while open, then closed, synced and reopened,
    and its last chunk written at the end of the file. Trigger: the file is closed before that
    chunk is flushed, so the last extent is allocated for a closed file at its end (the three
    conditions: no preallocation for it, unlike the rest of the file). Control: the last chunk is
    flushed before the close, while the file is open. The d-span shows where the last extent went."""
    chunk = 64 * KiB
    ops = [("open", 0)] + flushed_writes(0, [(chunk * i, chunk) for i in range(3)])
    ops += [("close", 0), ("syncfs",), ("open", 0), ("write", 0, 3 * chunk, chunk)]
    ops += ([] if trigger else [("fsync", 0)]) + [("close", 0), ("syncfs",)]
    return ops, [0]


def shared_global_ops(trigger):
    """A file that grows from small to large (four flushed 32 KiB chunks: 32 KiB is a small file,
    from 96 KiB on a large one). Once large, its next extent's goal is the group of the last large
    allocation anywhere in the filesystem. Trigger: another file gets 1 MiB written and flushed
    before each of its chunks, so that last large allocation is elsewhere; control: the growing file
    alone (the same operations without the other file's). Only the growing file is measured."""
    chunk, ops = 32 * KiB, [("open", 0)]
    if trigger:
        ops.append(("open", 1))
    for i in range(4):
        if trigger:
            ops += flushed_writes(1, [(MiB * i, MiB)])
        ops += flushed_writes(0, [(chunk * i, chunk)])
    ops += [("close", 0)] + ([("close", 1)] if trigger else [])
    return ops + [("syncfs",)], [0]


def normalization_ops(trigger):
    """A large sparse file: four 256 KiB chunks, each holding 128 KiB of data, written in the
    paper's order 3-0-1-2 and flushed one by one. Normalization widens a request to an aligned
    window; the paper's bug moved its logical start back without moving the physical goal, so the
    request no longer fits next to the file's other extents and a distant search follows. Trigger:
    the data sits at the end of each chunk (Chopper's layout), so each request starts inside the
    window and normalization moves its start. Control: the same bytes at the start of each chunk,
    where the request is already aligned and the start stays. Same lengths, same order."""
    chunk, data = 256 * KiB, 128 * KiB
    chunks = [(chunk * i + (chunk - data if trigger else 0), data) for i in (3, 0, 1, 2)]
    return [("open", 0)] + flushed_writes(0, chunks) + [("close", 0), ("syncfs",)], [0]


ALLOCATOR_WORKLOADS = {"scheduler_dependency": scheduler_dependency_ops, "special_end": special_end_ops,
                       "shared_global": shared_global_ops, "normalization": normalization_ops}


def play_ops(mountpoint, ops, cpus):
    """Play operations on files 0.file, 1.file, ... at the mount's root; returns the paths.
    It starts on the first allowed CPU: a workload left to migrate between CPUs would meet the
    Scheduler Dependency in every experiment (seen on 6.12: scattered control runs)."""
    root = os.open(mountpoint, DIRECTORY)
    previous = os.sched_getaffinity(0)
    fds = {}
    try:
        os.sched_setaffinity(0, [cpus[0]])
        for op in ops:
            kind, f = op[0], op[1] if len(op) > 1 else None
            if kind == "open":
                fds[f] = os.open("%d.file" % f, os.O_CREAT | os.O_RDWR | os.O_CLOEXEC, 0o644, dir_fd=root)
            elif kind == "write":
                os.pwrite(fds[f], PAYLOAD[:op[3]], op[2])
            elif kind == "fsync":
                os.fsync(fds[f])
            elif kind == "close":
                os.close(fds.pop(f))
            elif kind == "syncfs":
                syncfs(root)
            elif kind == "cpu":
                os.sched_setaffinity(0, [cpus[f]])
            else:
                raise ProbeError("unknown workload operation %r" % (op,))
    finally:
        for fd in fds.values():
            os.close(fd)
        os.sched_setaffinity(0, previous)
        os.close(root)
    names = sorted(set(op[1] for op in ops if op[0] == "open"))
    return [os.path.join(mountpoint, "%d.file" % f) for f in names]


def largest_dspan(paths, block_size):
    spans = []
    for path in paths:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        try:
            spans.append(extent_metrics(fiemap(fd), block_size)["dspan"])
        finally:
            os.close(fd)
    return max(spans)


def sign_test(trigger, control):
    """One-sided exact sign test that trigger values exceed their paired control values: the
    binomial tail P(X >= wins) for X ~ Bin(n, 1/2), n the pairs that differ (ties dropped)."""
    wins = sum(1 for t, c in zip(trigger, control) if t > c)
    n = wins + sum(1 for t, c in zip(trigger, control) if t < c)
    if n == 0:
        return 1.0
    return sum(math.comb(n, k) for k in range(wins, n + 1)) / 2.0 ** n


def quantile(values, q):
    """Linear interpolation between order statistics (R's type 7, the controller's numpy default)."""
    ordered = sorted(values)
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def allocator_effect(trigger, control):
    """Ratios of the d-span quantiles (trigger over control) and each side's tail share: the share
    of its runs at or above the p90 of both sides' runs together (Chopper's tail)."""
    if not trigger:
        return {"dspan_p50_ratio": None, "dspan_p90_ratio": None, "tail_share_trigger": None,
                "tail_share_control": None}
    effect = {}
    for name, q in (("dspan_p50_ratio", 0.5), ("dspan_p90_ratio", 0.9)):
        below = quantile(control, q)
        effect[name] = round(quantile(trigger, q) / below, 4) if below else None
    threshold = quantile(trigger + control, 0.9)
    for side, values in (("trigger", trigger), ("control", control)):
        effect["tail_share_" + side] = round(sum(1 for v in values if v >= threshold) / len(values), 4)
    return effect


def allocator_verdict(pairs, p_value, p90_ratio):
    """present: the trigger makes the d-span larger (p < ALLOCATOR_ALPHA) by a margin that matters
    (p90 ratio >= ALLOCATOR_MIN_RATIO); absent: no significant difference over at least
    ALLOCATOR_MIN_PAIRS pairs; anything else is inconclusive. Returns (verdict, reason)."""
    if pairs < ALLOCATOR_MIN_PAIRS:
        return "inconclusive", "%d pairs measured, %d needed" % (pairs, ALLOCATOR_MIN_PAIRS)
    if p_value >= ALLOCATOR_ALPHA:
        return "absent", None
    if p90_ratio is not None and p90_ratio >= ALLOCATOR_MIN_RATIO:
        return "present", None
    return "inconclusive", "the trigger's d-spans are larger (p %.3g) but the p90 ratio %s is under %g" % (
        p_value, "n/a" if p90_ratio is None else "%.3g" % p90_ratio, ALLOCATOR_MIN_RATIO)


class Allocator:
    """The four experiments, within a deadline; each issue's outcome is measured or says why not."""

    DISK = 256 * MiB  # the image the mount check already uses: no extra build

    def __init__(self, scratch, images, deadline, pairs=ALLOCATOR_PAIRS):
        self.scratch, self.images, self.deadline, self.pairs = scratch, images, deadline, pairs
        self.cpus = sorted(os.sched_getaffinity(0))

    def issue(self, issue_id, name):
        entry = {"id": issue_id, "name": name, "verdict": "inconclusive", "reason": None, "pairs": 0,
                 "effect": allocator_effect([], []), "p_value": None, "test": ALLOCATOR_TEST}
        if issue_id == "scheduler_dependency" and len(self.cpus) < 2:
            entry["reason"] = "one CPU: cannot be measured"
            return entry
        samples = {True: [], False: []}
        run_image = self.scratch.path("runs", "allocator.img")
        for number in range(self.pairs):
            if now() > self.deadline:
                entry["reason"] = "time budget reached after %d pairs" % number
                break
            for trigger in ((True, False) if number % 2 == 0 else (False, True)):
                ops, measured = ALLOCATOR_WORKLOADS[issue_id](trigger)
                copy_sparse(self.images.get(self.DISK, 0, 6), run_image)
                try:
                    self.scratch.check_cap()
                    with Mounted(run_image, self.scratch.path("mnt", "allocator"), self.images.options) as mnt:
                        paths = play_ops(mnt.target, ops, self.cpus)
                        samples[trigger].append(largest_dspan([paths[i] for i in measured],
                                                              self.images.mkfs["block_size"]))
                finally:
                    os.unlink(run_image)
            entry["pairs"] += 1
        trigger, control = samples[True], samples[False]
        entry["effect"] = allocator_effect(trigger, control)
        if entry["pairs"]:
            entry["p_value"] = round(sign_test(trigger, control), 6)
        verdict, reason = allocator_verdict(entry["pairs"], entry["p_value"], entry["effect"]["dspan_p90_ratio"])
        entry["verdict"], entry["reason"] = verdict, entry["reason"] or reason
        return entry

    def run(self, progress):
        """The `allocator` section: status ran, or error (with the reason) when an experiment
        could not be run; an issue not measured is inconclusive with its reason, never absent."""
        section = {"status": "ran", "reason": None, "issues": []}
        for issue_id, name in ALLOCATOR_ISSUES:
            try:
                entry = self.issue(issue_id, name)
            except (OSError, ProbeError) as exc:
                why = "%s: %s" % (name, self.scratch.full(exc))
                section.update(status="error", reason="; ".join(filter(None, [section["reason"], why])))
                entry = {"id": issue_id, "name": name, "verdict": "inconclusive", "reason": "error: %s" % why,
                         "pairs": 0, "effect": allocator_effect([], []), "p_value": None, "test": ALLOCATOR_TEST}
            section["issues"].append(entry)
            tested = "" if entry["p_value"] is None else ", p %.3g" % entry["p_value"]
            progress("allocator %s: %s (%d pairs%s)" % (issue_id, entry["verdict"], entry["pairs"], tested))
        return section
