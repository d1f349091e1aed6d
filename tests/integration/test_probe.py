"""The probe on real loop devices and real ext4: the player's writes, FIEMAP against debugfs,
each confirmation probe end to end, and a SIGKILLed sweep that leaves nothing behind."""

import json
import os
import random
import re
import signal
import subprocess
import sys
import time

import pytest

from conftest import needs_root, run
from ext4audit.parsers.ext4_probe.allocator import ALLOCATOR_PAIRS, ALLOCATOR_TEST
from ext4audit.parsers.ext4_probe.confirmations import Confirmations
from ext4audit.parsers.ext4_probe.extents import fiemap
from ext4audit.parsers.ext4_probe.image_cache import Images
from ext4audit.parsers.ext4_probe.job import REFUSED_EXIT
from ext4audit.parsers.ext4_probe.layouts import fragment
from ext4audit.parsers.ext4_probe.loops import Mounted, own_loop_devices
from ext4audit.parsers.ext4_probe.player import file_dirs, play
from ext4audit.parsers.ext4_probe.replica import build_options, copy_sparse, mkfs_argv, run_tool
from ext4audit.parsers.ext4_probe.scratch_dir import MARKER, Scratch
from unit.test_probe_target import PROBE_PATH, treatment

pytestmark = needs_root


@pytest.fixture
def scratch():
    root = "/dev/shm/ext4-audit-probe-test-%d" % os.getpid()
    with Scratch(root, 256 << 20) as handle:
        yield handle
    assert not os.path.exists(root)


def replica_images(scratch, journal=True):
    mkfs = {"block_size": 4096, "inode_size": 256, "journal_bytes": (16 << 20) if journal else 0, "features": []}
    options = ["data=ordered", "delalloc", "noinit_itable"] if journal else ["delalloc", "noinit_itable"]
    return Images(scratch, mkfs, options)


def expected_ops(t):
    """Chopper's semantics, written out independently of the player: per pass, chunks in the
    permuted order, files interleaved; open before the first write or after a close; Fsync then
    Sync bits in write order; a Sync bit closes the file and syncs."""
    chunk = t["FileSize"] // t["ChunkCount"]
    d = t["InternalDensity"]
    passes = [[(chunk * i + chunk - int(chunk * d), int(chunk * d)) for i in t["ChunkOrder"]]] if d <= 1 else [
        [(chunk * i, chunk) for i in t["ChunkOrder"]],
        [(chunk * i + chunk - int(chunk * (d - 1)), int(chunk * (d - 1))) for i in t["ChunkOrder"]]]
    ops, is_open = [], [False] * t["FileCount"]
    for writes in passes:
        for k, (offset, length) in enumerate(writes):
            for f in range(t["FileCount"]):
                if not is_open[f]:
                    ops.append(("open", f))
                    is_open[f] = True
                ops.append(("write", f, offset, length))
                if t["Fsync"][k]:
                    ops.append(("fsync", f))
                if t["Sync"][k]:
                    ops += [("close", f), ("syncfs",)]
                    is_open[f] = False
    return ops


PLAYER_CASES = [
    dict(InternalDensity=0.2, ChunkOrder=[3, 1, 0, 2], Fsync=[True, False, True, False], Sync=[False, True, False, True]),
    dict(InternalDensity=1.0, ChunkOrder=[0, 1, 2, 3], Fsync=[False] * 4, Sync=[False, False, False, True]),
    dict(InternalDensity=1.6, ChunkOrder=[2, 3, 0, 1], Fsync=[False, True, True, True], Sync=[True] * 4, FileCount=2,
         DirectorySpan=12),
    dict(InternalDensity=0.6, ChunkOrder=[1, 0, 3, 2], Fsync=[True] * 4, Sync=[False, False, True, True], FileCount=2,
         FileSize=40 * 1024, DirectorySpan=5),
]


