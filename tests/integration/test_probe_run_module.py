"""The ext4_probe_run module on its own (run as ansible-core runs a module given its arguments as
JSON): it deploys the probe into the private directory it makes, runs it, returns what the probe
said and removes what it wrote; a path planted where it would make its directory is refused untouched.
The probe's real runs through this module are in test_probe_playbook.py and test_operator_view.py."""

import base64
import json
import os
import pwd
import secrets
import subprocess
import sys
import time

from conftest import ROOT, needs_root, run
from ext4audit.parsers import probe_payload

pytestmark = needs_root

MODULE = os.path.join(ROOT, "plugins", "modules", "ext4_probe_run.py")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def run_module(tmp_path, workdir, job):
    args = {"workdir": workdir, "job": job, "probe": base64.b64encode(probe_payload.build()).decode("ascii")}
    args_file = tmp_path / "args.json"  # the code is larger than one command-line argument may be
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, MODULE, str(args_file)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=60)
    return json.loads(proc.stdout.decode())


def test_probe_is_deployed_run_and_removed_and_its_stderr_and_exit_code_come_back(tmp_path):
    # A job the probe rejects before it touches anything: the exit code and the reason come back,
    # and the private directory with the code, the job and the probe's files is gone.
    workdir = "/tmp/ext4-probe-test-%s" % secrets.token_hex(8)
    result = run_module(tmp_path, workdir, {"schema": "not-a-probe-job"})
    assert not result.get("failed"), result
    assert result["rc"] == 2 and result["result"] is None and result["changed"] is False, result
    assert any("cannot read the job" in line for line in result["stderr_lines"]), result
    assert not os.path.lexists(workdir)


def test_path_planted_where_the_directory_goes_is_refused_and_kept(tmp_path):
    # An unprivileged user who learnt the name makes it a symlink to a directory of theirs first:
    # nothing is written through it, and both are left as they were.
    victim = tmp_path / "victim"
    victim.mkdir()
    nobody = pwd.getpwnam("nobody")
    os.chown(str(victim), nobody.pw_uid, nobody.pw_gid)
    os.chmod(str(victim), 0o777)
    workdir = "/tmp/ext4-probe-test-%s" % secrets.token_hex(8)
    run(AS_NOBODY + ["ln", "-s", str(victim), workdir])
    try:
        result = run_module(tmp_path, workdir, {"schema": "ext4-fleet-audit/probe-job/v1"})
        assert result.get("failed") and "cannot make the probe's private directory" in result["msg"], result
        assert os.path.islink(workdir) and os.readlink(workdir) == str(victim)
        assert os.listdir(str(victim)) == []
    finally:
        os.unlink(workdir)


def test_directories_of_killed_runs_are_removed_and_nothing_else(tmp_path):
    # What a probe job killed before its module could clean up leaves (its timeout, a Ctrl-C): a
    # directory named as the action names them, root's, 0700, with the module's and the probe's
    # files. The next module run removes it, and leaves alone a directory whose module still runs
    # (locked), one made a moment ago, one of another user, one with a file the probe never
    # writes (only the probe's files go), and a symlink by that name.
    def planted(*names, age=3600):
        path = "/tmp/ext4-probe-%s" % secrets.token_hex(12)
        os.mkdir(path, 0o700)
        for name in names:
            with open(os.path.join(path, name), "w") as handle:
                handle.write("x")
        os.utime(path, (time.time() - age, time.time() - age))
        return path

    killed = planted("ext4_probe.pyz", "job.json", "progress.log")
    killed_earlier = planted("ext4_probe.py", "ext4_parsers.py", "job.json")  # as versions before the payload
    running = planted("ext4_probe.pyz", "job.json")
    fresh = planted("ext4_probe.pyz", age=0)
    extra = planted("job.json", "notes.txt")
    theirs = planted()
    os.chown(theirs, pwd.getpwnam("nobody").pw_uid, -1)
    os.utime(theirs, (time.time() - 3600, time.time() - 3600))
    link = "/tmp/ext4-probe-%s" % secrets.token_hex(12)
    run(AS_NOBODY + ["ln", "-s", str(tmp_path), link])
    holder = subprocess.Popen(["flock", running, "sleep", "60"])
    try:
        for _ in range(100):  # until flock holds the lock
            if subprocess.run(["flock", "-n", running, "true"]).returncode:
                break
            time.sleep(0.05)
        result = run_module(tmp_path, "/tmp/ext4-probe-test-%s" % secrets.token_hex(8), {"schema": "not-a-probe-job"})
        assert result["rc"] == 2, result
        assert not os.path.lexists(killed) and not os.path.lexists(killed_earlier)
        assert sorted(os.listdir(running)) == ["ext4_probe.pyz", "job.json"]
        assert os.listdir(fresh) == ["ext4_probe.pyz"]
        assert os.listdir(extra) == ["notes.txt"]
        assert os.path.isdir(theirs) and os.path.islink(link)
    finally:
        holder.kill()
        holder.wait()
        for path in (running, fresh, extra, theirs):
            subprocess.run(["rm", "-rf", path])
        os.unlink(link)
