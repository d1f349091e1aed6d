"""`ext4audit run` as CI's gate (issue 27 §4-5): a run that reached no verdict exits 2, the listing
modes exit as Ansible does without a verdict line, and a TERM or a SIGKILL of the wrapper ends the
whole run (no ansible-playbook or module process outlives it) and its private folder is swept."""

import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time

import pytest
from conftest import ROOT

from ext4audit.cli import run as run_module
from ext4audit.parsers import own_folders

PYTHON = sys.executable


def wrapper(args, env=None, **kwargs):
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", **(env or {}))
    return subprocess.Popen([PYTHON, "-m", "ext4audit.cli.run", "--"] + list(args), cwd=ROOT, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, **kwargs)


def finished(args, env=None):
    process = wrapper(args, env)
    out, err = process.communicate(timeout=600)
    return process.returncode, out, err


@pytest.mark.parametrize("selection", [["--tags", "typo"], ["--skip-tags", "all"]])
def test_a_run_that_reaches_no_verdict_exits_2(tmp_path, selection):
    reports = tmp_path / "reports"
    rc, out, err = finished(["playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports] + selection)
    assert rc == 2 and "no verdict" in err, out[-3000:] + err
    assert not reports.exists()


@pytest.mark.parametrize("mode", ["--list-tasks", "--syntax-check", "--list-tags", "--list-hosts"])
def test_listing_modes_are_not_a_gate(mode):
    rc, out, err = finished(["playbooks/audit.yml", mode])
    assert rc == 0, out[-3000:] + err
    assert "ext4audit run:" not in err and "verdict:" not in out + err


SLEEPER = "3217.5"  # a sleep only these tests start, found by its command line


def sleepers(duration=SLEEPER):
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                if handle.read().split(b"\0")[:2] == [b"sleep", duration.encode()]:
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.1)
    return predicate()


@pytest.fixture(name="sleeping_run")
def fixture_sleeping_run(tmp_path):
    """A wrapper whose playbook runs a module that waits (like qemu-img convert in the image check)."""
    playbook = tmp_path / "sleep.yml"
    playbook.write_text(textwrap.dedent("""
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: A long task of the playbook
              ansible.builtin.command:
                argv: [sleep, "%s"]
    """ % SLEEPER))
    assert not sleepers()
    process = wrapper([str(playbook), "-i", "localhost,", "-c", "local", "-e", "ansible_python_interpreter=" + PYTHON])
    try:
        assert wait_for(sleepers, 60), "the playbook's task did not start"
        yield process
    finally:
        for pid in sleepers():
            os.kill(pid, signal.SIGKILL)
        if process.poll() is None:
            process.kill()
        process.communicate()


def test_sigterm_ends_the_whole_run(sleeping_run):
    sleeping_run.send_signal(signal.SIGTERM)
    sleeping_run.wait(timeout=60)
    assert sleeping_run.returncode == 2
    assert wait_for(lambda: not sleepers(), 15), "a process of the run outlived the TERM"


def recorded_pid(name):
    """The pid a private folder records (other runs' folders, of other users or versions, may have none)."""
    try:
        with open(os.path.join(tempfile.gettempdir(), name, own_folders.PID_FILE)) as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return None


def test_sigkill_of_the_wrapper_ends_the_run_and_its_folder_is_swept(sleeping_run):
    mine = [os.path.join(tempfile.gettempdir(), name) for name in os.listdir(tempfile.gettempdir())
            if name.startswith(run_module.WORK_PREFIX) and recorded_pid(name) == sleeping_run.pid]
    assert len(mine) == 1
    sleeping_run.kill()
    sleeping_run.wait()
    assert wait_for(lambda: not sleepers(), 15), "ansible-playbook or its module outlived the killed wrapper"
    assert os.path.isdir(mine[0])
    assert mine[0] in run_module.sweep_stale(tempfile.gettempdir())
    assert not os.path.exists(mine[0])


def playbook_processes(playbook):
    """The ansible-playbook processes (and their forks) running this playbook."""
    found = []
    for entry in os.listdir("/proc"):
        try:
            with open("/proc/%s/cmdline" % entry, "rb") as handle:
                if playbook.encode() in handle.read().split(b"\0"):
                    found.append(int(entry))
        except (OSError, ValueError):
            continue
    return found


SHORT_SLEEPER = "6.125"  # a short wait before the audit, found by its command line


def test_an_audit_whose_wrapper_was_killed_never_moves_latest(tmp_path):
    """Before the watchdog, ansible-playbook outlived a SIGKILLed `ext4audit run`, went on with the
    audit and moved reports/latest to a run nobody was waiting for. Now the run ends with its
    wrapper: once no process of it is left, no run folder has been published."""
    playbook = tmp_path / "slow-audit.yml"
    playbook.write_text(textwrap.dedent("""
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: Something slow before the audit
              ansible.builtin.command:
                argv: [sleep, "%s"]
        - ansible.builtin.import_playbook: %s
    """ % (SHORT_SLEEPER, os.path.join(ROOT, "playbooks", "audit.yml"))))
    reports = tmp_path / "reports"
    process = wrapper([str(playbook), "-e", "chopper_probe_enabled=false", "-e", "ext4_audit_reports_dir=%s" % reports])
    try:
        assert wait_for(lambda: sleepers(SHORT_SLEEPER), 60), "the playbook's first task did not start"
        process.kill()
        process.communicate()
        # an orphaned playbook would finish the wait, then the audit (some 10 s), then publish it
        assert wait_for(lambda: not playbook_processes(str(playbook)), 120), "the playbook outlived its wrapper"
        assert not (reports / "latest").exists() and not (reports.exists() and os.listdir(str(reports)))
    finally:
        for pid in playbook_processes(str(playbook)) + sleepers(SHORT_SLEEPER):
            os.kill(pid, signal.SIGKILL)


def test_the_sweep_leaves_live_and_foreign_folders(tmp_path):
    live = tmp_path / (run_module.WORK_PREFIX + "live")
    live.mkdir(mode=0o700)
    (live / own_folders.PID_FILE).write_text("%d\n" % os.getpid())
    no_pid = tmp_path / (run_module.WORK_PREFIX + "old")
    no_pid.mkdir()
    other = tmp_path / "other-folder"
    other.mkdir()
    (other / own_folders.PID_FILE).write_text("999999999\n")
    link = tmp_path / (run_module.WORK_PREFIX + "link")
    link.symlink_to(other)
    assert run_module.sweep_stale(str(tmp_path)) == []
    assert live.is_dir() and no_pid.is_dir() and other.is_dir()
