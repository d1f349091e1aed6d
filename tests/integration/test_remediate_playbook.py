"""playbooks/remediate.yml end to end with real ansible-playbook runs on real loop-mounted ext4 and an
fstab of their own (ext4_audit_fstab_path): --check --diff changes nothing and shows the lines; a
run fixes the live finding, leaves the data mode pending until the next mount, never touches a
waived finding or an opt-in fix; a second run changes nothing; offline fixes run only when asked
and only on an unmounted filesystem; a night of the results store shows the same --check --diff as
its run folder."""

import glob
import json
import os
import re
import sys

from conftest import ROOT, VENV_BIN, ansible_playbook, load_host_report, load_json, needs_root, run

pytestmark = needs_root

PROBE_OFF = ("-e", "chopper_probe_enabled=false")
# the audit's short callback (ansible.cfg) shows no diffs; Ansible's own does
SHOW_DIFF = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
             "PYTHONPATH": os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))}


def options_of(device):
    with open("/proc/fs/ext4/%s/options" % os.path.basename(device)) as handle:
        return handle.read().split()


def remediate(tmp_path, fstab, *extra):
    reports = tmp_path / "reports"
    rc, out = ansible_playbook("playbooks/remediate.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                               "-e", "ext4_audit_fstab_path=%s" % fstab,
                               "-e", "ext4_audit_waivers_file=%s" % (tmp_path / "waivers.yml"), *(PROBE_OFF + extra),
                               env=SHOW_DIFF)
    return rc, out, reports


def recap_changed(out):
    recap = re.findall(r"^(\S+)\s*:\s*ok=\d+\s+changed=(\d+)", out, re.M)
    assert recap, out
    return dict(recap)


def test_check_apply_idempotent_and_next_mount(loopfs, tmp_path):
    live = loopfs.make("live", mount_options="commit=120", mountpoint=os.path.join(loopfs.base, "mnt", "my data"))
    later = loopfs.make("later", mount_options="data=writeback")
    waived = loopfs.make("waived", mount_options="nobarrier")
    fstab = tmp_path / "fstab"
    text = ("# own fstab of the test\n"
            "%s  %s\text4  commit=120,noatime  0 2\n"
            "%s %s ext4 data=writeback 0 2\n"
            "%s %s ext4 nobarrier 0 2\n") % (
        live["device"], live["mountpoint"].replace(" ", "\\040"), later["device"], later["mountpoint"],
        waived["device"], waived["mountpoint"])
    fstab.write_text(text)
    (tmp_path / "waivers.yml").write_text(
        "waivers:\n  - rule: EXT4_NOBARRIER\n    mountpoints: [%s]\n    justification: test\n"
        "    approver: test\n    expires: 2099-01-01\n" % waived["mountpoint"])

    # --check --diff: the exact lines, nothing changed
    rc, out, reports = remediate(tmp_path, str(fstab), "--check", "--diff")
    assert rc == 0, out
    assert "-%s  %s\text4  commit=120,noatime  0 2" % (live["device"], live["mountpoint"].replace(" ", "\\040")) in out
    assert "+%s  %s\text4  noatime,commit=5  0 2" % (live["device"], live["mountpoint"].replace(" ", "\\040")) in out
    assert "+%s %s ext4 data=ordered 0 2" % (later["device"], later["mountpoint"]) in out
    assert "class next_mount" in out and "Trade-off:" in out
    assert "EXT4_NOBARRIER" not in re.sub(r"(?s)^.*?TASK \[ext4audit.fleet.ext4_remediate", "", out)
    assert fstab.read_text() == text
    assert "commit=120" in options_of(live["device"])

    # apply: live fixed now, data mode pending, waived and opt-in untouched; the gate fails on the pending high
    rc, out, reports = remediate(tmp_path, str(fstab))
    assert rc != 0, out
    assert re.search(r"EXT4_LONG_COMMIT on %s: fixed" % re.escape(live["mountpoint"]), out), out
    assert re.search(r"EXT4_DATA_WRITEBACK on %s: pending \(next_mount\): .*next mount" % re.escape(later["mountpoint"]),
                     out), out
    assert "commit=5" in options_of(live["device"]) and "data=writeback" in options_of(later["device"])
    new_text = fstab.read_text()
    assert "noatime,commit=5" in new_text and "ext4 data=ordered 0 2" in new_text
    assert "%s %s ext4 nobarrier 0 2" % (waived["device"], waived["mountpoint"]) in new_text
    assert "nobarrier" in options_of(waived["device"]) and "noauto_da_alloc" not in new_text
    assert len(glob.glob(str(tmp_path / "fstab.*~"))) == 2  # a backup per edit, beside it

    # second run: nothing changes
    rc, out, reports = remediate(tmp_path, str(fstab))
    assert set(recap_changed(out).values()) == {"0"}, out
    assert fstab.read_text() == new_text

    # the next mount takes the pending fix; then the gate passes
    run(["umount", later["mountpoint"]])
    run(["mount", "-t", "ext4", "-o", "data=ordered", later["device"], later["mountpoint"]])
    rc, out, reports = remediate(tmp_path, str(fstab))
    assert rc == 0, out
    assert "data=ordered" in options_of(later["device"])


