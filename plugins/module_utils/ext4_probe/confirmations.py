# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Confirmation probes: the host's risky option set against the safe alternative, on the same kernel.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import subprocess
import sys
import time
from typing import TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Optional, Sequence, Tuple

from ..ext4_parsers.common import CONFIRMATION_PROBES
from ..ext4_parsers.mounts import NEGATIONS, mount_option_map
from .base import MiB, PAYLOAD, ProbeError, now
from .loops import Mounted
from .replica import copy_sparse

if TYPE_CHECKING:
    from .image_cache import Images
    from .scratch_dir import Scratch

Entry = Dict[str, Any]  # a confirmation's result (Confirmations.entry's keys)


def with_options(options: Iterable[str], add: Iterable[str], drop: Iterable[str] = ()) -> List[str]:
    """The host's options with `add` forced on and the opposite spellings (and `drop`) removed."""
    def name(option: str) -> str:
        return NEGATIONS.get(option, option).split("=")[0]
    names = set(name(o) for o in add) | set(drop)
    kept = [o for o in options if name(o) not in names]
    return kept + list(add)


def percentile(values: Iterable[float], q: float) -> Optional[float]:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))] if ordered else None


def timed(func: Callable[..., Any], *args: Any) -> float:
    start = time.perf_counter()
    func(*args)
    return time.perf_counter() - start