def test_scratch_use_counts_run_images_not_the_files_inside_their_mounts(scratch):
    """The cap counts the blocks of the scratch directory's own files. A run's filesystem is
    mounted under mnt/ while the next image is copied (RunSlots); walking into it counted a
    half-full 256 MiB image's files on top of the image itself, and a cold sweep stopped at a
    cap it had not reached."""
    images = replica_images(scratch)
    image = scratch.path("runs", "run.img")
    copy_sparse(images.get(256 << 20, 0.5, 6), image)
    before = scratch.used()
    with Mounted(image, scratch.path("mnt", "run"), images.options) as mnt:
        assert sum(f.stat().st_blocks for f in os.scandir(mnt.target) if f.is_file()) * 512 > 64 << 20
        assert scratch.used() == before


@pytest.mark.parametrize("case", PLAYER_CASES, ids=["d0.2", "d1.0", "d1.6-two-files", "d0.6-odd-size"])
def test_player_writes_exactly_chopper_byte_ranges(scratch, case):
    t = treatment(**case)
    images = replica_images(scratch)
    copy_sparse(images.get(256 << 20, 0, 6), scratch.path("runs", "run.img"))
    log = []
    with Mounted(scratch.path("runs", "run.img"), scratch.path("mnt", "run"), images.options) as mnt:
        paths = play(mnt.target, t, sorted(os.sched_getaffinity(0)), log)
        assert log == expected_ops(t)
        written = set()
        for op in log:
            if op[0] == "write":
                written.update(range(op[2], op[2] + op[3]))
        for path in paths:
            with open(path, "rb") as handle:
                data = handle.read()
            # every byte written holds the payload, every other byte reads as zero (a hole)
            assert set(i for i, b in enumerate(data) if b) == written
            assert len(data) == max(written) + 1 == t["FileSize"]  # chunk tails are written: full length
        assert [os.path.relpath(p, mnt.target).split("/")[-2] for p in paths] == [
            "dir.%d" % d for d in file_dirs(t["FileCount"], t["DirectorySpan"])]


def debugfs_leaf_extents(image, relpath):
    out = run(["debugfs", "-R", 'dump_extents -l "/%s"' % relpath, image], env=dict(os.environ, LC_ALL="C"))
    extents = []
    for line in out.splitlines():
        m = re.match(r"\s*\d+/\s*\d+\s+\d+/\s*\d+\s+(\d+)\s+-\s+(\d+)\s+(\d+)\s+-\s+(\d+)\s+(\d+)", line)
        if m:
            extents.append((int(m.group(1)), int(m.group(3)), int(m.group(5))))
    return extents


def merged(extents):
    out = []
    for logical, physical, length in sorted(extents):
        if out and out[-1][0] + out[-1][2] == logical and out[-1][1] + out[-1][2] == physical:
            out[-1] = (out[-1][0], out[-1][1], out[-1][2] + length)
        else:
            out.append((logical, physical, length))
    return out


