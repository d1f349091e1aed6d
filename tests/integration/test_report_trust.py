"""What a hostile host, a hostile user or a second run can do to the report step and the gate, done
as they would: real `ext4audit run` / ansible-playbook runs, fake hosts whose "Python" is a script
that answers what an attacker's host would send (or never answers), and racing processes as the
user `nobody`.

- Every host of the play ends in the summary: an answer that says skipped, holds a lone surrogate,
  is nested 10,000 deep, wrong-typed, has a NaN, is past a bound (100,000 filesystems, 20 MB), or
  never comes (the facts task's timeout) fails that host with the reason; hosts named `.hidden`,
  `../evil` or 300 characters long are audited like any other; the run is incomplete (exit 2).
- A reports folder another user can write is refused before any host is contacted, so `nobody`
  can neither swap in a run folder whose summary.json says pass nor a symbolic link that makes the
  run write into a folder of their choosing; `ext4audit run` exits by the report step's own verdict.
- Two runs with the same run id never share a folder, also when started at the same moment; a run
  id that is not a plain name (../../x, a/b) is refused.
"""

import glob
import json
import os
import shutil
import stat
import subprocess
import sys
import threading
import time

import pytest

from conftest import ROOT, VENV_BIN, ansible_playbook, load_json, needs_root
from ext4audit.parsers import kernel_version

pytestmark = needs_root

FACTS_SCHEMA = "ext4-fleet-audit/facts/v1"
NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups"]
LONG_NAME = "long-" + "x" * 295  # 300 bytes: more than a file name may have


def facts(filesystems=()):
    kernel = dict(kernel_version.identify("6.18.44", "Linux version 6.18.44 #1 SMP"), page_size=4096)
    return {"schema": FACTS_SCHEMA, "kernel": kernel, "filesystems": list(filesystems), "netfs": []}


def filesystem(number, **extra):
    return dict({"device": "/dev/vd%d" % number, "mountpoint": "/m/%d" % number, "fstype": "ext4",
                 "options_source": "proc", "options": ["rw", "relatime"]}, **extra)


def answer(doc):
    return json.dumps({"changed": False, "ext4_facts": doc})


# host -> (what its "Python" prints, the status it must end with, what its reason must say)
ANSWERS = {
    "skipped": ('{"skipped": true}', "failed", "skipped"),
    "surrogate": (answer(facts([filesystem(1, mountpoint="/srv/\\ud800")])).replace("\\\\ud800", "\\ud800"),
                  "failed", "invalid UTF8"),
    "deep": ('{"changed": false, "ext4_facts": ' + "[" * 10000 + "]" * 10000 + "}", "failed", "recursion"),
    "wrong-type": (answer(dict(facts(), filesystems="all of them")), "failed", "$.facts.filesystems"),
    "nan": (answer(facts([filesystem(1, superblock={"block_size": 4096, "block_count": float("nan")})])),
            "failed", "not finite"),
    "many-filesystems": (answer(facts([filesystem(n) for n in range(100000)])), "failed", "a list of 100000 items"),
    "big": (answer(facts([filesystem(n, notes=["n" * 60000] * 1) for n in range(350)])), "failed", "over 16777216 bytes"),
    ".hidden": (answer(facts([filesystem(1)])), "audited", None),
    "../evil": (answer(facts([filesystem(1)])), "audited", None),
    LONG_NAME: (answer(facts([filesystem(1)])), "audited", None),
}


def fake_hosts(base, answers, hang=()):
    """An inventory of fake hosts: each one's interpreter is a script that prints its answer (the
    module is never run), or sleeps (a host that never answers); returns (inventory, pid folder)."""
    pids = base / "pids"
    pids.mkdir()
    lines = ["all:", "  vars:", "    ext4_audit_become: false", "  hosts:"]
    for number, (host, text) in enumerate(sorted(answers.items()) + [(h, None) for h in hang]):
        script = base / ("host-%d.sh" % number)
        if text is None:
            script.write_text("#!/bin/sh\necho $$ > %s/%d\nexec sleep 3600\n" % (pids, number))
        else:
            (base / ("answer-%d.json" % number)).write_text(text)
            script.write_text("#!/bin/sh\nexec cat %s/answer-%d.json\n" % (base, number))
        script.chmod(0o755)
        lines += ["    %s:" % json.dumps(host), "      ansible_connection: local",
                  "      ansible_python_interpreter: %s" % script]
    inventory = base / "hosts.yml"
    inventory.write_text("\n".join(lines) + "\n")
    return inventory, pids


