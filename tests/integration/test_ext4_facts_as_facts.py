"""ext4_facts as Ansible fact modules are: its record is the host's fact `ext4_facts`
(ansible_facts.ext4_facts), not a key of its own beside them; and the os-release fields it keeps
include the image's own name (IMAGE_ID, IMAGE_VERSION), which the results store's image column
reads. The host's /etc/os-release is replaced by bind mount in a private mount namespace (unshare),
so the real module reads a named image's os-release and nothing outside the test sees it."""

import glob
import json
import os
import sqlite3
import subprocess

from conftest import ROOT, VENV_BIN, load_json, needs_root
from ext4audit.parsers.ext4_parsers.common import FACTS_SCHEMA

pytestmark = needs_root

NAMED_IMAGE = ('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n'
               'IMAGE_ID=golden-db\nIMAGE_VERSION="2026.03"\n')


def run(argv, os_release=None):
    """argv with the project's ansible.cfg; with os_release (a file), in a mount namespace of its
    own where /etc/os-release is that file. Returns (rc, output)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_FORCE_COLOR="0")
    if os_release:
        argv = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind "$0" /etc/os-release && exec "$@"', str(os_release)] + argv
    result = subprocess.run(argv, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return result.returncode, result.stdout.decode(errors="replace")


def test_the_record_is_the_hosts_fact_ext4_facts(tmp_path):
    playbook = tmp_path / "facts.yml"
    playbook.write_text(json.dumps([{
        "hosts": "localhost", "gather_facts": False,
        "tasks": [
            {"ext4audit.fleet.ext4_facts": {"superblock": False}, "register": "answer"},
            {"ansible.builtin.assert": {"that": [
                "answer.ansible_facts.ext4_facts.schema == '%s'" % FACTS_SCHEMA,
                "'ext4_facts' not in answer",
                # a fact of the host: later tasks and other hosts read it without the register
                "ansible_facts.ext4_facts.schema == '%s'" % FACTS_SCHEMA,
                "hostvars['localhost'].ansible_facts.ext4_facts.kernel.release == answer.ansible_facts.ext4_facts.kernel.release",
            ]}},
        ]}]))
    rc, out = run([os.path.join(VENV_BIN, "ansible-playbook"), str(playbook)])
    assert rc == 0 and "failed=0" in out, out


def test_a_named_image_is_kept_in_the_facts_and_is_the_stores_image(tmp_path):
    os_release = tmp_path / "os-release"
    os_release.write_text(NAMED_IMAGE)
    reports = tmp_path / "reports"
    rc, out = run([os.path.join(VENV_BIN, "ansible-playbook"), "playbooks/audit.yml", "-e", "chopper_probe_enabled=false",
                   "-e", "ext4_audit_fail_on=critical", "-e", "ext4_audit_reports_dir=%s" % reports,
                   "-e", "ext4_audit_controller_command=%s" % os.path.join(VENV_BIN, "ext4audit")], os_release)
    assert rc == 0 and "verdict: pass" in out, out
    [record] = [load_json(path) for path in glob.glob(str(reports / "latest" / "facts" / "*.json"))]
    assert record["facts"]["kernel"]["os_release"] == {"PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)", "ID": "debian",
                                                       "VERSION_ID": "12", "IMAGE_ID": "golden-db",
                                                       "IMAGE_VERSION": "2026.03"}
    with sqlite3.connect(str(reports / "history.sqlite")) as store:  # the report step's default store
        assert store.execute("SELECT host, image FROM hosts").fetchall() == [("localhost", "golden-db 2026.03")]
