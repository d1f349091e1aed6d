"""The Molecule scenarios as CI runs them (root): `molecule test -s default`, `-s fleet` and
`-s kernels` from the repository root, timed step by step, and then nothing of them left: no sshd
of the fleet, no loop device backed by their images, no mount of them in any mount namespace, no
qemu or overlay of the kernels scenario.

Slow (here about 0.6, 1 and 5-6 minutes; kernels 1.5-2 more when it builds the VM image); skip
them with `pytest --ignore=tests/fleet`, or the VMs with `-k 'not kernels'` (`-k fleet` matches
all three: the folder is named fleet).
"""

import glob
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, VENV_BIN, needs_root, run

pytestmark = needs_root

HELPER = os.path.join(ROOT, "testhosts", "fleet", "fleet_host.py")
# Each scenario's time limit in seconds. kernels: a cold image build, two TCG boots and three
# probe runs, on a machine other tests may load (measured 4.7-8.6 min).
TIMEOUTS = {"default": 1200, "fleet": 1200, "kernels": 3600}
# The kernels scenario's VM run folder and results (molecule/kernels/vars/scenario.yml).
KERNELS_VMS = os.path.join(ROOT, ".cache", "testhosts", "vm", "run-molecule-kernels")
KERNELS_RESULTS = os.path.join(ROOT, ".cache", "molecule", "kernels")
VM_TOOLS = ["/usr/bin/qemu-system-x86_64", "/usr/bin/qemu-img", "/usr/sbin/debootstrap"]
# What the loop-device scenarios make (see molecule/*/molecule.yml), for the leftover check.
MADE = {
    "default": ["--images", "/dev/shm/ext4audit-molecule-default"],
    "fleet": ["--state", os.path.join(ROOT, ".cache", "testhosts", "fleet"), "--images", "/dev/shm/ext4audit-fleet"],
}
# Lines that say what went wrong, in Molecule's, Ansible's (nested runs' too) and pytest's words.
ESSENTIAL = re.compile(r"fatal:|FAILED!|ERROR|CRITICAL|Traceback|AssertionError|^E\s|^FAILED |"
                       r"\bfailed=[1-9]|\bunreachable=[1-9]|Timeout|timed out")
NOISE = re.compile(r"FAILED - RETRYING")   # vm_up.yml's wait for SSH: progress, not an error
# Molecule's line at the start of each step, e.g. "INFO     [kernels > converge] Executing".
STEP = re.compile(r"^INFO\s+\[\w+ > (\w+)\] Executing")
# On a terminal Molecule frames each command's output in a box ("  │ fatal: ..."); not in CI.
BOX = re.compile(r"^\s*[│┌└]\s?")


def what_failed(output, context=4, most=40, tail=20):
    """(first error with the step it came in, the error lines each with a few after it, the end of
    the output). Ansible prints a task's details below its `fatal:` line. CI logs keep ~160 lines,
    so this stays short and says the essential first."""
    lines = [BOX.sub("", line)[:300] for line in output.splitlines()]
    keep, seen, first, step = [], set(), None, None
    for number, line in enumerate(lines):
        match = STEP.match(line)
        if match and first is None:
            step = match.group(1)
        if ESSENTIAL.search(line) and not NOISE.search(line):
            if first is None:
                first = "in step %s: %s" % (step, line.strip())
            for n in range(number, min(number + context + 1, len(lines))):
                # A nested run's output comes twice (stdout, stdout_lines): keep each line once.
                text = lines[n].strip().lstrip("- ").strip("'\"")
                if n not in keep and (text not in seen or not text):
                    keep.append(n)
                    seen.add(text)
    return "\n".join(["first error " + (first or "(none recognised)"),
                      "--- error lines (%d of %d) ---" % (min(most, len(keep)), len(keep))]
                     + [lines[n] for n in keep[:most]] + ["--- last %d lines ---" % tail] + lines[-tail:])


def leftovers(scenario):
    if scenario == "kernels":
        return {"qemu": live_processes_mentioning(KERNELS_VMS),
                "run folder (overlays)": sorted(glob.glob(os.path.join(KERNELS_VMS, "**"), recursive=True))
                if os.path.exists(KERNELS_VMS) else []}
    return json.loads(run([sys.executable, HELPER, "status"] + MADE[scenario]))


