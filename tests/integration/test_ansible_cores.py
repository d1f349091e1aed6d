"""The audit on the older ansible-core releases the collection declares (meta/runtime.yml): the
audit with its probe and the stdout callback, through each core's own ansible-playbook (a venv
per core, `make test-deps`: the Makefile's ANSIBLE_CORES), the controller package from the
project's venv. The newest core is the project's own, which every other test runs."""

import glob
import os
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, VENV_BIN, needs_root

pytestmark = needs_root
CORES = sorted(glob.glob(os.path.join(ROOT, ".cache", "ansible-core", "*", "bin", "ansible-playbook")))
RECAP = re.compile(r"^localhost\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def version_of(playbook):
    return os.path.basename(os.path.dirname(os.path.dirname(playbook)))


def test_requires_ansible_names_the_oldest_core_tested():
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        declared = yaml.safe_load(handle)["requires_ansible"]
    assert CORES, "no older ansible-core here: `make test-deps` installs them into .cache/ansible-core"
    oldest = min((version_of(p) for p in CORES), key=lambda v: tuple(int(x) for x in v.split(".")))
    assert declared == ">=%s.0" % ".".join(oldest.split(".")[:2])


@pytest.mark.parametrize("playbook", CORES, ids=[version_of(p) for p in CORES])
def test_the_audit_probe_and_callback_work_on_each_core(playbook, tmp_path):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    result = subprocess.run([playbook, "playbooks/audit.yml", "-e", "ext4_audit_fail_on=critical",
                             "-e", "ext4_audit_controller_command=%s" % os.path.join(VENV_BIN, "ext4audit"),
                             "-e", "ext4_audit_reports_dir=%s" % (tmp_path / "reports")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out
    assert "[core %s]" % version_of(playbook) in subprocess.run(
        [os.path.join(os.path.dirname(playbook), "ansible"), "--version"], stdout=subprocess.PIPE).stdout.decode()
    # the callback's short output: its phase lines, the probe's live lines, the verdict once
    assert "Prepare the run: localhost ok" in out and "Collect ext4 facts: localhost ok" in out, out
    assert re.search(r"^  probe localhost: sweep \d+/\d+ runs", out, re.M), out
    assert out.count("verdict: pass") == 1 and "Traceback" not in out and "[ERROR]" not in out, out
    assert RECAP.search(out).groups() == ("0", "0", "0"), out
    summary = os.path.join(str(tmp_path / "reports"), "latest", "summary.json")
    assert os.path.isfile(summary)
