"""The AWX workflow of docs/scaling.md, end to end: the slices of a sliced job template as separate
ansible-runner jobs (AWX's engine), each in its own private data directory with its own reports
folder, recording into one night of a real PostgreSQL store; then the gate node gates the night
from the store alone (no shared folder)."""

import os
import subprocess
import sys

import yaml

from conftest import ROOT, VENV_BIN
from ext4audit.store import history, schema

SLICES = ("a", "b")


def runner_job(private, slice_name, store, password, run_id="nightly-20261129", limit=None):
    """One slice job: ansible-runner over playbooks/audit.yml with the extra variables the docs give
    (limit: the job template's limit, ansible-playbook's --limit)."""
    for folder in ("env", "inventory"):
        (private / folder).mkdir(parents=True)
    (private / "inventory" / "hosts.yml").write_text(yaml.safe_dump({"all": {"hosts": {
        "slice-%s-host" % slice_name: {"ansible_connection": "local", "chopper_probe_enabled": False,
                                        "ansible_python_interpreter": "{{ ansible_playbook_python }}"}}}}))
    (private / "env" / "envvars").write_text(yaml.safe_dump({
        "ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "PYTHONPATH": ROOT,
        "PGPASSWORD": password}))  # an AWX credential injects it; never an extra variable
    (private / "env" / "extravars").write_text(yaml.safe_dump({
        "ext4_audit_store": store, "ext4_audit_run_id": run_id, "ext4_audit_store_slice": slice_name,
        "ext4_audit_gate": False, "ext4_audit_reports_dir": str(private / "reports")}))
    return subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ansible_runner", "run", str(private),
                           "--project-dir", ROOT, "-p", "playbooks/audit.yml", "--ident", "slice-" + slice_name]
                          + (["--limit", limit] if limit else []),
                          env=dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ["PATH"]),
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


def test_awx_slices_meet_in_postgresql_and_the_gate_node_gates_the_night(postgresql, tmp_path):
    store = postgresql["url"]
    for name in SLICES:
        job = runner_job(tmp_path / ("slice-" + name), name, store, postgresql["password"])
        out = job.stdout.decode(errors="replace")
        assert job.returncode == 0, out[-3000:]
        assert (tmp_path / ("slice-" + name) / "artifacts" / ("slice-" + name) / "status").read_text() == "successful"
        assert "history (%s)" % store in out  # the report step recorded the slice
    env = dict(os.environ, PGPASSWORD=postgresql["password"], PYTHONPATH=ROOT)
    gate = subprocess.run([sys.executable, "-m", "ext4audit", "gate", "--store", store, "--run", "nightly-20261129",
                           "--slice-count", "2"], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    out = gate.stdout.decode()
    assert gate.returncode in (0, 1), gate.stderr.decode()
    assert "2 slice(s) reported (a, b), 2 host(s), 2 audited" in out
    missing = subprocess.run([sys.executable, "-m", "ext4audit", "gate", "--store", store, "--run", "nightly-20261129",
                              "--slice-count", "3"], env=env, cwd=str(tmp_path), stdout=subprocess.PIPE)
    assert missing.returncode == 2 and b"3 slice(s) expected" in missing.stdout
    # the night's scope, as the report task passed it: the facts play's hosts; a job with a limit
    # records that limit (the store's nightly diff compares nights of one scope)
    job = runner_job(tmp_path / "limited", "c", store, postgresql["password"], "limited-20261129", "slice-c-host")
    assert job.returncode == 0, job.stdout.decode(errors="replace")[-3000:]
    os.environ["PGPASSWORD"] = postgresql["password"]
    with schema.open_store(store) as recorded:
        assert dict((r["run_id"], r["scope"]) for r in history.runs(recorded)) == {
            "nightly-20261129": "all", "limited-20261129": "slice-c-host"}
