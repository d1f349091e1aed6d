"""The collection's stdout callback at fleet size, through a real ansible-playbook run over local
aliases: hosts done of total while a play runs, and one line of counts (not a line per host) when
a play and the run end. A run of two hosts prints no progress and keeps its line per host."""

import os
import re
import subprocess
import time

from conftest import ROOT, VENV_BIN

ENV = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
           PYTHONPATH=ROOT)
PLAYBOOK = """- name: Sleep a little
  hosts: all
  gather_facts: false
  tasks:
    - name: Sleep
      ansible.builtin.command: sleep 0.5
      changed_when: false
"""


def inventory(path, aliases, unreachable=0):
    """Local aliases (ansible_connection: local), and hosts whose SSH port refuses."""
    lines = ["all:", "  vars:", "    ext4_audit_become: false", "  hosts:"]
    lines += ["    alias-%02d: {ansible_connection: local, ansible_python_interpreter: '{{ ansible_playbook_python }}'}"
              % n for n in range(aliases)]
    lines += ["    gone-%d: {ansible_host: 127.0.0.1, ansible_port: 9, ansible_connection: ssh, "
              "ansible_ssh_common_args: '-o ConnectTimeout=3 -o BatchMode=yes -o StrictHostKeyChecking=no'}" % n
              for n in range(1, unreachable + 1)]
    path.write_text("\n".join(lines) + "\n")
    return str(path)


def timed_run(tmp_path, hosts, forks):
    """[(seconds since start, line)] of ansible-playbook read line by line from a pipe, as a CI log reads it."""
    (tmp_path / "play.yml").write_text(PLAYBOOK)
    started = time.monotonic()
    child = subprocess.Popen([os.path.join(VENV_BIN, "ansible-playbook"), "-i", hosts, "-f", str(forks),
                              str(tmp_path / "play.yml")], cwd=ROOT, env=ENV,
                             stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = [(time.monotonic() - started, raw.decode(errors="replace").rstrip("\n")) for raw in child.stdout]
    child.wait()
    return lines


def test_thirty_hosts_show_progress_and_end_in_a_few_lines(tmp_path):
    lines = timed_run(tmp_path, inventory(tmp_path / "hosts.yml", 30, unreachable=1), forks=5)
    out = "\n".join(text for _, text in lines)
    progress = [(at, int(m.group(1))) for at, text in lines
                for m in [re.match(r"^Sleep a little: (\d+)/31 hosts \(Sleep\)$", text)] if m]
    [(end_at, end)] = [(at, text) for at, text in lines if text.startswith("Sleep a little: 31 hosts: ")]
    assert re.match(r"^Sleep a little: 31 hosts: 30 ok, 1 unreachable \([0-9.]+ s\)$", end), out
    # live: the lines come while the hosts run (6 rounds of 5 forks), each with more hosts done
    assert 2 <= len(progress) <= 9, out
    assert [done for _, done in progress] == sorted(set(done for _, done in progress)), out
    assert progress[0][0] < end_at - 1.0, out
    assert "PLAY RECAP: 31 hosts, 0 failed, 1 unreachable, changed=0" in out.splitlines(), out
    assert "  gone-1: failed=0 unreachable=1" in out.splitlines(), out
    assert not re.search(r"^alias-\d+ ", out, re.M) and len([t for t in out.splitlines() if t]) <= 12, out


def test_two_hosts_print_no_progress_and_a_line_each(tmp_path):
    lines = timed_run(tmp_path, inventory(tmp_path / "hosts.yml", 2), forks=1)
    out = "\n".join(text for _, text in lines)
    assert not re.search(r"\d+/2 hosts", out), out
    assert re.search(r"^Sleep a little: alias-00 ok \(1 tasks, [0-9.]+ s\)$", out, re.M), out
    assert re.search(r"^alias-01\s+: ok=1\s+changed=0", out, re.M), out  # Ansible's own recap


def test_the_verdict_is_said_once_with_either_callback(tmp_path):
    # One host unreachable: the verdict is incomplete (exit 2) whatever this machine's findings.
    hosts = inventory(tmp_path / "hosts.yml", 1, unreachable=1)
    for callback in ("default", "ext4audit.fleet.audit"):  # default: what AWX shows
        result = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "run", "--", "-i", hosts,
                                 "playbooks/audit.yml", "-e", "chopper_probe_enabled=false",
                                 "-e", "ext4_audit_reports_dir=%s" % (tmp_path / callback)], cwd=ROOT,
                                env=dict(ENV, ANSIBLE_STDOUT_CALLBACK=callback),
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = result.stdout.decode(errors="replace")
        assert result.returncode == 2 and out.count("verdict: incomplete: ") == 1, (callback, out)
        assert "stopped by the gate: exit 2 (incomplete, or the report step could not run)" in out, (callback, out)