def kill_sleepers(pids):
    for path in glob.glob(str(pids / "*")):
        try:
            os.kill(int(open(path).read()), 9)
        except (ValueError, ProcessLookupError):
            pass


def ext4audit_run(*args, env=None, timeout=300):
    """`ext4audit run` (python -m ext4audit.run, as make audit) with args: (exit code, output, seconds);
    a run that hangs fails the test after `timeout` s."""
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   PYTHONPATH=ROOT, **(env or {}))
    started = time.monotonic()
    result = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit.cli.run", "playbooks/audit.yml"]
                            + list(args), cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            timeout=timeout)
    return result.returncode, result.stdout.decode(errors="replace"), time.monotonic() - started


def test_every_host_of_the_play_ends_in_the_summary_with_its_reason(tmp_path):
    inventory, pids = fake_hosts(tmp_path, dict((h, a[0]) for h, a in ANSWERS.items()), hang=["hangs"])
    reports = tmp_path / "reports"
    try:
        rc, out, seconds = ext4audit_run("-i", str(inventory), "-e", "ext4_audit_reports_dir=%s" % reports,
                                         "-e", "ext4_audit_facts_timeout_s=5", "-e", "ext4_audit_fail_on=critical")
    finally:
        kill_sleepers(pids)
    print("%d hosts, %.1f s" % (len(ANSWERS) + 1, seconds))
    assert rc == 2 and "verdict: incomplete" in out and "verdict: pass" not in out, out[-6000:]
    run = os.path.realpath(str(reports / "latest"))
    summary = load_json(os.path.join(run, "summary.json"))
    rows = dict((h["host"], h) for h in summary["hosts"])
    assert sorted(rows) == sorted(list(ANSWERS) + ["hangs"]), sorted(rows)
    reasons = dict((h["host"], h["reason"]) for h in summary["hosts_not_audited"])
    for host, (_, status, reason) in ANSWERS.items():
        assert rows[host]["status"] == status, (host, rows[host], reasons.get(host))
        assert reason is None or reason in reasons[host], (host, reasons[host])
    assert rows["hangs"]["status"] == "failed" and "Timed out" in reasons["hangs"], reasons["hangs"]
    # the host reports of the odd names are plain files in hosts/, each holding its exact name
    names = dict((load_json(p)["host"], os.path.basename(p)) for p in glob.glob(os.path.join(run, "hosts", "*.json")))
    assert names[".hidden"] == "_.hidden.json" and names["../evil"] == "_..%2Fevil.json", names
    assert len(names[LONG_NAME]) <= 255 and names[LONG_NAME].startswith("long-xxx"), names[LONG_NAME]
    for path in glob.glob(os.path.join(run, "facts", "*.json")):
        assert len(os.path.basename(path)) < 100 and not os.path.basename(path).startswith(".")
    # what one host sent is bounded: no facts record, host report or run folder near its size
    assert max(os.path.getsize(p) for p in glob.glob(os.path.join(run, "**", "*"), recursive=True)) < 4 << 20
    assert seconds < 120, "the run took %.0f s" % seconds


# ------------------------------------------------------------------ a reports folder another user can write
# Run as nobody, with the system's Python (standard library only): wait for the run folder, then
# forge: copy it once summary.json is there, with "verdict": "pass", and swap the copy in;
# symlink: swap the run folder for a link to a folder of nobody's, before the facts are saved.
ATTACKER = r"""
import json, os, shutil, sys, time
reports, mode, target = sys.argv[1:4]
deadline = time.time() + 240
while time.time() < deadline:
    for name in os.listdir(reports):
        run = os.path.join(reports, name)
        if name.startswith(".") or name == "latest" or "." in name or os.path.islink(run):
            continue
        if mode == "symlink":
            os.rename(run, run + ".orig")
            os.symlink(target, run)
            print("swapped in a link", flush=True)
            sys.exit(0)
        if os.path.exists(os.path.join(run, "summary.json")):
            forged = run + ".forged"
            shutil.copytree(run, forged, symlinks=True)
            with open(os.path.join(forged, "summary.json")) as handle:
                summary = json.load(handle)
            summary.update(verdict="pass", reason="forged")
            with open(os.path.join(forged, "summary.json"), "w") as handle:
                json.dump(summary, handle)
            os.rename(run, run + ".orig")
            os.rename(forged, run)
            print("swapped in a forged run", flush=True)
            sys.exit(0)
    time.sleep(0.002)
print("nothing to attack", flush=True)
"""


