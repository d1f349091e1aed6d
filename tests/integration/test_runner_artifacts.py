"""What AWX sees of an audit, through ansible-runner (AWX's engine): the verdict, the counts by
severity, the run id and where the reports and the store entry are in `artifact_data` (set_stats);
a host that could not be reached in runner's `dark`, the job failed unless the verdict is pass."""

import os

import ansible_runner
import yaml

from conftest import ROOT, VENV_BIN, free_port, load_host_report, load_json

SEVERITIES = ["critical", "high", "info", "low", "medium"]


def test_runner_job_carries_the_verdict_and_counts_the_host_unreachable(tmp_path, monkeypatch):
    reports = tmp_path / "reports"
    inventory = {"all": {"vars": {"ext4_audit_become": False, "chopper_probe_enabled": False}, "hosts": {
        "localhost": {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}"},
        # A port nothing listens on: ssh is refused at once, no traffic leaves the machine.
        "gone-1": {"ansible_host": "127.0.0.1", "ansible_port": free_port(), "ansible_connection": "ssh",
                   "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no -o BatchMode=yes"}}}}
    (tmp_path / "hosts.yml").write_text(yaml.safe_dump(inventory))
    (tmp_path / "job").mkdir()
    monkeypatch.setenv("PATH", VENV_BIN + os.pathsep + os.environ["PATH"])  # runner starts ansible-playbook
    job = ansible_runner.run(
        private_data_dir=str(tmp_path / "job"), project_dir=ROOT, playbook="playbooks/audit.yml",
        inventory=str(tmp_path / "hosts.yml"), quiet=True,
        extravars={"ext4_audit_reports_dir": str(reports), "chopper_probe_enabled": False},
        envvars={"ANSIBLE_CONFIG": os.path.join(ROOT, "ansible.cfg"), "ANSIBLE_NOCOLOR": "1", "PYTHONPATH": ROOT})
    output = job.stdout.read()
    stats = [event["event_data"] for event in job.events if event["event"] == "playbook_on_stats"][-1]

    # Ansible's own stats count the host unreachable (AWX's host list), once.
    assert stats["dark"] == {"gone-1": 1}, output[-3000:]
    assert any(event["event"] == "runner_on_unreachable" and event["event_data"]["host"] == "gone-1"
               for event in job.events)
    # The verdict is not pass: the job failed (the gate's task), as AWX marks it.
    assert job.status == "failed" and job.rc != 0
    assert stats["failures"] == {"localhost": 1}

    # artifact_data: what a workflow's next node reads, each fact as the report step wrote it.
    result = stats["artifact_data"]["ext4_audit_result"]
    run_dir = result["run_dir"]
    summary = load_json(os.path.join(run_dir, "summary.json"))
    assert result["verdict"] == summary["verdict"] == "incomplete"
    assert result["reason"] == summary["reason"] and "gone-1: unreachable" in result["reason"]
    assert result["counts"] == summary["counts"]["by_severity"] and sorted(result["counts"]) == SEVERITIES
    assert result["run_id"] == summary["run_id"] == os.path.basename(run_dir)
    assert os.path.dirname(run_dir) == str(reports)
    assert result["report_html"] == os.path.join(run_dir, "report.html") and os.path.isfile(result["report_html"])
    assert result["store"] == str(reports / "history.sqlite") and os.path.isfile(result["store"])
    assert result["store_slice"] == ""
    # The report is complete: the unreachable host is in it, with its reason.
    assert [(h["host"], h["status"]) for h in summary["hosts_not_audited"]] == [("gone-1", "unreachable")]
    assert load_host_report(os.path.join(run_dir, "hosts", "localhost.json"))["status"] == "audited"