def live_processes_mentioning(marker):
    """Pids whose command line holds marker (a zombie's command line is empty: it is gone)."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(int(path.split("/")[2]))
        except OSError:
            pass  # exited while we looked
    return found


def kill_tree(pid):
    """SIGKILL pid and every process descended from it. Ansible's workers start sessions of their
    own (a nested ansible-playbook under them would go on booting VMs), so a process group is not
    enough. The tree is frozen first (SIGSTOP: no more forks, no orphan leaves it), then killed.
    A daemonized qemu has left the tree already: molecule destroy stops it."""
    stopped = set()
    while True:
        parents = {}
        for path in glob.glob("/proc/[0-9]*/stat"):
            try:
                with open(path) as handle:
                    state, parent = handle.read().rsplit(")", 1)[1].split()[:2]
                if state != "Z":   # a zombie has nothing left to stop
                    parents[int(path.split("/")[2])] = int(parent)
            except (OSError, ValueError):
                pass  # exited while we looked
        tree, grown = {pid}, True
        while grown:
            children = {child for child, parent in parents.items() if parent in tree} - tree
            tree |= children
            grown = bool(children)
        new = {member for member in tree if member in parents} - stopped
        if not new:
            break
        for member in new:
            signal_quietly(member, signal.SIGSTOP)
        stopped |= new
    for member in stopped:
        signal_quietly(member, signal.SIGKILL)


def signal_quietly(pid, signum):
    try:
        os.kill(pid, signum)
    except ProcessLookupError:
        pass  # exited meanwhile


def molecule(action, scenario, timeout):
    """Run `molecule ACTION -s SCENARIO` in its own session; on timeout kill it and all it started
    but daemons. Returns (rc, None on timeout; the output; [(step, seconds)]; total seconds)."""
    # molecule runs ansible-config, ansible-playbook and pytest from PATH: the venv's first.
    env = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               NO_COLOR="1", PY_COLORS="0", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               COLUMNS="160")   # Molecule wraps its output at this width
    started = time.monotonic()
    proc = subprocess.Popen([os.path.join(VENV_BIN, "molecule"), action, "-s", scenario], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, start_new_session=True)
    lines, steps = [], []
    log_path = os.path.join(ROOT, ".cache", "molecule", "%s-%s.log" % (scenario, action))
    os.makedirs(os.path.dirname(log_path), exist_ok=True)

    def read():
        with open(log_path, "w") as log:   # the whole output, for a look afterwards
            for raw in proc.stdout:
                line = raw.decode(errors="replace").rstrip("\n")
                lines.append(line)
                log.write(line + "\n")
                match = STEP.match(line)
                if match:
                    steps.append((match.group(1), time.monotonic()))

    # A reader thread, so that the timeout holds even while a step prints nothing for long.
    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        rc = proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_tree(proc.pid)
        proc.wait()
        rc = None
    reader.join(timeout=30)
    ended = time.monotonic()
    seconds = [(name, round((steps[i + 1][1] if i + 1 < len(steps) else ended) - at, 1))
               for i, (name, at) in enumerate(steps)]
    return rc, "\n".join(lines), seconds, round(ended - started, 1)


@pytest.mark.parametrize("scenario", sorted(TIMEOUTS))
def test_molecule_scenario(scenario, record_property):
    if scenario == "kernels" and not all(os.path.exists(tool) for tool in VM_TOOLS):
        pytest.skip("needs qemu and debootstrap: apt-get install qemu-system-x86 qemu-utils debootstrap (make vm-deps)")
    rc, output, steps, seconds = molecule("test", scenario, TIMEOUTS[scenario])
    record_property("seconds", seconds)
    record_property("steps", steps)
    print("molecule test -s %s: %.1f s; steps (s): %s" % (scenario, seconds, ", ".join("%s %.1f" % s for s in steps)))
    if rc is None:
        # Killed: whatever it had started must still go (VMs above all).
        destroy_rc, destroy_output, _, _ = molecule("destroy", scenario, 900)
        pytest.fail("TIMEOUT: molecule test -s %s ran past %d s, killed in step %s; molecule destroy then: rc=%s, "
                    "left behind: %s; %s\n--- molecule destroy ---\n%s" % (
                        scenario, TIMEOUTS[scenario], steps[-1][0] if steps else None, destroy_rc,
                        leftovers(scenario), what_failed(output),
                        what_failed(destroy_output, most=10, tail=10)), pytrace=False)
    if rc != 0 or "Verifier completed successfully" not in output:
        # pytrace=False: no test source in the log, the message alone (whole output: .cache/molecule/)
        pytest.fail("molecule test -s %s: rc=%d, %s" % (scenario, rc, what_failed(output)), pytrace=False)

    left = leftovers(scenario)
    assert not any(left.values()), "left behind by molecule test -s %s: %s" % (scenario, left)
    if scenario == "kernels":
        numbers = kernel_gate_numbers()
        record_property("kernel_gates", numbers)
        print(numbers)


def kernel_gate_numbers():
    """One line per gate the kernels scenario ran, from the reports it keeps."""
    lines = []
    for name in ("upgrade", "injected_vs_before", "injected_vs_baseline"):
        with open(os.path.join(KERNELS_RESULTS, "gates", name + ".json")) as handle:
            gate = json.load(handle)
        d = gate["dspan"]
        confirmations = ", ".join("%s %.2f->%.2f" % (r["probe"], r["baseline"], r["candidate"])
                                  for r in gate["confirmations"] if r["baseline"] and r["candidate"])
        lines.append("%s (%s -> %s): %s; %d pairs, p99 %+.0f%%, Wilcoxon p=%.2g, effect %.2f, tail %.0f%%->%.0f%%; %s" % (
            name, gate["baseline"]["kernel"], gate["candidate"]["kernel"], gate["verdict"].upper(),
            d["paired_treatments"], 100 * d["p99_change"], d["wilcoxon_p"], d["effect_size"],
            100 * d["tail_share"]["baseline"], 100 * d["tail_share"]["candidate"], confirmations))
    with open(os.path.join(KERNELS_RESULTS, "converge.json")) as handle:
        lines.append("durations: %s" % json.load(handle)["durations"])
    return "\n".join(lines)
