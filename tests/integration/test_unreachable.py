"""A host that cannot be reached: the others' reports are complete and the verdict is incomplete."""

import glob
import os

from conftest import ansible_playbook, load_host_report, load_json


def test_unreachable_host_makes_the_run_incomplete(tmp_path):
    inventory = tmp_path / "hosts.yml"
    # Port 9 on loopback: nothing listens, so ssh is refused at once (no traffic leaves the machine).
    inventory.write_text(
        "all:\n  vars:\n    ext4_audit_become: false\n  hosts:\n"
        "    localhost:\n      ansible_connection: local\n      ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        "    gone-1:\n      ansible_host: 127.0.0.1\n      ansible_port: 9\n      ansible_connection: ssh\n"
        "      ansible_ssh_common_args: '-o ConnectTimeout=3 -o StrictHostKeyChecking=no -o BatchMode=yes'\n")
    reports = tmp_path / "reports"
    rc, out = ansible_playbook("-i", str(inventory), "playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports)
    assert rc != 0 and "verdict: incomplete" in out, out
    run = [p for p in glob.glob(str(reports / "*")) if os.path.isdir(p) and not p.endswith("latest")][0]
    summary = load_json(os.path.join(run, "summary.json"))
    assert summary["verdict"] == "incomplete"
    assert [h["host"] for h in summary["hosts_not_audited"]] == ["gone-1"]
    assert summary["hosts_not_audited"][0]["status"] == "unreachable"
    assert "Connection refused" in summary["hosts_not_audited"][0]["reason"] or \
        "connect" in summary["hosts_not_audited"][0]["reason"].lower()
    local = load_host_report(os.path.join(run, "hosts", "localhost.json"))
    assert local["status"] == "audited" and local["filesystems"]

    # With the policy that unreachable hosts do not count, the same situation passes or fails on findings.
    rc, out = ansible_playbook("-i", str(inventory), "playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                               "-e", '{"ext4_audit_unreachable_is_incomplete": false}', "-e", "ext4_audit_fail_on=critical")
    assert rc == 0 and "verdict: pass" in out, out