@pytest.fixture
def open_base():
    """A folder nobody can reach (pytest's own are root's, 0700), removed after."""
    import tempfile
    base = tempfile.mkdtemp(prefix="ext4audit-trust-", dir="/tmp")
    os.chmod(base, 0o755)
    try:
        yield base
    finally:
        shutil.rmtree(base, ignore_errors=True)


@pytest.mark.parametrize("attack", ["forge", "symlink"])
def test_a_reports_folder_another_user_can_write_is_refused(open_base, attack):
    from pathlib import Path
    base = Path(open_base)
    nobody = int(subprocess.run(["id", "-u", "nobody"], stdout=subprocess.PIPE, check=True).stdout)
    reports, target = base / "reports", base / "nobodys"
    reports.mkdir()
    if attack == "forge":
        os.chown(str(reports), nobody, -1)  # nobody's own folder
    else:
        reports.chmod(0o777)  # root's, but anyone may write it
    target.mkdir()
    for sub in ("facts", "probe"):
        (target / sub).mkdir()
    for folder in (target, target / "facts", target / "probe"):
        os.chown(str(folder), nobody, -1)
    (base / "hosts").mkdir()
    inventory, _ = fake_hosts(base / "hosts", {"web-1": answer(facts([filesystem(1, options=["rw", "nobarrier"])]))})
    attacker = subprocess.Popen(NOBODY + ["/usr/bin/python3", "-c", ATTACKER, str(reports), attack, str(target)],
                                stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        rc, out, _ = ext4audit_run("-i", str(inventory), "-e", "ext4_audit_reports_dir=%s" % reports,
                                   "-e", "ext4_audit_fail_on=info")
    finally:
        time.sleep(0.5)
        attacker.kill()
        said = attacker.communicate()[0].decode()
    written = [os.path.relpath(p, str(target)) for p in glob.glob(str(target / "**"), recursive=True)
               if os.path.isfile(p)]
    assert written == [], "root wrote into nobody's folder: %s (attacker: %s)" % (written, said)
    assert rc == 2 and "verdict: pass" not in out, "exit %d after: %s\n%s" % (rc, said, out[-4000:])
    assert "can be written by other users" in out or "not to root or this user" in out, out[-4000:]
    assert os.listdir(str(reports)) == [], "a run folder was made in %s" % os.listdir(str(reports))
    assert "Collect ext4 facts" not in out  # refused before any host was contacted


# ------------------------------------------------------------------ the run folder is claimed, once
PREPARE_ONLY = """- hosts: localhost
  gather_facts: false
  tasks:
    - ansible.builtin.import_role:
        name: ext4audit.fleet.ext4_audit
        tasks_from: prepare
"""


def prepare(playbook, reports, run_id):
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    return subprocess.Popen([os.path.join(VENV_BIN, "ansible-playbook"), str(playbook), "-e",
                             "ext4_audit_reports_dir=%s" % reports, "-e", "ext4_audit_run_id=%s" % run_id],
                            cwd=ROOT, env=environ, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_two_runs_started_together_with_one_run_id_never_share_its_folder(tmp_path):
    playbook = tmp_path / "prepare.yml"
    playbook.write_text(PREPARE_ONLY)
    reports, shared, outcomes = tmp_path / "reports", 0, []
    for pair in range(20):
        started = [prepare(playbook, reports, "same-%d" % pair) for _ in range(2)]
        results = [(p.wait(), p.stdout.read().decode(errors="replace")) for p in started]
        claimed = [rc for rc, _ in results if rc == 0]
        outcomes.append(len(claimed))
        refused = [out for rc, out in results if rc != 0]
        assert len(claimed) == 1 or not refused or all("exists already" in out for out in refused), refused
    print("pairs where both runs took the folder: %d of %d" % (outcomes.count(2), len(outcomes)))
    assert outcomes == [1] * 20, outcomes


@pytest.mark.parametrize("run_id", ["../../escaped", "a/b", ".hidden", "latest"])
def test_a_run_id_that_is_not_a_plain_name_is_refused(tmp_path, run_id):
    playbook = tmp_path / "prepare.yml"
    playbook.write_text(PREPARE_ONLY)
    reports = tmp_path / "deep" / "er" / "reports"
    reports.mkdir(parents=True)
    proc = prepare(playbook, reports, run_id)
    rc, out = proc.wait(), proc.stdout.read().decode(errors="replace")
    assert rc != 0 and "ext4_audit_run_id" in out and "is not a run id" in out, out[-3000:]  # (ext4audit check --run-id)
    made = sorted(os.path.relpath(p, str(tmp_path)) for p in glob.glob(str(tmp_path / "**"), recursive=True))
    assert made == [".", "deep", "deep/er", "deep/er/reports", "prepare.yml"], made