def rename_workload(mnt: str, size: int = 4 * MiB, iterations: int = 12) -> Optional[float]:
    """Seed 000: write a file, then rename a freshly written one over it; the rename's latency."""
    latencies = []  # type: List[float]
    for i in range(iterations):
        for name in ("victim", "new"):
            with open(os.path.join(mnt, name), "wb") as handle:
                for _unused in range(size // MiB):
                    handle.write(PAYLOAD)
        latencies.append(timed(os.rename, os.path.join(mnt, "new"), os.path.join(mnt, "victim")))
    return percentile(latencies, 0.5)


def writeback_workload(mnt: str, size: int = 16 * MiB) -> float:
    """Seed 001: buffered writes, then one fsync; the whole time (cost of the write-back)."""
    start = time.perf_counter()
    fd = os.open(os.path.join(mnt, "bulk"), os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644)
    try:
        for _unused in range(size // MiB):
            os.write(fd, PAYLOAD)
        os.fsync(fd)
    finally:
        os.close(fd)
    return time.perf_counter() - start


def xattr_workload(mnt: str, files: int = 1500) -> Dict[str, Optional[float]]:
    """Seed 003: two 64-byte user xattrs per file; p99 and p50 of setxattr latency."""
    latencies = []  # type: List[float]
    value = b"x" * 64
    for i in range(files):
        path = os.path.join(mnt, "x%d" % i)
        os.close(os.open(path, os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o644))
        for name in (b"user.probe.a", b"user.probe.b"):
            latencies.append(timed(os.setxattr, path, name, value))
    return {"p50": percentile(latencies, 0.5), "p99": percentile(latencies, 0.99)}


def existing_entry(mountpoint: str) -> str:
    """A path that exists inside the mount (a directory if there is one). Not the mount point
    itself: mkdir on that is answered by the parent filesystem and never reaches the network."""
    with os.scandir(mountpoint) as entries:
        names = sorted((not e.is_dir(follow_symlinks=False), e.name) for e in entries)
    if not names:
        raise ProbeError("%s is empty: there is no existing path to mkdir without creating one" % mountpoint)
    return os.path.join(mountpoint, names[0][1])


def mkdir_existing_latency(path: str, iterations: int = 200) -> Optional[float]:
    """Seed 002: mkdir on a path that exists: EEXIST, never a change."""
    latencies = []  # type: List[float]
    for _unused in range(iterations):
        start = time.perf_counter()
        try:
            os.mkdir(path)
        except FileExistsError:
            pass
        else:  # cannot happen for an existing path; undo at once if a race made it
            os.rmdir(path)
            raise ProbeError("mkdir created %s: the path did not exist" % path)
        latencies.append(time.perf_counter() - start)
    return percentile(latencies, 0.5)


def mkdir_latency_child(path: str) -> float:
    # as the probe itself is started (ext4_probe_run): isolated, no site-packages, no bytecode beside
    # it; sys.argv[0] is the payload this process runs (job.main's mkdir-latency answers)
    # the probe runs as a program of its own on the host: no module there, no run_command
    # pylint: disable-next=ansible-bad-function
    out = subprocess.run([sys.executable, "-I", "-S", "-B", os.path.abspath(sys.argv[0]), "mkdir-latency", path],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30, universal_newlines=True, check=False)
    if out.returncode != 0:
        raise ProbeError("mkdir timing on %s failed: %s" % (path, out.stderr.strip()[-300:]))
    return float(out.stdout)


def paired(risky_samples: Sequence[float], safe_samples: Sequence[float]) -> Tuple[Optional[float], Optional[List[float]]]:
    ratios = [r / s for r, s in zip(risky_samples, safe_samples) if s]
    if not ratios:
        return None, None
    return round(percentile(ratios, 0.5), 4), [round(min(ratios), 4), round(max(ratios), 4)]  # type: ignore[arg-type]  # ratios is not empty


class Confirmations:
    """Each probe compares the host's risky option set with the safe alternative: same kernel,
    same workload, fresh scratch filesystems, repetitions alternating risky and safe."""

    DISK = 4 << 30  # sparse; room for the 1 GiB journal of the xattr probe's safe side
    PROBES = CONFIRMATION_PROBES
    SEEDS = {"rename_over_existing": "000", "buffered_write_fsync": "001", "netfs_mkdir_existing": "002",
             "xattr_set": "003"}
    # The options each probe's risky side mounts on top of the replica's; its safe side changes one
    # of them. The scope `own` runs a probe only where the replica already has all of them in effect.
    # None for the other two: xattr_set's risky side is the host's own journal and inode size, and
    # netfs_mkdir_existing times the host's own network mounts.
    RISKY_OPTIONS = {"rename_over_existing": ("data=ordered", "delalloc", "auto_da_alloc"),
                     "buffered_write_fsync": ("dioread_nolock", "nodelalloc")}

    def __init__(self, scratch: "Scratch", images: "Images", netfs: List[Dict[str, Any]], repetitions: int,
                 deadline: float, scope: str = "all", mountpoint: Optional[str] = None,
                 named_options: bool = False) -> None:
        """scope: one of CONFIRM_SCOPES; mountpoint: the filesystem replicated; named_options: the
        replica mounts the job's option set, not the host's (both for a skipped entry's reason)."""
        self.scratch, self.images = scratch, images
        self.netfs, self.repetitions, self.deadline = netfs, repetitions, deadline
        self.scope = scope
        # whose options the replica mounts, in words
        self.configuration = "the job's option set" if named_options else "your configuration"
        self.replica = "the replica of %s%s" % (mountpoint, " with the job's mount options" if named_options else "")
        self.options = images.options

    def entry(self, probe_id: str, metric: str, risky_label: str, risky_options: List[str], safe_label: str,
              safe_options: List[str]) -> Entry:
        return {"id": probe_id, "seed": self.SEEDS[probe_id], "status": "measured", "reason": None, "metric": metric,
                "unit": "s", "mountpoint": None, "repetitions": 0, "ratio": None, "ratio_spread": None,
                "risky": {"label": risky_label, "options": ",".join(risky_options), "samples": []},
                "safe": {"label": safe_label, "options": ",".join(safe_options), "samples": []}}

    def skipped(self, probe_id: str, reason: str) -> Entry:
        """A probe that measured nothing, with the keys of a measured entry."""
        return {"id": probe_id, "seed": self.SEEDS[probe_id], "status": "skipped", "reason": reason, "metric": None,
                "unit": "s", "mountpoint": None, "repetitions": 0, "ratio": None, "ratio_spread": None,
                "risky": None, "safe": None}

    def risky_options(self, probe_id: str) -> List[str]:
        return with_options(self.options, self.RISKY_OPTIONS[probe_id])

    def not_in_effect(self, probe_id: str) -> List[str]:
        """The options probe_id's risky side adds that the replica does not have in effect
        (compared as the kernel reads them: nodelalloc is delalloc off); [] for its own configuration."""
        in_effect = mount_option_map(self.options)
        return [option for option in self.RISKY_OPTIONS.get(probe_id, ())
                if any(in_effect.get(name) != value
                       for name, value in mount_option_map([option]).items())]

    def compare(self, entry: Entry, risky: Tuple[Dict[str, Any], List[str]], safe: Tuple[Dict[str, Any], List[str]],
                workload: Callable[[str], Any], pick: Callable[[Any], float] = lambda v: v) -> Entry:
        """risky/safe: (mkfs dict, options); each repetition measures both on fresh copies."""
        raw = {"risky": [], "safe": []}  # type: Dict[str, List[Any]]
        run_image = self.scratch.path("runs", "confirm.img")
        try:
            for _unused in range(self.repetitions):
                if now() > self.deadline:
                    entry["reason"] = "time budget reached after %d repetitions" % entry["repetitions"]
                    break
                for side, (mkfs, options) in (("risky", risky), ("safe", safe)):
                    copy_sparse(self.images.get(self.DISK, 0, 6, mkfs), run_image)
                    try:
                        with Mounted(run_image, self.scratch.path("mnt", "confirm"), options) as mnt:
                            value = workload(mnt.target)
                    finally:
                        os.unlink(run_image)
                    raw[side].append(value)
                    entry[side]["samples"].append(round(pick(value), 9))
                entry["repetitions"] += 1
        except (OSError, ProbeError) as exc:
            entry.update(status="error", reason=str(self.scratch.full(exc)))
            return entry
        if not entry["repetitions"]:
            entry["status"] = "skipped"
            return entry
        entry["ratio"], entry["ratio_spread"] = paired(entry["risky"]["samples"], entry["safe"]["samples"])
        if isinstance(raw["risky"][0], dict):  # several percentiles: a ratio for each
            entry["ratios"] = dict((q, paired([v[q] for v in raw["risky"]], [v[q] for v in raw["safe"]])[0])
                                   for q in raw["risky"][0])
        return entry

    def journalled(self, entry: Entry) -> Dict[str, Any]:
        """The replica's mkfs settings, with a journal if it has none (data= needs one)."""
        mkfs = dict(self.images.mkfs)
        if not mkfs.get("journal_bytes"):
            mkfs["journal_bytes"] = 64 * MiB
            mkfs["features"] = [f for f in mkfs.get("features", []) if f != "^has_journal"]
            entry["replica_note"] = "the host's filesystem has no journal; the replica got a 64 MiB one"
        return mkfs

    def rename_over_existing(self) -> Entry:
        risky = self.risky_options("rename_over_existing")
        safe = with_options(risky, ["noauto_da_alloc"])
        entry = self.entry("rename_over_existing", "rename(2) over a freshly written file, p50",
                           "auto_da_alloc", risky, "noauto_da_alloc", safe)
        mkfs = self.journalled(entry)
        return self.compare(entry, (mkfs, risky), (mkfs, safe), rename_workload)

    def buffered_write_fsync(self) -> Entry:
        changed = self.RISKY_OPTIONS["buffered_write_fsync"]
        risky = self.risky_options("buffered_write_fsync")
        safe = with_options(risky, ["delalloc"])
        entry = self.entry("buffered_write_fsync", "16 MiB buffered write + fsync", ",".join(changed), risky,
                           ",".join(with_options(changed, ["delalloc"])), safe)
        mkfs = self.journalled(entry)
        return self.compare(entry, (mkfs, risky), (mkfs, safe), writeback_workload)

    def xattr_set(self) -> Entry:
        host = dict(self.images.mkfs)
        safe = dict(host, journal_bytes=1 << 30, inode_size=256)
        label = "journal %s, inode %s" % (
            "%d MiB" % (host["journal_bytes"] // MiB) if host.get("journal_bytes") else "none",
            host.get("inode_size") or "mke2fs default")
        entry = self.entry("xattr_set", "setxattr latency, p99", label, self.options,
                           "journal 1024 MiB, inode 256", self.options)
        return self.compare(entry, (host, self.options), (safe, self.options), xattr_workload,
                            pick=lambda v: v["p99"])

    def netfs_mkdir_existing(self) -> List[Entry]:
        """One entry per network mount. The timing runs in a child process with a timeout,
        so a hung server cannot hang the probe; the local side is a scratch ext4 mount."""
        entries = []  # type: List[Entry]
        run_image = self.scratch.path("runs", "confirm.img")
        for netfs in self.netfs:
            path = netfs["mountpoint"]
            entry = self.entry("netfs_mkdir_existing", "mkdir(2) on an existing path, p50",
                               netfs.get("fstype") or "network filesystem", [], "local ext4", self.options)
            entry["mountpoint"] = path
            try:  # a full scratch is this entry's error, not the whole probe's
                copy_sparse(self.images.get(self.DISK, 0, 6), run_image)
                remote = existing_entry(path)
                with Mounted(run_image, self.scratch.path("mnt", "confirm"), self.options) as mnt:
                    local = os.path.join(mnt.target, "existing")
                    os.mkdir(local)
                    for _unused in range(self.repetitions):
                        if now() > self.deadline:
                            entry["reason"] = "time budget reached after %d repetitions" % entry["repetitions"]
                            break
                        for side, where in (("risky", remote), ("safe", local)):
                            entry[side]["samples"].append(mkdir_latency_child(where))
                        entry["repetitions"] += 1
                entry["ratio"], entry["ratio_spread"] = paired(entry["risky"]["samples"], entry["safe"]["samples"])
            except subprocess.TimeoutExpired:
                entry.update(status="error", reason="mkdir on %s did not answer within 30 s" % path)
            except (OSError, ProbeError) as exc:
                entry.update(status="error", reason=str(self.scratch.full(exc)))
            finally:
                if os.path.exists(run_image):
                    os.unlink(run_image)
            entries.append(entry)
        if not entries:
            entries.append(self.skipped("netfs_mkdir_existing", "no network filesystem is mounted on this host"))
        return entries

    def run(self, wanted: Iterable[str], progress: Callable[[str], None]) -> List[Entry]:
        results = []  # type: List[Entry]
        for probe_id in wanted:
            if probe_id not in self.PROBES:
                results.append({"id": probe_id, "status": "error", "reason": "unknown confirmation probe"})
                continue
            if now() > self.deadline:
                results.append({"id": probe_id, "status": "skipped", "reason": "time budget reached"})
                continue
            missing = ",".join(self.not_in_effect(probe_id)) if self.scope == "own" else ""
            if missing:  # its number would be for reference only, and it costs the host time
                reason = "not %s: %s does not use %s (set chopper_probe_confirm_scope: all to measure it)" % (
                    self.configuration, self.replica, missing)
                results.append(self.skipped(probe_id, reason))
                progress("confirmation %s skipped: not %s (no %s)" % (probe_id, self.configuration, missing))
                continue
            outcome = getattr(self, probe_id)()
            outcome = outcome if isinstance(outcome, list) else [outcome]
            results.extend(outcome)
            skipped = [entry["reason"] for entry in outcome if entry["status"] == "skipped"]
            progress("confirmation %s %s" % (probe_id, "skipped: " + skipped[0] if len(skipped) == len(outcome) else "done"))
        return results
