"""`ext4audit run [--] PLAYBOOK [ARGS...]`: ansible-playbook with the gate's exit codes.

ansible-playbook exits 2 when any task failed (the gate's own "Stop unless the verdict is pass"
too) and 4 when a host was unreachable, so its code cannot tell "the fleet is bad" from "the tool
broke". This runs it with the same arguments and its output untouched, and gives it a private file
(the extra variable ext4_audit_exit_file, in a folder only this user can write) where the report
step itself writes its verdict (`ext4audit report --verdict-file`). The exit code is then the one
`ext4audit gate` gives (reports.EXIT_CODES): 0 pass, 1 policy failed, 2 incomplete; and 2 whenever
the playbook did not reach a verdict or Ansible itself failed. The run folder is never read back
for the verdict: what is there could have changed since the report step wrote it.
A playbook that gates on nothing (ext4_audit_gate false) exits as ansible-playbook does, 0 or 2.

`make audit` runs it as `python -m ext4audit.run`: the other commands' modules (numpy, the
catalog...) are not imported before ansible-playbook starts; they are loaded while it runs, for
the verdict and for the playbook's own `ext4audit` commands (the report step), which run in forks
of this process (ext4audit/forkserver.py).
"""

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile

from . import forkserver

EXIT_FILE_VAR = "ext4_audit_exit_file"
RECORD_MAX = 64 * 1024
# ansible-playbook's codes for a run that went to its end: 0, 2 some task failed on a host, 4 a host
# was unreachable. The verdict already counts such hosts (not audited: incomplete, by policy).
ANSIBLE_FINISHED = (0, 2, 4)
ERROR = 2  # reports.EXIT_CODES["incomplete"] (tests/unit/test_run.py); reports is imported late
VERDICT_CODES = {"pass": 0, "fail": 1, "incomplete": ERROR}  # reports.EXIT_CODES (the same test)


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
        if ansible_rc == 0:
            return 0, None  # nothing gated (ext4_audit_gate false, or a playbook without a report step)
        return ERROR, "ansible-playbook exited %d before the report step gave a verdict" % ansible_rc
    if ansible_rc not in ANSIBLE_FINISHED:
        return ERROR, "ansible-playbook exited %d (an error of Ansible or the playbook)" % ansible_rc
    try:
        record = json.loads(data) if len(data) <= RECORD_MAX else None
        return VERDICT_CODES[record["verdict"]], None
    except (ValueError, TypeError, KeyError):
        return ERROR, "the report step's record %s has no verdict (pass, fail or incomplete)" % exit_file


def main(argv):
    """Run ansible-playbook with argv; return the gate's exit code."""
    if argv[:1] == ["--"]:
        argv = argv[1:]
    if not argv:
        print("usage: ext4audit run [--] PLAYBOOK [ANSIBLE-PLAYBOOK ARGS...]", file=sys.stderr)
        return ERROR
    with tempfile.TemporaryDirectory(prefix="ext4audit-run-") as private:  # mode 0700: only we write there
        exit_file = os.path.join(private, "verdict.json")
        command = [ansible_playbook()] + argv + ["-e", json.dumps({EXIT_FILE_VAR: exit_file})]
        # the playbook's `ext4audit` commands run in forks of this process (forkserver.py)
        listener, server_path = forkserver.listen(private)
        try:
            child = subprocess.Popen(command, env=dict(os.environ, **({forkserver.ENV: server_path} if listener else {})))
        except OSError as exc:
            print("ext4audit run: cannot start %s: %s" % (command[0], exc), file=sys.stderr)
            if listener:
                listener.close()
            return ERROR
        # A terminal's Ctrl-C reaches ansible-playbook itself (same process group); a TERM sent
        # to this process (a CI job cancelled) is passed on, and the run ends as Ansible ends it.
        previous = signal.signal(signal.SIGTERM, lambda signum, _frame: child.send_signal(signum))
        try:
            ansible_rc = forkserver.serve(listener, child)
        finally:
            signal.signal(signal.SIGTERM, previous)
            if listener:
                listener.close()
        code, why = verdict_code(ansible_rc, exit_file)
    if why:
        print("ext4audit run: exit %d: %s" % (code, why), file=sys.stderr)
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