@pytest.mark.parametrize("layout", [1, 3])
def test_fiemap_matches_debugfs_dump_extents(scratch, layout):
    images = replica_images(scratch)
    t = treatment(FileSize=256 * 1024, InternalDensity=0.6, ChunkOrder=[3, 0, 2, 1], Fsync=[True, False, True, False],
                  FileCount=2, DirectorySpan=7)
    image = scratch.path("runs", "run.img")
    copy_sparse(images.get(256 << 20, 0.4, layout), image)
    with Mounted(image, scratch.path("mnt", "run"), images.options) as mnt:
        paths = play(mnt.target, t, [0])
        by_fiemap = {}
        for path in paths:
            fd = os.open(path, os.O_RDONLY)
            by_fiemap[os.path.relpath(path, mnt.target)] = [(lo // 4096, ph // 4096, n // 4096) for lo, ph, n in fiemap(fd)]
            os.close(fd)
    total_extents = 0
    for relpath, extents in by_fiemap.items():
        assert extents, relpath
        assert merged(extents) == merged(debugfs_leaf_extents(image, relpath)), relpath
        total_extents += len(extents)
    assert total_extents >= 2


def free_space(image):
    """The free block count and each block group's free block ranges, as dumpe2fs lists them."""
    return [line.strip() for line in run(["dumpe2fs", image]).splitlines() if line.strip().startswith("Free blocks:")]


@pytest.mark.parametrize("used_ratio, layout", [(0, 1), (0.4, 3), (0.2, 5)])
def test_discard_does_not_change_the_free_space_an_image_is_built_with(scratch, used_ratio, layout):
    """Why images are built without `discard` (replica.build_options): the free space left, block for
    block, is the same with it, which only made each punched hole a discard of the loop device
    (a replica of a journal-less root: 10.1 s to build the default sweep's images, 2.2 s without)."""
    mkfs = {"block_size": 4096, "inode_size": 256, "journal_bytes": 0, "features": []}
    image, free = scratch.path("runs", "build.img"), {}
    for options in (["delalloc", "noinit_itable", "discard"], ["delalloc", "noinit_itable"]):
        with open(image, "wb") as handle:
            handle.truncate(256 << 20)
        run_tool(mkfs_argv(mkfs, 256 << 20, image), "mke2fs")
        with Mounted(image, scratch.path("mnt", "build"), options) as mnt:
            fd = os.open(os.path.join(mnt.target, "placeholder"), os.O_CREAT | os.O_WRONLY, 0o600)
            os.posix_fallocate(fd, 0, int((256 << 20) * used_ratio) // 4096 * 4096 or 4096)
            os.close(fd)
            holes = fragment(mnt.target, layout, 4096)["holes"]
        free[options[-1]] = free_space(image)
        os.unlink(image)
    assert holes > 0 and len(free["discard"]) == 3  # the superblock's count, then 2 block groups
    assert free["discard"] == free["noinit_itable"]
    assert build_options(["delalloc", "discard", "nodiscard"]) == ["delalloc", "nodiscard"]


def make_job(scratch_dir, plan=None, confirmations=(), netfs=(), **extra):
    facts_fs = {"mountpoint": "/", "options": ["rw", "data=ordered", "delalloc", "auto_da_alloc", "barrier"],
                "superblock": {"block_size": 4096, "inode_size": 256, "journal_bytes": 16 << 20,
                               "features": ["has_journal", "extent", "flex_bg", "64bit"]}}
    job = {"schema": "ext4-fleet-audit/probe-job/v1", "plan": plan, "filesystem": facts_fs,
           "netfs": [{"mountpoint": m, "fstype": "fuse.sshfs"} for m in netfs], "scratch_dir": scratch_dir,
           "confirmations": list(confirmations), "repetitions": 3, "sweep_budget_s": 60, "confirm_budget_s": 60}
    job.update(extra)
    return job


def run_probe(tmp_path, job):
    job_path, out_path = tmp_path / "job.json", tmp_path / "out.json"
    job_path.write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, PROBE_PATH, "run", str(job_path), str(out_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    return json.loads(out_path.read_text()), proc.stderr


def test_each_confirmation_probe_reports_a_ratio(tmp_path, sshfs_mount):
    scratch_dir = "/dev/shm/ext4-audit-probe-confirm-%d" % os.getpid()
    result, stderr = run_probe(tmp_path, make_job(scratch_dir, confirmations=Confirmations.PROBES,
                                                  netfs=[sshfs_mount]))
    assert result["status"] == "ok", result["reason"]
    by_id = dict((c["id"], c) for c in result["confirmations"])
    assert sorted(by_id) == sorted(Confirmations.PROBES)
    for entry in result["confirmations"]:
        assert entry["status"] == "measured", entry
        assert entry["repetitions"] == 3
        for side in ("risky", "safe"):
            assert len(entry[side]["samples"]) == 3 and all(v > 0 for v in entry[side]["samples"]), entry
        low, high = entry["ratio_spread"]
        assert 0 < low <= entry["ratio"] <= high, entry
        print("%-22s ratio %.3f [%.3f, %.3f] %s" % (entry["id"], entry["ratio"], low, high, entry["metric"]))
    assert "auto_da_alloc" in by_id["rename_over_existing"]["risky"]["options"].split(",")
    assert "noauto_da_alloc" in by_id["rename_over_existing"]["safe"]["options"].split(",")
    assert "nodelalloc" in by_id["buffered_write_fsync"]["risky"]["options"].split(",")
    assert set(by_id["xattr_set"]["ratios"]) == {"p50", "p99"}
    assert by_id["netfs_mkdir_existing"]["mountpoint"] == sshfs_mount
    assert os.listdir(sshfs_mount) == ["existing"], "the mkdir probe must not create anything"
    assert not os.path.exists(scratch_dir)


def test_confirm_scope_own_measures_only_the_replicas_option_sets(tmp_path):
    """make_job's host mounts data=ordered, delalloc and auto_da_alloc: with the scope `own` the
    rename confirmation is its configuration and is measured, buffered write + fsync (dioread_nolock,
    nodelalloc) is skipped with the reason; with `all` it is measured. One repetition, no plan."""
    scratch_dir = "/dev/shm/ext4-audit-probe-scope-%d" % os.getpid()
    wanted = ["rename_over_existing", "buffered_write_fsync"]
    result, stderr = run_probe(tmp_path, make_job(scratch_dir, confirmations=wanted, repetitions=1,
                                                  confirm_scope="own"))
    assert result["status"] == "ok", result["reason"]
    rename, buffered = result["confirmations"]
    assert (rename["id"], rename["status"], rename["repetitions"]) == ("rename_over_existing", "measured", 1), rename
    assert rename["ratio"] > 0
    assert buffered == {"id": "buffered_write_fsync", "seed": "001", "status": "skipped", "metric": None, "unit": "s",
                        "mountpoint": None, "repetitions": 0, "ratio": None, "ratio_spread": None, "risky": None,
                        "safe": None,
                        "reason": "not your configuration: the replica of / does not use dioread_nolock,nodelalloc "
                                  "(set chopper_probe_confirm_scope: all to measure it)"}
    assert "confirmation buffered_write_fsync skipped: not your configuration (no dioread_nolock,nodelalloc)" in stderr
    assert "confirmation rename_over_existing done" in stderr

    result, _ = run_probe(tmp_path, make_job(scratch_dir, confirmations=["buffered_write_fsync"], repetitions=1,
                                             confirm_scope="all"))
    [buffered] = result["confirmations"]
    assert buffered["status"] == "measured" and buffered["repetitions"] == 1 and buffered["ratio"] > 0, buffered
    assert "nodelalloc" in buffered["risky"]["options"].split(",")
    assert own_leftovers(scratch_dir) == {"mounts": [], "loops": [], "files": []}


def own_leftovers(scratch_dir):
    mounts = [line.split()[4] for line in open("/proc/self/mountinfo") if line.split()[4].startswith(scratch_dir)]
    return {"mounts": mounts, "loops": own_loop_devices(scratch_dir),
            "files": os.listdir(scratch_dir) if os.path.exists(scratch_dir) else []}


def test_sigkill_mid_sweep_then_next_run_leaves_nothing(tmp_path, loopfs):
    """A killed probe cannot clean up; its next start must, without touching anyone else's loop device."""
    from ext4audit.probe import analysis as plan_mod
    decoy = loopfs.make("decoy", size="64M")
    scratch_dir = "/dev/shm/ext4-audit-probe-kill-%d" % os.getpid()
    # A sweep long enough (4,096 runs, ~20 s) that each kill lands while it runs, on any machine.
    job = make_job(scratch_dir, plan=plan_mod.make_plan(7, 4096), confirmations=["rename_over_existing"])
    (tmp_path / "job.json").write_text(json.dumps(job))
    rng = random.Random(11)
    for attempt in range(3):
        proc = subprocess.Popen([sys.executable, PROBE_PATH, "run", str(tmp_path / "job.json"), str(tmp_path / "out.json")],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(rng.uniform(0.3, 2.5))
        assert proc.poll() is None, "attempt %d: the probe ended before it could be killed" % attempt
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert os.path.exists(os.path.join(scratch_dir, MARKER)), "the killed run left its scratch directory"
    result, _ = run_probe(tmp_path, make_job(scratch_dir, confirmations=["xattr_set"], repetitions=1))
    assert result["status"] == "ok", result["reason"]
    assert own_leftovers(scratch_dir) == {"mounts": [], "loops": [], "files": []}
    assert not os.path.exists(scratch_dir)
    # the loop device the probe did not make is still attached and mounted
    assert run(["losetup", "--noheadings", "--output", "BACK-FILE", decoy["device"]]).strip() == decoy["image"]
    assert os.path.ismount(decoy["mountpoint"])


def test_sigterm_cleans_up_at_once(tmp_path):
    from ext4audit.probe import analysis as plan_mod
    scratch_dir = "/dev/shm/ext4-audit-probe-term-%d" % os.getpid()
    (tmp_path / "job.json").write_text(json.dumps(make_job(scratch_dir, plan=plan_mod.make_plan(7, 256))))
    proc = subprocess.Popen([sys.executable, PROBE_PATH, "run", str(tmp_path / "job.json"), str(tmp_path / "out.json")],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    time.sleep(1.5)
    proc.send_signal(signal.SIGTERM)
    _, stderr = proc.communicate(timeout=60)
    assert proc.returncode == 3, stderr
    assert "scratch cleaned up" in stderr
    assert own_leftovers(scratch_dir) == {"mounts": [], "loops": [], "files": []}
    assert not (tmp_path / "out.json").exists()


def test_second_probe_is_refused_while_one_runs(tmp_path):
    scratch_dir = "/dev/shm/ext4-audit-probe-lock-%d" % os.getpid()
    with Scratch(scratch_dir, 64 << 20):
        job_path, out_path = tmp_path / "job.json", tmp_path / "out.json"
        job_path.write_text(json.dumps(make_job(scratch_dir, confirmations=["xattr_set"], lock_wait_s=1)))
        start = time.monotonic()
        proc = subprocess.run([sys.executable, PROBE_PATH, "run", str(job_path), str(out_path)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        waited = time.monotonic() - start
        result = json.loads(out_path.read_text())
    assert proc.returncode == REFUSED_EXIT, proc.stderr
    assert result["status"] == "refused", result
    assert result["reason"].startswith("another probe is running on this host (pid %d)" % os.getpid())
    assert 1 <= waited < 10


def test_second_probe_waits_for_the_first_then_runs(tmp_path):
    """The holder removes the directory when it is done (no kept cache): the waiter starts over
    in a directory of its own."""
    scratch_dir = "/dev/shm/ext4-audit-probe-wait-%d" % os.getpid()
    job_path, out_path = tmp_path / "job.json", tmp_path / "out.json"
    job_path.write_text(json.dumps(make_job(scratch_dir, lock_wait_s=60)))
    with Scratch(scratch_dir, 64 << 20):
        waiter = subprocess.Popen([sys.executable, PROBE_PATH, "run", str(job_path), str(out_path)],
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
        time.sleep(1.5)
        assert waiter.poll() is None, "the second probe did not wait"
    _, stderr = waiter.communicate(timeout=120)
    assert waiter.returncode == 0, stderr
    assert json.loads(out_path.read_text())["status"] == "ok"
    assert not os.path.exists(scratch_dir)


def test_foreign_scratch_directory_is_refused(tmp_path):
    foreign = tmp_path / "not-ours"
    foreign.mkdir()
    (foreign / "precious").write_text("keep me")
    job_path, out_path = tmp_path / "job.json", tmp_path / "out.json"
    job_path.write_text(json.dumps(make_job(str(foreign), confirmations=["xattr_set"])))
    proc = subprocess.run([sys.executable, PROBE_PATH, "run", str(job_path), str(out_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    result = json.loads(out_path.read_text())
    assert proc.returncode == REFUSED_EXIT and result["status"] == "refused"
    assert "%s is not the probe's scratch directory" % foreign in result["reason"]
    assert (foreign / "precious").read_text() == "keep me"


def test_scratch_cap_stops_the_sweep_with_a_clear_reason(tmp_path):
    from ext4audit.probe import analysis as plan_mod
    scratch_dir = "/dev/shm/ext4-audit-probe-cap-%d" % os.getpid()
    result, _ = run_probe(tmp_path, make_job(scratch_dir, plan=plan_mod.make_plan(7, 64), scratch_cap_bytes=6 << 20))
    assert result["status"] == "partial"
    assert result["sweep"]["stopped_by"] == "scratch cap"
    assert "scratch space cap reached" in result["sweep"]["errors"][-1]
    assert not os.path.exists(scratch_dir)


def test_allocator_diagnosis_on_loop_devices(tmp_path):
    """The four experiments for real, on scratch loop devices: the section's shape, each verdict
    one of three with a p value in [0, 1], within a few seconds, and a record the controller takes."""
    from ext4audit.probe import analysis as controller

    scratch_dir = "/dev/shm/ext4-audit-probe-allocator-%d" % os.getpid()
    started = time.monotonic()
    result, stderr = run_probe(tmp_path, make_job(scratch_dir, allocator=True, allocator_budget_s=60))
    elapsed = time.monotonic() - started
    assert result["status"] == "ok", result["reason"]
    section = result["allocator"]
    assert (section["status"], section["reason"]) == ("ran", None)
    assert [(e["id"], e["name"]) for e in section["issues"]] == [
        ("scheduler_dependency", "Scheduler Dependency"), ("special_end", "Special End"),
        ("shared_global", "Shared Global"), ("normalization", "Normalization")]
    for entry in section["issues"]:
        print("%-22s %-12s pairs %2d p %s effect %s %s" % (entry["id"], entry["verdict"], entry["pairs"],
                                                           entry["p_value"], entry["effect"], entry["reason"] or ""))
        assert entry["verdict"] in ("present", "absent", "inconclusive")
        assert entry["pairs"] == ALLOCATOR_PAIRS and 0 <= entry["p_value"] <= 1
        assert entry["test"] == ALLOCATOR_TEST
        assert set(entry["effect"]) == {"dspan_p50_ratio", "dspan_p90_ratio", "tail_share_trigger",
                                        "tail_share_control"}
        assert "allocator %s: %s" % (entry["id"], entry["verdict"]) in stderr
    assert elapsed < 20, "the diagnosis takes a few seconds (%.1f s with mkfs and the mount check)" % elapsed
    assert not os.path.exists(scratch_dir)
    controller.check_record({"host": "h", "status": "ran", "reason": None, "mountpoint": "/", "result": result})
    assert controller.host_section({"host": "h", "status": "ran", "mountpoint": "/", "result": result},
                                   None)["allocator"] == section


def test_allocator_off_is_skipped_with_the_reason(tmp_path):
    scratch_dir = "/dev/shm/ext4-audit-probe-allocator-off-%d" % os.getpid()
    result, _ = run_probe(tmp_path, make_job(scratch_dir, allocator=False))
    assert result["allocator"] == {"status": "skipped", "reason": "not asked for (the job's allocator is false)",
                                   "issues": []}
