"""`ext4audit run [--] PLAYBOOK [ARGS...]`: ansible-playbook with the gate's exit codes.

ansible-playbook exits 2 when any task failed (the gate's own "Stop unless the verdict is pass"
too) and 4 when a host was unreachable, so its code cannot tell "the fleet is bad" from "the tool
broke". This runs it with the same arguments and its output untouched, and gives it a private file
(the extra variable ext4_audit_exit_file, in a folder only this user can write) where the report
step itself writes its verdict (`ext4audit report --verdict-file`). The exit code is then the one
`ext4audit gate` gives (EXIT_CODES): 0 pass, 1 policy failed, 2 incomplete; and 2 whenever
the playbook did not reach a verdict or Ansible itself failed. The run folder is never read back
for the verdict: what is there could have changed since the report step wrote it.
A playbook that gates on nothing (ext4_audit_gate false: the record says so) exits as
ansible-playbook does, 0 or 2; one that reached no report step at all (--tags or --skip-tags that
skip it) exits 2 and says so. The listing modes (--list-tasks, --list-hosts, --list-tags,
--syntax-check) are not a gate: they exit with ansible-playbook's own code and print no verdict.

Signals: the playbook runs in its own process group; a TERM or INT sent to this process is passed
to that group, and whatever of the run is left STOP_GRACE_S later is killed. Every process of the
run carries RUN_ENV in its environment (Ansible's workers start their own sessions, so a process
group does not hold them all), and a watchdog process kills them when this process dies without
saying so (SIGKILL). A private folder left by a killed run is removed at the next start.

`ext4audit run` starts here without the other commands' modules (numpy, the catalog...): they
are loaded while ansible-playbook runs (PRELOAD), for the playbook's own `ext4audit` commands (the
report step), which run in forks of this process (ext4audit/cli/forkserver.py, by playbook_command).
`make audit` runs it as `python -m ext4audit.run`, the same start as `ext4audit run`.
"""

import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile

import ext4audit
from ext4audit import ERROR, EXIT_CODES
from ext4audit.cli import forkserver
from ext4audit.parsers import own_folders

EXIT_FILE_VAR = "ext4_audit_exit_file"
RECORD_MAX = 64 * 1024
# ansible-playbook's codes for a run that went to its end: 0, 2 some task failed on a host, 4 a host
# was unreachable. The verdict already counts such hosts (not audited: incomplete, by policy).
ANSIBLE_FINISHED = (0, 2, 4)
# ansible-playbook options that list or check the playbook and run nothing: no verdict is expected
LISTING_OPTIONS = ("--list-tasks", "--list-hosts", "--list-tags", "--syntax-check")
WORK_PREFIX = "ext4audit-run-"  # this command's private folders in the temporary directory
RUN_ENV = "EXT4AUDIT_RUN_TOKEN"  # marks every process of one run (kill_run)
STOP_GRACE_S = 10  # after a forwarded TERM/INT, the run's processes left are killed
# What the playbook's commands need, heaviest last: loaded while ansible-playbook runs (forkserver.serve)
PRELOAD = ("ext4audit.cli.commands", "matplotlib.figure", "matplotlib.backends.backend_svg")
WATCHDOG_OPTION = "--watchdog-for-run"  # `python -m ext4audit.run --watchdog-for-run TOKEN`: start_watchdog's process


def playbook_command(argv: list) -> int:
    """One of the playbook's `ext4audit` commands, in a fork of this process (forkserver.serve)."""
    from ext4audit.cli import commands as cli  # pylint: disable=import-outside-toplevel  # loaded already (PRELOAD), not before ansible-playbook starts
    return cli.main(argv)


def ansible_playbook():
    """The ansible-playbook beside this Python (the venv's), else the one on PATH."""
    beside = os.path.join(os.path.dirname(sys.executable), "ansible-playbook")
    return beside if os.access(beside, os.X_OK) else shutil.which("ansible-playbook") or "ansible-playbook"


