"""What an operator sees and what CI reads, through the real playbook and `ext4audit run`: a short
screen output with the probe's progress streamed live through a pipe, changed=0 on a plain run,
and the gate's exit codes (0 pass, 1 policy failed, 2 incomplete or could not run)."""

import json
import os
import re
import subprocess
import time

from conftest import ROOT, VENV_BIN, needs_root

pytestmark = needs_root

ENV = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
RUN = [os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "run", "--"]
RECAP = re.compile(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)", re.M)


def timestamped_run(argv):
    """(rc, [(seconds since start, line)]) of a run read line by line from a pipe, as a CI log reads it."""
    started = time.monotonic()
    child = subprocess.Popen(argv, cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    lines = [(time.monotonic() - started, raw.decode(errors="replace").rstrip("\n")) for raw in child.stdout]
    return child.wait(), lines


def wrapped(*args):
    result = subprocess.run(RUN + list(args), cwd=ROOT, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return result.returncode, result.stdout.decode(errors="replace")


def test_make_audit_is_short_streams_the_probe_live_and_changes_nothing(tmp_path):
    # `make audit` as the README gives it (the embedded inventory, probe on), piped; only the policy
    # is set so the verdict does not depend on this machine's own findings. Slow (~40 s): the probe
    # must run for its progress to stream.
    rc, lines = timestamped_run(RUN + ["playbooks/audit.yml", "-e", "ext4_audit_fail_on=critical",
                                       "-e", "ext4_audit_reports_dir=%s" % (tmp_path / "reports")])
    out = "\n".join(text for _, text in lines)
    assert rc == 0, out
    assert len(lines) <= 40, out
    assert "TASK [" not in out and "ASYNC POLL" not in out, out

    # The probe's lines arrive as the probe writes them: the time between the first sweep line and
    # the probe's last line on the pipe matches the time the probe itself says passed between them
    # (before, every line came in one block after the probe ended).
    progress = [(at, text) for at, text in lines if text.startswith("  probe localhost: ")]
    sweep = [(at, text) for at, text in progress if "sweep " in text]
    assert sweep and progress[-1][1].startswith("  probe localhost: ok in "), out
    first_at, last_at = sweep[0][0], progress[-1][0]
    first_probe_s = int(re.search(r"sweep (\d+)/", sweep[0][1]).group(1)) / float(
        re.search(r", (\d+) runs/s", sweep[0][1]).group(1))
    probe_s = float(re.search(r"ok in ([0-9.]+) s", progress[-1][1]).group(1))
    assert last_at - first_at > 0.5 * (probe_s - first_probe_s), (first_at, last_at, probe_s, out)
    assert re.search(r"sweep \d+/\d+ runs, \d+ runs/s, \d+ s left", sweep[0][1]), out
    assert any("confirmation " in text for _, text in progress), out
    # The probe play's line comes after its progress, the summary table after that.
    [probe_play] = [at for at, text in lines if text.startswith("Probe the hosts that opt in") and ": localhost ok" in text]
    assert probe_play >= last_at, out
    [header] = [text for _, text in lines if text.startswith("host ")]
    assert header.split() == ["host", "worst", "findings", "undetermined", "read", "errors", "probe"], out
    assert re.search(r"^verdict: pass: ", out, re.M) and re.search(r"^report: /.*/report\.html$", out, re.M), out

    # Read-only in fact: a plain run (not --check), the probe included, changes nothing.
    recap = RECAP.findall(out)
    assert recap == [("localhost", "0", "0", "0")], out


def test_exit_codes_are_the_gates(loopfs, tmp_path):
    # A mount with a high finding (nobarrier) on this machine; the probe is off in this inventory.
    loopfs.make("nobarrier", size="256M", mount_options="nobarrier")
    inventory = tmp_path / "hosts.yml"
    local = ("all:\n  vars:\n    ext4_audit_become: false\n  hosts:\n"
             "    localhost:\n      ansible_connection: local\n"
             "      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n")
    inventory.write_text(local)
    common = ["-i", str(inventory), "playbooks/audit.yml", "-e", json.dumps({"ext4_audit_reports_dir": str(tmp_path / "r")})]

    # Policy failed: 1 (ansible-playbook alone exits 2, the code of any failed task).
    rc, out = wrapped(*common + ["-e", "ext4_audit_fail_on=high"])
    assert rc == 1 and re.search(r"^verdict: fail: ", out, re.M), out

    # Pass: 0; -v gives Ansible's own output back.
    rc, out = wrapped(*common + ["-e", "ext4_audit_fail_on=critical", "-v"])
    assert rc == 0 and "TASK [" in out and "verdict: pass" in out, out

    # A host that cannot be reached: the verdict is incomplete, 2 (ansible-playbook alone: 2 or 4).
    gone = inventory.parent / "gone.yml"
    gone.write_text(local + "    gone-1:\n      ansible_host: 127.0.0.1\n      ansible_port: 9\n"
                    "      ansible_connection: ssh\n"
                    "      ansible_ssh_common_args: '-o ConnectTimeout=3 -o StrictHostKeyChecking=no -o BatchMode=yes'\n")
    rc, out = wrapped("-i", str(gone), *common[2:] + ["-e", "ext4_audit_fail_on=critical"])
    assert rc == 2 and re.search(r"^verdict: incomplete: ", out, re.M) and "UNREACHABLE gone-1" in out, out

    # The tool could not run (a bad policy value stops the first play): 2, never 1 or 0.
    rc, out = wrapped(*common + ["-e", "ext4_audit_fail_on=severe"])
    assert rc == 2 and "ext4_audit_fail_on must be one of" in out, out
    assert "exit 2: ansible-playbook exited 2 before the report step gave a verdict" in out, out
