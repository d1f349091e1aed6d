"""ext4_audit_formats through the real playbook: an unknown format stops the run before any host
is contacted, naming it; a list writes those report files, and summary.json and hosts/ always."""

import os

from conftest import ROOT, ansible_playbook, needs_root

pytestmark = needs_root

# The probe is tested elsewhere. PYTHONPATH: this checkout's controller package, whatever checkout
# the venv's editable install points at.
ARGS = ("playbooks/audit.yml", "-e", "chopper_probe_enabled=false", "-e", "ext4_audit_gate=false")
ENV = {"PYTHONPATH": ROOT}


def test_an_unknown_format_stops_the_run_before_any_host(tmp_path):
    reports = tmp_path / "reports"
    rc, out = ansible_playbook(*ARGS, "-e", "ext4_audit_reports_dir=%s" % reports, "-e", "ext4_audit_formats=junit,xml",
                               env=ENV)
    assert rc != 0 and "ext4_audit_formats: unknown report format 'xml': the formats are junit, markdown" in out, out
    assert "Read ext4 filesystems" not in out and not reports.exists(), out  # no host contacted, no run folder


def test_the_formats_chosen_are_written(tmp_path):
    reports = tmp_path / "reports"
    rc, out = ansible_playbook(*ARGS, "-e", "ext4_audit_reports_dir=%s" % reports, "-e", "ext4_audit_run_id=run-1",
                               "-e", '{"ext4_audit_formats": ["tap", "sarif"]}', env=ENV)
    assert rc == 0, out
    run_dir = reports / "run-1"
    assert sorted(os.listdir(str(run_dir))) == ["facts", "findings-index.json", "host-reports-shared.json", "hosts",
                                                "play-hosts.json", "probe", "report.sarif", "report.tap",
                                                "summary.json"]  # (no formats)
    assert os.listdir(str(run_dir / "hosts")) == ["localhost.json"]