def verdict_code(ansible_rc: int, exit_file: str) -> "tuple[int, str | None]":
    """The exit code for a finished ansible-playbook run, and why, from the verdict the report step wrote."""
    try:
        with open(exit_file, "rb") as handle:
            data = handle.read(RECORD_MAX + 1)
    except FileNotFoundError:
        if ansible_rc == 0:  # e.g. --tags or --skip-tags that skip the report step: never a pass
            return ERROR, "no verdict: ansible-playbook exited 0 without running the report step"
        return ERROR, "ansible-playbook exited %d before the report step gave a verdict" % ansible_rc
    if ansible_rc not in ANSIBLE_FINISHED:
        return ERROR, "ansible-playbook exited %d (an error of Ansible or the playbook)" % ansible_rc
    try:
        record = json.loads(data) if len(data) <= RECORD_MAX else None
        gate = record.get("gate", True)
        if gate not in (True, False):
            raise TypeError(gate)
        if gate is False:  # reports only: Ansible's own success or failure
            return (0, None) if ansible_rc == 0 else (ERROR, "ansible-playbook exited %d" % ansible_rc)
        return EXIT_CODES[record["verdict"]], None
    except (ValueError, TypeError, KeyError, AttributeError):
        return ERROR, "the report step's record %s has no verdict (pass, fail or incomplete)" % exit_file


def listing_mode(argv: list) -> bool:
    """Whether ansible-playbook only lists or checks the playbook (LISTING_OPTIONS)."""
    return any(arg in LISTING_OPTIONS for arg in argv)


def sweep_stale(parent: str) -> list:
    """Remove the private folders of earlier runs that were killed (own_folders.sweep)."""
    return own_folders.sweep(parent, WORK_PREFIX)


def run_processes(token: str) -> list:
    """The pids of the processes whose environment holds RUN_ENV=token (this run's), but ours."""
    marker = ("%s=%s" % (RUN_ENV, token)).encode()
    found = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit() or int(entry) == os.getpid():
            continue
        try:
            with open("/proc/%s/environ" % entry, "rb") as handle:
                if marker in handle.read().split(b"\0"):
                    found.append(int(entry))
        except OSError:
            continue  # ended meanwhile, or not readable (not ours)
    return found


def kill_run(token: str, grace_s: float = 2.0) -> None:
    """End every process of the run: TERM, then KILL what is left after grace_s."""
    import time  # pylint: disable=import-outside-toplevel
    for sig in (signal.SIGTERM, signal.SIGKILL):
        pids = run_processes(token)
        for pid in pids:
            try:
                os.kill(pid, sig)
            except OSError:
                pass
        deadline = time.monotonic() + grace_s
        while pids and time.monotonic() < deadline:
            time.sleep(0.05)
            pids = run_processes(token)
        if not pids:
            return


def watchdog(token: str) -> None:
    """Run as its own process (start_watchdog): wait for the end of stdin, a pipe whose only writer
    is `ext4audit run`; a byte before the end says it ended normally. Otherwise it was killed:
    end the run's processes."""
    if os.read(0, 1):
        return
    kill_run(token)


def start_watchdog(token: str):
    """The watchdog in its own session (a signal to our group does not reach it); returns the pipe's
    writing end (closed with a byte on a normal end) and the process."""
    read_end, write_end = os.pipe()
    package_parent = os.path.dirname(os.path.dirname(os.path.abspath(ext4audit.__file__)))
    env = dict(os.environ)
    env.pop(RUN_ENV, None)
    # this package, whether installed or run from a checkout
    env["PYTHONPATH"] = os.pathsep.join([package_parent] + ([env["PYTHONPATH"]] if env.get("PYTHONPATH") else []))
    try:
        process = subprocess.Popen([sys.executable, "-m", "ext4audit.cli.run", WATCHDOG_OPTION, token], stdin=read_end,
                                   stdout=subprocess.DEVNULL, start_new_session=True, env=env)
    finally:
        os.close(read_end)
    return write_end, process


