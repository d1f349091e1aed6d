"""The audit on every ansible-core release the collection declares (meta/runtime.yml), 2.15 to the
newest on PyPI: the audit with its probe and the stdout callback, through each core's own
ansible-playbook (a venv per core with a Python it supports, `make test-deps`: the Makefile's
ANSIBLE_CORES), the controller package from the project's venv; and `ansible-test sanity` on the
installed collection with the oldest and the newest core (every core with EXT4AUDIT_SANITY_CORES=all:
minutes per core). The project's own core (2.19) runs every other
test and tests/unit/test_sanity.py."""

import os
import re
import subprocess

import pytest
import yaml

from conftest import ROOT, VENV_BIN, needs_root
from installed_collection import install_collection, run_sanity

pytestmark = needs_root
RECAP = re.compile(r"^localhost\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def key(version: str) -> tuple:
    return tuple(int(part) for part in version.split("."))


def makefile_cores() -> dict:
    """The Makefile's ANSIBLE_CORES (CORE:PYTHON pairs), its one place: {core: python}."""
    with open(os.path.join(ROOT, "Makefile")) as handle:
        [line] = [line for line in handle if line.startswith("ANSIBLE_CORES :=")]
    return dict(pair.split(":") for pair in line.split(":=", 1)[1].split())


def project_core() -> str:
    """The project's own core: its pin in constraints.txt (requirements.txt names it unpinned)."""
    with open(os.path.join(ROOT, "constraints.txt")) as handle:
        return re.search(r"^ansible-core==(\S+)", handle.read(), re.M).group(1)


CORES = sorted(makefile_cores(), key=key)
ALL_CORES = sorted(CORES + [project_core()], key=key)


def core_bin(core: str, command: str) -> str:
    if core == project_core():
        return os.path.join(VENV_BIN, command)
    return os.path.join(ROOT, ".cache", "ansible-core", core, "bin", command)


def test_the_matrix_holds_every_minor_from_requires_ansible_on():
    """requires_ansible names the oldest core tested, and no minor release is skipped from there to
    the newest (2.21, the newest on PyPI when this was written: add a newer one to ANSIBLE_CORES)."""
    with open(os.path.join(ROOT, "meta", "runtime.yml")) as handle:
        declared = yaml.safe_load(handle)["requires_ansible"]
    assert declared == ">=%d.%d.0" % key(ALL_CORES[0])[:2]
    minors = [key(core)[1] for core in ALL_CORES]
    assert minors == list(range(minors[0], minors[-1] + 1)), ALL_CORES
    assert minors[0] <= 15 and minors[-1] >= 21, "AAP 2.4 ships 2.15; 2.21 is the newest on PyPI"


@pytest.mark.parametrize("core", CORES)
def test_each_core_runs_on_the_python_the_makefile_names(core):
    playbook = core_bin(core, "ansible-playbook")
    assert os.access(playbook, os.X_OK), "no ansible-core %s here: `make ansible-cores` installs it" % core
    version = subprocess.run([core_bin(core, "ansible"), "--version"], stdout=subprocess.PIPE).stdout.decode()
    assert "[core %s]" % core in version, version
    assert re.search(r"python version = %s\." % re.escape(makefile_cores()[core]), version), version


@pytest.mark.parametrize("core", ALL_CORES)
def test_the_audit_probe_and_callback_work_on_each_core(core, tmp_path):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    result = subprocess.run([core_bin(core, "ansible-playbook"), "playbooks/audit.yml", "-e", "ext4_audit_fail_on=critical",
                             "-e", "ext4_audit_controller_command=%s" % os.path.join(VENV_BIN, "ext4audit"),
                             "-e", "ext4_audit_reports_dir=%s" % (tmp_path / "reports")],
                            cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out
    # the callback's short output: its phase lines, the probe's live lines, the verdict once
    assert "Prepare the run: localhost ok" in out and "Collect ext4 facts: localhost ok" in out, out
    assert re.search(r"^  probe localhost: sweep \d+/\d+ runs", out, re.M), out
    assert out.count("verdict: pass") == 1 and "Traceback" not in out and "[ERROR]" not in out, out
    assert RECAP.search(out).groups() == ("0", "0", "0"), out
    summary = os.path.join(str(tmp_path / "reports"), "latest", "summary.json")
    assert os.path.isfile(summary)


# The oldest and the newest core by default (about 30 s each once ansible-test's venvs are cached;
# the newest adds checks, such as pylint's ansible-bad-function for a module's own subprocess use);
# EXT4AUDIT_SANITY_CORES=all: every core.
SANITY_CORES = {"all": CORES}.get(os.environ.get("EXT4AUDIT_SANITY_CORES", ""), [CORES[0], CORES[-1]])


@pytest.mark.parametrize("core", SANITY_CORES)
def test_ansible_test_sanity_passes_on_each_core(core, tmp_path):
    collection = install_collection(tmp_path)
    run_sanity(core_bin(core, "ansible-test"), makefile_cores()[core], collection)
