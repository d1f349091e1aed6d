"""The audit inside an image build (docs/image-check.md): Debian's packer (1.6.6) builds
examples/packer/ext4-audit.pkr.hcl for real. Its qemu builder boots a copy of the bookworm test
image of testhosts/vm on the image's 6.1 kernel, and its ansible provisioner runs the collection's
audit on the build VM through `ext4audit run`.

- The test image as it is: the gate passes, Packer finishes, and image.qcow2 is the artifact.
- The same image with `noacl` in its fstab (written into a raw copy with debugfs, nothing mounted):
  the guest's kernel refuses the option at boot, EXT4_FSTAB_OPTION_REFUSED (high) fails the gate,
  and Packer aborts with the gate's exit code 1 and keeps no artifact.

Nothing may be left: no qemu, and the cached image unchanged. About 1.5 minutes under TCG (two
boots to SSH), plus the image's build when it is not cached. Needs root, qemu, debootstrap and
packer (`make test-deps`)."""

import json
import os
import shutil
import subprocess
import time

import pytest

from conftest import (ROOT, VENV_BIN, failing_rules, load_host_report, load_json, needs_vm, qemu_accelerator,
                      qemu_processes, run)

PACKER = shutil.which("packer") or "/usr/bin/packer"
TEMPLATE = os.path.join(ROOT, "examples", "packer", "ext4-audit.pkr.hcl")
KERNEL_SERIES = "6.1"  # the test image's faster boot under TCG
HOST = "packer-build"  # the template's host_alias: the build VM's name in the reports
RISKY_FSTAB = "/dev/vda / ext4 errors=remount-ro,noacl 0 1\n"  # kernels from 6.1 on refuse noacl
KNOWN_HOSTS = os.path.expanduser("~/.ssh/known_hosts")  # the template keeps build VMs' keys out

pytestmark = needs_vm + [pytest.mark.skipif(not os.path.exists(PACKER),
                                            reason="needs packer: apt-get install packer (make test-deps)")]


def packer_build(folder, vm_image, base_image):
    """Build the example template from base_image in folder; return what the checks need."""
    folder.mkdir()
    release = vm_image["kernels"][KERNEL_SERIES]
    build = {"output": folder / "output", "reports": folder / "reports", "serial": folder / "serial.log"}
    variables = {"base_image": base_image, "ssh_private_key_file": vm_image["key"],
                 "kernel": os.path.join(vm_image["folder"], "vmlinuz-" + release),
                 "initrd": os.path.join(vm_image["folder"], "initrd.img-" + release),
                 "output_directory": build["output"], "reports_dir": build["reports"],
                 "serial_log": build["serial"], "accelerator": qemu_accelerator()}
    argv = [PACKER, "build", "-color=false"]
    for name, value in variables.items():
        argv += ["-var", "%s=%s" % (name, value)]
    # The venv's ext4audit and ansible-playbook; no call to HashiCorp's checkpoint service.
    env = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""), CHECKPOINT_DISABLE="1",
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PACKER_CACHE_DIR=str(folder / "packer_cache"))
    known_hosts = known_hosts_state()
    started = time.monotonic()
    result = subprocess.run(argv + [TEMPLATE], cwd=str(folder), env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, timeout=900)
    build.update(rc=result.returncode, out=result.stdout.decode(errors="replace"),
                 seconds=time.monotonic() - started, run_dir=build["reports"] / "latest")
    build["console"] = build["serial"].read_text(errors="replace") if build["serial"].exists() else ""
    assert qemu_processes(str(folder)) == [], "a qemu of this build is still running"
    assert known_hosts_state() == known_hosts, "the build wrote to " + KNOWN_HOSTS
    return build


def known_hosts_state():
    try:
        return os.stat(KNOWN_HOSTS).st_mtime_ns
    except FileNotFoundError:
        return None


