"""plugins/module_utils/capped_command.py: real commands through a real AnsibleModule's run_command
(as ansible-core's own unit tests make one, with the arguments set in module_utils.basic). What
ext4_image_facts and ext4_probe_run count on: output kept up to its cap and the command stopped
there, the time limit with the command's whole process group killed, stdin from /dev/null, and
nothing in the arguments expanded."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from ansible.module_utils import basic

from ext4audit.parsers.capped_command import CommandTimeout, _Capped, run_capped


@pytest.fixture
def module(monkeypatch):
    monkeypatch.setattr(basic, "_ANSIBLE_ARGS", json.dumps({"ANSIBLE_MODULE_ARGS": {}}).encode())
    monkeypatch.setattr(basic, "_ANSIBLE_PROFILE", "legacy")
    return basic.AnsibleModule(argument_spec={})


def alive(pid):
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open("/proc/%d/stat" % pid) as handle:
        return handle.read().split(")")[-1].split()[0] != "Z"  # a zombie is dead, only not reaped


def test_output_over_the_cap_stops_the_command_unless_drained(module):
    started = time.monotonic()
    rc, out, err, over = run_capped(module, ["yes"], 1000, 100, 10)  # never ends by itself
    assert (rc, out, over) == (None, b"y\n" * 500, True) and time.monotonic() - started < 5
    rc, out, err, over = run_capped(module, ["sh", "-c", "head -c 50000000 /dev/zero; echo bad >&2; exit 3"],
                                    1000, 100, 30, drain=True)
    assert (rc, out, err, over) == (3, b"\0" * 1000, "bad\n", True)


def test_the_timeout_kills_the_command_and_its_children(module, tmp_path):
    pid_file = tmp_path / "child.pid"
    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        run_capped(module, ["sh", "-c", "sleep 60 & echo $! > %s; wait" % pid_file], 100, 100, 1)
    assert time.monotonic() - started < 5
    assert not alive(int(pid_file.read_text()))


def test_a_command_that_closes_its_pipes_and_runs_on_is_killed_at_the_timeout(module, tmp_path):
    started = time.monotonic()
    with pytest.raises(CommandTimeout):
        run_capped(module, ["sh", "-c", "exec >/dev/null 2>&1; sleep 60"], 100, 100, 1)
    assert time.monotonic() - started < 5


def test_a_child_that_holds_the_pipes_past_the_kill_does_not_hold_the_module(module, tmp_path):
    # a child in a session of its own is not in the group that is killed; run_command must not
    # then read what it goes on writing into the pipes it inherited
    pid_file = tmp_path / "child.pid"

    def held(*_):
        raise AssertionError("still in run_capped 20 s after its 2 s timeout")

    before = signal.signal(signal.SIGALRM, held)
    signal.alarm(20)
    try:
        with pytest.raises(CommandTimeout):
            run_capped(module, [sys.executable, "-c", "import os, subprocess, time; "
                                "p = subprocess.Popen(['yes'], start_new_session=True); "
                                "open(%r, 'w').write(str(p.pid)); time.sleep(60)" % str(pid_file)], 100, 100, 2,
                       drain=True)
    finally:
        signal.alarm(0)
        signal.signal(signal.SIGALRM, before)
        os.kill(int(pid_file.read_text()), signal.SIGKILL)


def test_stdin_is_devnull_and_nothing_is_expanded(module):
    read_end, write_end = os.pipe()  # the module's stdin: open, never written, never closed
    saved = os.dup(0)
    os.dup2(read_end, 0)
    try:
        rc, out, _, _ = run_capped(module, ["sh", "-c", 'cat; echo "$1"', "sh", "$HOME ~ *"], 100, 100, 5)
    finally:
        os.dup2(saved, 0)
        for fd in (saved, read_end, write_end):
            os.close(fd)
    assert (rc, out) == (0, b"$HOME ~ *\n")


def test_environment_update_and_a_command_that_cannot_start(module):
    assert run_capped(module, ["sh", "-c", "echo $LC_ALL"], 100, 100, 5, environ_update={"LC_ALL": "C"})[1] == b"C\n"
    rc, out, err, over = run_capped(module, ["/nonexistent/tool"], 100, 100, 5)
    assert rc == 127 and "cannot run /nonexistent/tool" in err and not over


def test_stderr_tail_and_the_process_group(module):
    # the probe's way: no timeout, its last errors, and in the module's process group (an async
    # job's timeout kills that group); with a session of its own otherwise
    script = "import os, sys; print(os.getpgrp() == os.getpid()); sys.stderr.write('x' * 100000 + 'last line\\n')"
    rc, out, err, over = run_capped(module, [sys.executable, "-c", script], 100, 20, None, drain=True,
                                    stderr_tail=True, own_session=False)
    assert (rc, out, err, over) == (0, b"False\n", "xxxxxxxxxxlast line\n", False)
    assert run_capped(module, [sys.executable, "-c", script], 100, 20, 10)[1:3] == (b"True\n", "x" * 20)


def test_a_command_killed_before_its_session_exists_is_killed_all_the_same():
    """The timeout can come before the start stub's setsid(): the command has no process group of
    its own yet (killpg finds none), and is killed by itself, never an error (an image check once
    reported "No such process" for its budget running out)."""
    proc = subprocess.Popen(["sleep", "30"])  # in this process's group, as the stub is before setsid()
    assert os.getpgid(proc.pid) != proc.pid
    _Capped(limit=1, stderr_limit=1, timeout=None, drain=False, stderr_tail=False, own_session=True).kill(proc)
    assert proc.returncode == -signal.SIGKILL
