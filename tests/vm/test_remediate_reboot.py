"""A next-mount fix on a real Debian kernel (issue 32): one VM on the bookworm image's 6.1 kernel
(testhosts/vm, image built or reused by vm_up.yml) with a scratch ext4 on its second virtual disk,
mounted from /etc/fstab with data=writeback (EXT4_DATA_WRITEBACK; the kernel refuses to change the
data mode on remount). playbooks/remediate.yml edits /etc/fstab and reports the fix pending while
the live mount keeps data=writeback; the guest reboots (same qemu, same disks); the next
remediate.yml run's own audit reads data=ordered from /proc/fs/ext4/vdb/options, raises no finding,
and changes nothing. Root's entry is never touched, so the reboot is safe.

Slow: about 2 minutes with a cached image (117 s here: two TCG boots). Needs root, qemu and debootstrap."""

import json
import os
import re
import time

from conftest import ROOT, ansible_playbook, free_port, load_host_report, needs_vm, qemu_processes, vm_host, vm_ssh

pytestmark = needs_vm

SCRATCH = "/srv/scratch"
FSTAB_BEFORE = "LABEL=scratch %s ext4 data=writeback 0 2\n" % SCRATCH
FSTAB_AFTER = "LABEL=scratch %s ext4 data=ordered 0 2\n" % SCRATCH
RULE = "EXT4_DATA_WRITEBACK"
# Ansible's own callback prints the outcome lines (unwrapped: json) and the recap; the controller command runs this checkout.
PLAY_ENV = {"ANSIBLE_STDOUT_CALLBACK": "ansible.builtin.default", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
            "PYTHONPATH": ROOT}


def guest(host, *command):
    """A fixed command in the guest that must succeed; its output."""
    result = vm_ssh(host, *command)
    assert result.returncode == 0, (command, result.stdout.decode(errors="replace"))
    return result.stdout.decode()


def live_options(host):
    return guest(host, "cat", "/proc/fs/ext4/vdb/options").split()


def remediate(inventory, reports):
    """playbooks/remediate.yml on the VM, for this rule only (root's findings are never planned)."""
    return ansible_playbook("-i", str(inventory), "playbooks/remediate.yml", "-e", "ext4_audit_become=false",
                            "-e", "chopper_probe_enabled=false", "-e", "ext4_audit_reports_dir=%s" % reports,
                            "-e", json.dumps({"ext4_remediate_rules": [RULE]}), env=PLAY_ENV)


def recap_changed(out, name):
    found = re.findall(r"^%s\s*:\s*ok=\d+\s+changed=(\d+)" % re.escape(name), out, re.M)
    assert found, out[-3000:]
    return int(found[-1])


def scratch_report(run_dir, name):
    report = load_host_report(os.path.join(str(run_dir), "hosts", name + ".json"))
    [fs] = [fs for fs in report["filesystems"] if fs["mountpoint"] == SCRATCH]
    findings = [f["rule"] for f in report["findings"] if f.get("mountpoint") == SCRATCH]
    return fs, findings


def reboot(host, timeout_s=300):
    """Reboot the guest and wait until it answers on a new boot; seconds taken."""
    before = guest(host, "cat", "/proc/sys/kernel/random/boot_id").strip()
    started = time.monotonic()
    vm_ssh(host, "systemctl", "reboot")  # the connection may drop before it returns
    while time.monotonic() - started < timeout_s:
        time.sleep(1)
        # until the guest's network is up, qemu holds the connection open: give up after 5 s and retry
        result = vm_ssh(host, "cat", "/proc/sys/kernel/random/boot_id", connect_timeout=5, timeout=30)
        if result.returncode == 0 and result.stdout.decode().strip() not in ("", before):
            return time.monotonic() - started
    raise AssertionError("the guest did not come back on a new boot within %d s" % timeout_s)


def test_next_mount_fix_takes_effect_after_a_reboot(tmp_path):
    timings = {}
    started = time.monotonic()
    run_dir = tmp_path / "run"
    vm = {"name": "remediate-6-1", "kernel": "6.1", "port": free_port(), "scratch_mib": 64, "allow_reboot": True}
    try:
        step = time.monotonic()
        rc, out = ansible_playbook("playbooks/testhosts/vm_up.yml", "-e",
                                   json.dumps({"vm_hosts": [vm], "vm_run_dir": str(run_dir)}))
        assert rc == 0, out[-4000:]
        timings["vm_up"] = time.monotonic() - step
        host = vm_host(run_dir, vm["name"])
        inventory = run_dir / "inventory"

        # The scratch filesystem, mounted as the guest's fstab says.
        guest(host, "mkfs.ext4", "-q", "-L", "scratch", "/dev/vdb")
        guest(host, "mkdir", "-p", SCRATCH)
        fstab = guest(host, "cat", "/etc/fstab")
        assert vm_ssh(host, "tee", "-a", "/etc/fstab", stdin=FSTAB_BEFORE.encode()).returncode == 0
        guest(host, "mount", SCRATCH)
        assert "data=writeback" in live_options(host)

        # Apply: fstab edited, the fix pending, the live mount unchanged (the kernel cannot remount it).
        step = time.monotonic()
        rc, out = remediate(inventory, tmp_path / "reports-apply")
        timings["remediate (apply)"] = time.monotonic() - step
        assert re.search(r"%s on %s: pending \(next_mount\): takes effect at the next mount or reboot"
                         % (RULE, SCRATCH), out), out[-4000:]
        assert rc != 0, out[-4000:]  # the re-audit's gate fails on the pending high finding
        assert recap_changed(out, vm["name"]) >= 1
        assert guest(host, "cat", "/etc/fstab") == fstab + FSTAB_AFTER  # root's line and the rest kept
        # the backup beside it (ssh joins the arguments into one shell line: no glob sent)
        assert [name for name in guest(host, "ls", "/etc").split() if re.match(r"fstab\..+~$", name)]
        assert "data=writeback" in live_options(host)
        reaudit, findings = scratch_report(tmp_path / "reports-apply" / "latest", vm["name"])
        assert "data=writeback" in reaudit["options"] and RULE in findings, (reaudit, findings)

        timings["reboot"] = reboot(host)

        # After the reboot: the option in effect, the finding gone, nothing left to change.
        assert "data=ordered" in live_options(host)
        step = time.monotonic()
        rc, out = remediate(inventory, tmp_path / "reports-after")
        timings["remediate (after reboot)"] = time.monotonic() - step
        assert rc == 0, out[-4000:]
        assert recap_changed(out, vm["name"]) == 0 and recap_changed(out, "localhost") == 0, out[-4000:]
        audited, findings = scratch_report(tmp_path / "reports-after" / "latest", vm["name"])
        assert audited["options_source"] == "proc" and "data=ordered" in audited["options"], audited
        assert RULE not in findings, findings
        assert guest(host, "cat", "/etc/fstab") == fstab + FSTAB_AFTER
    finally:
        step = time.monotonic()
        rc_down, out_down = ansible_playbook("playbooks/testhosts/vm_down.yml", "-e",
                                             json.dumps({"vm_run_dir": str(run_dir)}))
        timings["vm_down"] = time.monotonic() - step
        timings["total"] = time.monotonic() - started
        print("timings (s): " + ", ".join("%s %.1f" % item for item in timings.items()))
    assert rc_down == 0, out_down
    assert qemu_processes(str(run_dir)) == [] and not run_dir.exists()
