"""A run that runs out of space is incomplete, and everything that reads run folders says so: the
real playbook writes its reports to a small tmpfs filled to leave 50 KiB free; the report step
fails (exit 2, `latest` not moved) and the run folder has no summary.json. gate, merge and
--baseline (the command's and the playbook's) refuse that folder with exit 2, naming it; the run
before it, complete on the same filesystem, still works."""

import os
import subprocess

from conftest import ROOT, VENV_BIN, ansible_playbook, needs_root, run

pytestmark = needs_root

FREE = 50 * 1024  # bytes left on the reports filesystem: a run of this machine needs about 80 KiB


def audit(reports, run_id, fstab, *extra):
    # fail_on=critical and no fstab drift: the complete run passes on any machine this runs on.
    return ansible_playbook("playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                            "-e", "ext4_audit_run_id=%s" % run_id, "-e", "ext4_audit_fstab_path=%s" % fstab,
                            "-e", "ext4_audit_fail_on=critical", "-e", "chopper_probe_enabled=false", *extra)


def ext4audit(*args):
    result = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit"] + [str(a) for a in args], cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)
    return result.returncode, result.stdout + result.stderr


def fill(folder, leave):
    """Fill the filesystem of `folder` until `leave` bytes are free (tmpfs counts whole pages)."""
    stat = os.statvfs(folder)
    with open(os.path.join(folder, "filler"), "wb") as handle:
        handle.write(b"\0" * (stat.f_bavail * stat.f_frsize - leave))
    stat = os.statvfs(folder)
    return stat.f_bavail * stat.f_frsize


def test_a_run_out_of_space_is_refused_by_gate_merge_and_baseline(tmp_path):
    reports, fstab = tmp_path / "reports", tmp_path / "fstab"
    reports.mkdir()
    fstab.write_text("# empty: no drift findings\n")
    run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "ext4audit-test-reports", str(reports)])
    try:
        rc, out = audit(reports, "run-1", fstab)
        assert rc == 0 and "verdict: pass" in out, out[-3000:]
        complete, partial = reports / "run-1", reports / "run-2"

        left = fill(str(reports), FREE)
        assert FREE - 4096 <= left <= FREE, left
        rc, out = audit(reports, "run-2", fstab)
        print(out[-1500:])
        assert rc == 2 and "No space left on device" in out, out[-3000:]
        assert os.readlink(str(reports / "latest")) == "run-1"
        assert (partial / "facts").is_dir() and not (partial / "summary.json").exists(), os.listdir(str(partial))

        incomplete = "%s is incomplete: it has no summary.json" % partial
        rc, out = ext4audit("gate", partial)
        assert rc == 2 and "error: run folder " + incomplete in out, out
        rc, out = ext4audit("merge", tmp_path / "merged", complete, partial)
        assert rc == 2 and "error: slice " + incomplete in out and not (tmp_path / "merged").exists(), out
        rc, out = ext4audit("gate", complete, "--baseline", partial)
        assert rc == 2 and "error: baseline " + incomplete in out, out
        rc, out = audit(tmp_path / "elsewhere", "run-3", fstab, "-e", "ext4_audit_baseline=%s" % partial)
        assert rc == 2 and "%s has no summary.json" % partial in out and not (tmp_path / "elsewhere").exists(), out

        # The complete run on the same full filesystem: gated, merged and compared with as before.
        rc, out = ext4audit("gate", complete, "--fail-on", "critical")
        assert rc == 0 and "verdict: pass" in out, out
        rc, out = ext4audit("merge", tmp_path / "merged", complete, "--fail-on", "critical")
        assert rc == 0 and (tmp_path / "merged" / "summary.json").exists(), out
        rc, out = ext4audit("gate", tmp_path / "merged", "--baseline", complete, "--fail-on", "critical")
        assert rc == 0, out
    finally:
        subprocess.run(["umount", str(reports)], check=False)