def _own_group_in_front():
    """In the child before exec: its own process group, and the terminal's foreground group when
    ours was (as a shell does for a job), so a password prompt reads and Ctrl-C reaches Ansible."""
    os.setpgid(0, 0)
    try:
        if os.isatty(0) and os.tcgetpgrp(0) == os.getpgid(os.getppid()):
            previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            os.tcsetpgrp(0, os.getpgrp())
            signal.signal(signal.SIGTTOU, previous)
    except OSError:
        pass


def _take_terminal_back():
    try:
        if os.isatty(0) and os.tcgetpgrp(0) != os.getpgrp():
            previous = signal.signal(signal.SIGTTOU, signal.SIG_IGN)
            os.tcsetpgrp(0, os.getpgrp())
            signal.signal(signal.SIGTTOU, previous)
    except OSError:
        pass


def main(argv: list) -> int:
    """Run ansible-playbook with argv; return the gate's exit code."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: ext4audit run [--] PLAYBOOK [ANSIBLE-PLAYBOOK ARGS...]", file=sys.stderr)
        return ERROR
    sweep_stale(tempfile.gettempdir())
    token = secrets.token_hex(16)
    with tempfile.TemporaryDirectory(prefix=WORK_PREFIX) as private:  # mode 0700: only we write there
        own_folders.claim(private)  # a folder of a killed run is removed at the next start
        exit_file = os.path.join(private, "verdict.json")
        command = [ansible_playbook()] + argv + ["-e", json.dumps({EXIT_FILE_VAR: exit_file})]
        # the playbook's `ext4audit` commands run in forks of this process (forkserver.py)
        listener, server_path = forkserver.listen(private)
        env = dict(os.environ, **{RUN_ENV: token}, **({forkserver.ENV: server_path} if listener else {}))
        watch_fd, watcher = start_watchdog(token)
        try:
            child = subprocess.Popen(command, env=env, preexec_fn=_own_group_in_front)
        except OSError as exc:
            print("ext4audit run: cannot start %s: %s" % (command[0], exc), file=sys.stderr)
            if listener:
                listener.close()
            os.write(watch_fd, b"x")
            os.close(watch_fd)
            return ERROR

        def forward(signum, _frame):
            """A TERM or INT (a CI job cancelled) goes to the playbook's group; what is left of the
            run after STOP_GRACE_S is killed (SIGALRM)."""
            stopped.append(signum)
            try:
                os.killpg(child.pid, signum)
            except OSError:
                pass
            signal.alarm(STOP_GRACE_S)

        stopped = []

        previous = {sig: signal.signal(sig, forward) for sig in (signal.SIGTERM, signal.SIGINT)}
        previous[signal.SIGALRM] = signal.signal(signal.SIGALRM, lambda _s, _f: kill_run(token, 0.5))
        try:
            ansible_rc = forkserver.serve(listener, child, playbook_command, PRELOAD)
        finally:
            _take_terminal_back()
            signal.alarm(0)
            for sig, handler in previous.items():
                signal.signal(sig, handler)
            if listener:
                listener.close()
            os.write(watch_fd, b"x")  # a normal end: the watchdog leaves the run alone
            os.close(watch_fd)
        watcher.wait()
        if stopped or ansible_rc not in ANSIBLE_FINISHED:  # stopped or broken: no orphan outlives the run
            kill_run(token)
        if listing_mode(argv):  # not a gate: Ansible's own code, no verdict line
            return ansible_rc
        code, why = verdict_code(ansible_rc, exit_file)
    if why:
        print("ext4audit run: exit %d: %s" % (code, why), file=sys.stderr)
    return code


if __name__ == "__main__":
    if sys.argv[1:2] == [WATCHDOG_OPTION]:
        sys.exit(watchdog(sys.argv[2]))
    sys.exit(main(sys.argv[1:]))
