"""The probe's scratch directory against a local user without privileges (issue 13, section 1).

/dev/shm can be written by anyone, and the probe runs as root. Each attack is planted as user
nobody (setpriv), then the real probe runs as root: it must be refused (exit 4, result status
`refused`, the reason naming the path) and leave the victim directory and its files as they
were, with no mount or loop device of its own left anywhere.

The swap race needs a user who can rename the probe's directory: in sticky /dev/shm only root
can, so the test itself (root) forces it while the sweep runs, with no hook in the probe: the
directory is renamed away and a symlink to a victim is put in its place between the probe's
checks (done once the first image exists) and its cleanup (the sweep still has seconds to go).
"""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import needs_root, run
from test_probe_faults import leftovers, make_job
from ext4audit.parsers.ext4_probe.job import REFUSED_EXIT
from ext4audit.parsers.ext4_probe.scratch_dir import MARKER
from unit.test_probe_target import PROBE_PATH

pytestmark = needs_root

NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]
# Run as nobody: make a directory with files in it (and the probe's marker), as an attacker would.
PLANT = """import os, sys
os.mkdir(sys.argv[1])
for name, text in (("notes.txt", "a user's notes\\n"), (".ext4-audit-probe", "")):
    with open(os.path.join(sys.argv[1], name), "w") as handle:
        handle.write(text)
os.mkdir(os.path.join(sys.argv[1], "project"))
with open(os.path.join(sys.argv[1], "project", "data"), "w") as handle:
    handle.write("precious\\n")
"""


def as_nobody(*argv):
    return run(NOBODY + list(argv))


def snapshot(folder):
    """Every file under folder with its content and owner (the attack's victim, before and after)."""
    found = {}
    for where, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(where, name)
            with open(path) as handle:
                found[os.path.relpath(path, folder)] = (handle.read(), os.lstat(path).st_uid)
    return found


@pytest.fixture
def paths():
    """A scratch path of this test's own in /dev/shm, and a victim directory nobody owns."""
    tag = "%d-%d" % (os.getpid(), time.monotonic_ns())
    made = {"scratch": "/dev/shm/ext4-audit-probe-sec-" + tag, "victim": "/dev/shm/ext4audit-victim-" + tag,
            "elsewhere": "/tmp/ext4audit-new-" + tag}
    yield made
    for path in sorted(made.values()) + [made["scratch"] + "-moved"]:
        if os.path.islink(path) or os.path.isfile(path):
            os.unlink(path)
        elif os.path.isdir(path):
            subprocess.run(["rm", "-rf", "--one-file-system", path], check=False)


def run_probe(tmp_path, job):
    job_path, out_path = tmp_path / "job.json", tmp_path / "out.json"
    job_path.write_text(json.dumps(job))
    proc = subprocess.run([sys.executable, PROBE_PATH, "run", str(job_path), str(out_path)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=300)
    return proc.returncode, json.loads(out_path.read_text()), proc.stderr


def a_plan(runs):
    from ext4audit.probe import analysis as plan_mod
    return plan_mod.make_plan(7, runs)


def test_symlink_to_a_users_directory_is_refused_and_the_directory_kept(tmp_path, paths):
    as_nobody("/usr/bin/python3", "-c", PLANT, paths["victim"])
    as_nobody("ln", "-s", paths["victim"], paths["scratch"])
    before = snapshot(paths["victim"])
    rc, result, stderr = run_probe(tmp_path, make_job(paths["scratch"], plan=a_plan(8)))
    assert snapshot(paths["victim"]) == before and len(before) == 3
    assert rc == REFUSED_EXIT and result["status"] == "refused", (rc, result["reason"], stderr)
    assert result["reason"].startswith("%s is a symbolic link (to %s, owned by uid 65534)"
                                       % (paths["scratch"], paths["victim"])), result["reason"]
    assert os.readlink(paths["scratch"]) == paths["victim"]
    assert leftovers(paths["victim"]) == {"mounts": [], "loops": [], "files": sorted(os.listdir(paths["victim"]))}


def test_dangling_symlink_is_refused_and_nothing_is_made_where_it_points(tmp_path, paths):
    as_nobody("ln", "-s", paths["elsewhere"], paths["scratch"])
    # keep_cache: a probe that made its directory there would leave it for all to see
    rc, result, stderr = run_probe(tmp_path, make_job(paths["scratch"], plan=a_plan(8), keep_cache=True))
    assert not os.path.lexists(paths["elsewhere"]), os.listdir(paths["elsewhere"])
    assert leftovers(paths["elsewhere"]) == {"mounts": [], "loops": [], "files": []}
    assert rc == REFUSED_EXIT and result["status"] == "refused", (rc, result["reason"], stderr)
    assert result["reason"].startswith("%s is a symbolic link (to %s, owned by uid 65534)"
                                       % (paths["scratch"], paths["elsewhere"])), result["reason"]


def test_scratch_path_through_a_users_directory_is_refused(tmp_path, paths):
    """chopper_probe_scratch_dir set below a directory another user owns: that user could swap
    the probe's directory (or a parent) for a symlink at any moment, so the path is refused."""
    as_nobody("mkdir", paths["victim"])
    scratch = os.path.join(paths["victim"], "probe")
    rc, result, stderr = run_probe(tmp_path, make_job(scratch, plan=a_plan(8)))
    assert os.listdir(paths["victim"]) == []
    assert rc == REFUSED_EXIT and result["status"] == "refused", (rc, result["reason"], stderr)
    assert result["reason"].startswith("%s is owned by uid 65534, not root" % paths["victim"]), result["reason"]


def test_directory_swapped_for_a_symlink_mid_run_is_refused_and_the_victim_kept(tmp_path, paths):
    as_nobody("/usr/bin/python3", "-c", PLANT, paths["victim"])
    before = snapshot(paths["victim"])
    job_path, out_path = tmp_path / "job.json", tmp_path / "out.json"
    job_path.write_text(json.dumps(make_job(paths["scratch"], plan=a_plan(256))))  # a cold sweep: 4-6 s
    proc = subprocess.Popen([sys.executable, PROBE_PATH, "run", str(job_path), str(out_path)],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    cache = os.path.join(paths["scratch"], "cache")
    for _ in range(600):  # the checks are done once the first pristine image is in the cache
        if os.path.isdir(cache) and any(name.endswith(".img") for name in os.listdir(cache)):
            break
        time.sleep(0.01)
    else:
        proc.kill()
        pytest.fail("the probe never built an image: %s" % proc.communicate()[1])
    os.rename(paths["scratch"], paths["scratch"] + "-moved")
    os.symlink(paths["victim"], paths["scratch"])
    _, stderr = proc.communicate(timeout=300)
    assert snapshot(paths["victim"]) == before
    result = json.loads(out_path.read_text())
    assert proc.returncode == REFUSED_EXIT and result["status"] == "refused", (result["reason"], stderr)
    assert result["reason"].startswith("%s was replaced during the run (it is now a symbolic link)"
                                       % paths["scratch"]), result["reason"]
    assert result["sweep"]["completed"] > 1, "the sweep went on in the probe's own directory"
    assert os.readlink(paths["scratch"]) == paths["victim"]
    # the probe emptied its own directory where it now is (through its descriptor), nothing else
    assert leftovers(paths["scratch"] + "-moved") == {"mounts": [], "loops": [], "files": [MARKER]}
    assert leftovers(paths["victim"])["mounts"] == [] and leftovers(paths["victim"])["loops"] == []