def risky_copy(vm_image, folder):
    """A raw copy of the test image whose /etc/fstab names noacl, written with debugfs (no mount)."""
    folder.mkdir()
    disk, fstab, commands = folder / "risky.raw", folder / "fstab", folder / "debugfs.cmd"
    run(["cp", "--sparse=always", vm_image["disk"], str(disk)])
    fstab.write_text(RISKY_FSTAB)
    commands.write_text("cd /etc\nrm fstab\nwrite %s fstab\n" % fstab)
    run(["debugfs", "-w", "-f", str(commands), str(disk)])
    assert run(["debugfs", "-R", "cat /etc/fstab", str(disk)]).endswith(RISKY_FSTAB)
    return str(disk)


def root_filesystem(run_dir):
    report = load_host_report(run_dir / "hosts" / (HOST + ".json"))
    assert report["status"] == "audited" and report["errors"] == [], (report["reason"], report["errors"])
    assert report["kernel"]["release"].startswith(KERNEL_SERIES + "."), report["kernel"]
    [root] = [fs for fs in report["filesystems"] if fs["mountpoint"] == "/"]
    return report, root


def test_the_gate_passes_and_packer_makes_the_image(vm_image, tmp_path):
    before = os.stat(vm_image["disk"])
    build = packer_build(tmp_path / "good", vm_image, vm_image["disk"])
    print("packer build of the test image: %.0f s (rc %d)" % (build["seconds"], build["rc"]))
    assert build["rc"] == 0, build["out"][-4000:] + "\nconsole:\n" + build["console"][-2000:]
    assert "Builds finished. The artifacts of successful builds are" in build["out"]

    summary = load_json(str(build["run_dir"] / "summary.json"))
    assert summary["verdict"] == "pass" and failing_rules(build["run_dir"]) == {}, summary["reason"]
    _report, root = root_filesystem(build["run_dir"])
    assert root["fstab"]["spec"] == "/dev/vda" and "noacl" not in root["fstab"]["options"]

    # The artifact: a whole qcow2 of the base image's size (no backing file, not grown).
    info = json.loads(run(["qemu-img", "info", "--output=json", str(build["output"] / "image.qcow2")]))
    assert info["format"] == "qcow2" and "backing-filename" not in info, info
    assert info["virtual-size"] == before.st_size
    after = os.stat(vm_image["disk"])
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)


def test_a_risky_fstab_fails_the_gate_and_packer_aborts(vm_image, tmp_path):
    before = os.stat(vm_image["disk"])
    build = packer_build(tmp_path / "risky", vm_image, risky_copy(vm_image, tmp_path / "base"))
    print("packer build of the image with noacl in its fstab: %.0f s (rc %d)" % (build["seconds"], build["rc"]))
    # The guest's kernel really refuses the fstab's option (systemd-remount-fs at boot).
    assert "ext4: Unknown parameter 'noacl'" in build["console"], build["console"][-3000:]

    # Aborted by the gate: `ext4audit run` exits 1 (policy failed), Packer says so and keeps nothing.
    assert build["rc"] != 0, build["out"][-4000:]
    assert "Error executing Ansible: Non-zero exit status: exit status 1" in build["out"], build["out"][-4000:]
    assert "no artifacts were created" in build["out"] and not build["output"].exists()
    summary = load_json(str(build["run_dir"] / "summary.json"))
    assert summary["verdict"] == "fail", summary["reason"]
    assert failing_rules(build["run_dir"]) == {HOST: ["EXT4_FSTAB_OPTION_REFUSED"]}, summary["reason"]
    report, root = root_filesystem(build["run_dir"])
    [finding] = [f for f in report["findings"] if f["rule"] == "EXT4_FSTAB_OPTION_REFUSED"]
    assert finding["mountpoint"] == "/" and "noacl" in finding["message"], finding
    assert "noacl" in root["fstab"]["options"]
    after = os.stat(vm_image["disk"])
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)
