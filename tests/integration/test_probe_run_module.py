"""The ext4_probe_run module on its own (run as ansible-core runs a module given its arguments as
JSON): it deploys the probe into the private directory it makes, runs it, returns what the probe
said and removes what it wrote; a path planted where it would make its directory is refused untouched.
The probe's real runs through this module are in test_probe_playbook.py and test_operator_view.py."""

import json
import os
import pwd
import secrets
import subprocess
import sys

from conftest import ROOT, needs_root, run

pytestmark = needs_root

MODULE = os.path.join(ROOT, "plugins", "modules", "ext4_probe_run.py")
CODE = os.path.join(ROOT, "roles", "chopper_probe", "files")
AS_NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]


def run_module(tmp_path, workdir, job):
    args = {"workdir": workdir, "job": job}
    for arg, name in (("probe", "ext4_probe.py"), ("parsers", "ext4_parsers.py")):
        with open(os.path.join(CODE, name)) as handle:
            args[arg] = handle.read()
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
