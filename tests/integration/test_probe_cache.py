"""The probe's image cache, kept across runs (issue 17, section 3): a second run builds nothing,
and a cache file the probe did not make as it is now is never used: it is removed and rebuilt,
and the result says why. Real probe runs on real loop devices and ext4.

The cache directory is inside the probe's own scratch directory (root, 0700), so only root can
put anything there; what it guards against is a file changed or planted after the build (by a
tool, a person or a crash), not a user without privileges (test_probe_security.py covers those).
"""

import json
import os
import subprocess
import sys

import pytest

from conftest import needs_root
from test_probe_faults import make_job
from unit.test_probe_target import PROBE_PATH

pytestmark = needs_root


@pytest.fixture
def scratch_dir():
    path = "/dev/shm/ext4-audit-probe-cache-%d" % os.getpid()
    yield path
    if os.path.isdir(path):
        subprocess.run([sys.executable, PROBE_PATH, "sweep-stale", path], check=False)
        subprocess.run(["rm", "-rf", "--one-file-system", path], check=False)


def run_probe(tmp_path, scratch_dir, name):
    from ext4audit.probe import analysis as plan_mod
    job_path, out_path = tmp_path / (name + ".json"), tmp_path / (name + "-out.json")
    job_path.write_text(json.dumps(make_job(scratch_dir, plan=plan_mod.make_plan(7, 12), keep_cache=True)))
    proc = subprocess.run([sys.executable, PROBE_PATH, "run", str(job_path), str(out_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    result = json.loads(out_path.read_text())
    assert proc.returncode == 0 and result["status"] == "ok", (result["reason"], proc.stderr[-2000:])
    return result


def cached_images(scratch_dir):
    cache = os.path.join(scratch_dir, "cache")
    return sorted(os.path.join(cache, name) for name in os.listdir(cache) if name.endswith(".img"))


def test_second_run_reuses_every_image_and_leaves_them_as_built(tmp_path, scratch_dir):
    first = run_probe(tmp_path, scratch_dir, "first")["sweep"]
    images = cached_images(scratch_dir)
    assert first["images_built"] == len(images) > 1 and first["images_reused"] == 0
    second = run_probe(tmp_path, scratch_dir, "second")["sweep"]
    # the mount check works on a copy: the cached images are exactly as built, so all check out
    assert second["images_built"] == 0 and second["images_reused"] == len(images), second["cache_rejected"]
    assert second["cache_rejected"] == []
    assert second["layouts"] == first["layouts"] and second["layouts"]  # kept in each entry's record
    assert cached_images(scratch_dir) == images


def tamper(path):
    with open(path, "r+b") as handle:  # the superblock's volume name: still a mountable ext4
        handle.seek(1024 + 0x78)
        handle.write(b"tampered")


def foreign_owner(path):
    os.chown(path, 65534, 65534)


def second_link(path):
    os.link(path, path + ".link")


def symlink_to_victim(path):
    """The cached image replaced by a symbolic link to a file of someone else's."""
    victim = os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(path))), "victim-%d" % os.getpid())
    with open(victim, "wb") as handle:
        handle.write(b"a user's data\n")
    os.unlink(path)
    os.symlink(victim, path)
    return victim


def fifo(path):
    os.unlink(path)
    os.mkfifo(path, 0o600)


def record_of_other_inputs(path):
    record_path = path[:-len(".img")] + ".json"
    with open(record_path) as handle:
        record = json.load(handle)
    record["inputs"]["kernel"][0] = "2.6.32"
    with open(record_path, "w") as handle:
        json.dump(record, handle)


@pytest.mark.parametrize("change, reason", [
    (tamper, "its content is not what was built"),
    (foreign_owner, "owned by uid 65534 with mode 0600 and 1 links"),
    (second_link, "owned by uid 0 with mode 0600 and 2 links"),
    (symlink_to_victim, "cannot be opened without following a link"),
    (fifo, "not a regular file"),
    (record_of_other_inputs, "its record is missing or names other build inputs"),
])
def test_changed_or_foreign_cache_file_is_not_used_but_rebuilt(tmp_path, scratch_dir, change, reason):
    first = run_probe(tmp_path, scratch_dir, "first")["sweep"]
    target = cached_images(scratch_dir)[0]
    victim = change(target)
    second = run_probe(tmp_path, scratch_dir, "second")["sweep"]
    name = os.path.basename(target)
    assert len(second["cache_rejected"]) == 1 and second["cache_rejected"][0].startswith("cache/%s: %s" % (name, reason)), \
        second["cache_rejected"]
    assert second["images_built"] == 1 and second["images_reused"] == first["images_built"] - 1
    assert second["layouts"] == first["layouts"]
    st = os.lstat(target)  # rebuilt in its place, as the probe makes its own
    assert (st.st_uid, st.st_mode & 0o7777, st.st_nlink) == (0, 0o600, 1) and os.path.isfile(target)
    if victim:
        with open(victim, "rb") as handle:
            assert handle.read() == b"a user's data\n"
        os.unlink(victim)
    third = run_probe(tmp_path, scratch_dir, "third")["sweep"]
    assert (third["images_built"], third["cache_rejected"]) == (0, [])


def test_entries_a_run_does_not_use_are_removed(tmp_path, scratch_dir):
    run_probe(tmp_path, scratch_dir, "first")
    cache = os.path.join(scratch_dir, "cache")
    entries = sorted(os.listdir(cache))
    for stale in ("0" * 32 + ".img", "0" * 32 + ".json", os.path.basename(cached_images(scratch_dir)[0]) + ".link"):
        with open(os.path.join(cache, stale), "wb") as handle:  # e.g. an older kernel's image
            handle.write(b"old")
    run_probe(tmp_path, scratch_dir, "second")
    assert sorted(os.listdir(cache)) == entries