def test_offline_fix_from_a_run_folder(loopfs, tmp_path):
    small = loopfs.make("small", size="2G", mkfs_args=["-J", "size=4"])
    fstab = tmp_path / "fstab"
    fstab.write_text("%s %s ext4 defaults 0 2\n" % (small["device"], small["mountpoint"]))
    (tmp_path / "waivers.yml").write_text("waivers: []\n")
    reports = tmp_path / "reports"
    rc, out = ansible_playbook("playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports, "-e",
                               "ext4_audit_fstab_path=%s" % fstab, "-e", "ext4_audit_run_id=before", *PROBE_OFF)
    assert "EXT4_SMALL_JOURNAL" in open(str(reports / "before" / "summary.md")).read(), out
    run_dir = str(reports / "before")

    # mounted: refused even with the flag
    rc, out, _ = remediate(tmp_path, str(fstab), "-e", "ext4_remediate_run=%s" % run_dir,
                           "-e", '{"ext4_remediate_offline": true}', "-e", "ext4_audit_run_id=mounted")
    assert "is mounted: an offline change runs only on an unmounted filesystem" in out, out
    assert re.search(r"EXT4_SMALL_JOURNAL on %s: failed" % re.escape(small["mountpoint"]), out), out

    # unmounted, without the flag: pending (offline), nothing run
    run(["umount", small["mountpoint"]])
    loopfs.mounts.remove(small["mountpoint"])
    rc, out, _ = remediate(tmp_path, str(fstab), "-e", "ext4_remediate_run=%s" % run_dir, "-e", "ext4_audit_run_id=noflag")
    assert re.search(r"EXT4_SMALL_JOURNAL on %s: pending \(offline\)" % re.escape(small["mountpoint"]), out), out
    assert "4096k" in run(["dumpe2fs", "-h", small["device"]]).split("Total journal size:")[1].split("\n")[0]

    # unmounted, with the flag: the journal gets mke2fs's default size
    rc, out, _ = remediate(tmp_path, str(fstab), "-e", "ext4_remediate_run=%s" % run_dir,
                           "-e", '{"ext4_remediate_offline": true}', "-e", "ext4_audit_run_id=applied")
    assert "64M" in run(["dumpe2fs", "-h", small["device"]]).split("Total journal size:")[1].split("\n")[0], out
    run(["e2fsck", "-fn", small["device"]])
    assert load_host_report(str(reports / "before" / "hosts" / "localhost.json"))["findings"]


def test_check_diff_from_a_night_of_the_store(loopfs, tmp_path):
    """A night recorded into an SQLite store (`ext4audit history ingest`) gives, with --check --diff,
    the same fstab lines as its run folder (not a fresh audit's), and changes nothing."""
    fs = loopfs.make("stored", mount_options="commit=120")
    fstab = tmp_path / "fstab"
    text = "# own fstab\n%s  %s  ext4  commit=120,noatime  0 2\n" % (fs["device"], fs["mountpoint"])
    fstab.write_text(text)
    (tmp_path / "waivers.yml").write_text("waivers: []\n")
    reports = tmp_path / "reports"
    rc, out = ansible_playbook("playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports, "-e",
                               "ext4_audit_fstab_path=%s" % fstab, "-e", "ext4_audit_run_id=night",
                               "-e", "ext4_audit_store=off", *PROBE_OFF)
    run_dir, store = str(reports / "night"), str(tmp_path / "history.sqlite")
    assert os.path.exists(os.path.join(run_dir, "summary.json")), out
    run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "history", "ingest", run_dir, "--store", store], cwd=ROOT)
    # the live mount changes after the night: a fresh audit would find nothing, the night still plans the fix
    run(["mount", "-o", "remount,commit=5", fs["device"], fs["mountpoint"]])

    shown = {}
    for name, source in (("folder", "ext4_remediate_run=%s" % run_dir), ("store", "ext4_remediate_store=%s" % store)):
        rc, out, _ = remediate(tmp_path, str(fstab), "--check", "--diff", "-e", source)
        assert rc == 0, out
        shown[name] = [line for line in out.splitlines() if re.match(r"^[-+]\S", line) and "---" not in line
                       and "+++" not in line]
    assert "+%s  %s  ext4  noatime,commit=5  0 2" % (fs["device"], fs["mountpoint"]) in shown["store"], shown
    assert shown["store"] == shown["folder"]
    assert fstab.read_text() == text and "commit=5" in options_of(fs["device"])


def test_a_limit_by_group_remediates_that_group_and_gates_its_re_audit(loopfs, tmp_path):
    """--limit filters every play, localhost's too: the input check, the re-audit's report and the
    gate still run on the controller when the limit names only a group. The host outside it (one
    nobody answers for) is never contacted; the pending data mode fails the re-audit's gate."""
    live = loopfs.make("live", mount_options="commit=120")
    later = loopfs.make("later", mount_options="data=writeback")
    fstab = tmp_path / "fstab"
    fstab.write_text("%s %s ext4 commit=120 0 2\n%s %s ext4 data=writeback 0 2\n" % (
        live["device"], live["mountpoint"], later["device"], later["mountpoint"]))
    (tmp_path / "waivers.yml").write_text("waivers: []\n")
    gone = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh",  # port 9: refused at once
            "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no -o BatchMode=yes"}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"vars": {"ext4_audit_become": False}, "children": {
        "web": {"hosts": {"web-1": {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}}},
        "db": {"hosts": {"db-gone": gone}}}}}))
    rc, out, reports = remediate(tmp_path, str(fstab), "-i", str(inventory), "--limit", "web")
    assert rc != 0, out
    assert re.search(r"EXT4_LONG_COMMIT on %s: fixed" % re.escape(live["mountpoint"]), out), out
    assert re.search(r"EXT4_DATA_WRITEBACK on %s: pending \(next_mount\)" % re.escape(later["mountpoint"]), out), out
    assert "commit=5" in options_of(live["device"])
    assert "TASK [Gate the re-audit's run folder]" in out and "db-gone" not in out, out
    runs = [load_json(path) for path in glob.glob(str(reports / "*" / "summary.json"))
            if not os.path.islink(os.path.dirname(path))]  # the audit's and the re-audit's, not latest
    assert len(runs) == 2 and all([h["host"] for h in run["hosts"]] == ["web-1"] for run in runs), runs
