"""The image pre-rollout check (playbooks/ami_precheck.yml) on the bookworm test image of
testhosts/vm (built by playbooks/testhosts/vm_image.yml if missing): the offline check of a qcow2
copy, then the whole flow on the raw image (offline facts, boot on the image's own kernel under
qemu, audit, probe, teardown, gate). The booted kernel and root filesystem must be what the offline
check predicted. A random file must give the verdict `incomplete` with its reason. Nothing may be
left: no work folder, no qemu, and the image unchanged.

Slow: about 4-5 minutes (one TCG boot and a 16-run probe). Needs root, qemu, debootstrap."""

import json
import os
import random
import subprocess
import time

from conftest import (ROOT, VENV_BIN, ansible_playbook, failing_rules, load_host_report, load_json, needs_vm,
                      qemu_processes, run, upgradable_data_corruption)

from ext4audit.parsers.ext4_parsers.mounts import option_map
from ext4audit.parsers.ext4_parsers.superblock import parse_dumpe2fs_identity

# Options the offline inference states for every ext4 filesystem (kernel defaults, superblock, fstab).
COMPARED = ("data", "delalloc", "auto_da_alloc", "barrier", "discard", "commit", "errors", "journal_async_commit")

pytestmark = needs_vm


def image_facts(tmp_path, **args):
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    result = subprocess.run([os.path.join(VENV_BIN, "ansible"), "localhost", "-m", "ext4_image_facts", "-a",
                             json.dumps(args), "--tree", str(tmp_path / "tree")], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == 0, result.stdout.decode()[-3000:]
    return load_json(str(tmp_path / "tree" / "localhost"))["ext4_image_facts"]


def dumpe2fs_uuid(disk):
    out = run(["dumpe2fs", "-h", disk])
    return parse_dumpe2fs_identity(out)["uuid"]


def precheck(tmp_path, image, **extra):
    reports, work = tmp_path / "reports", tmp_path / "work"
    work.mkdir()
    settings = dict(image=image, ext4_audit_reports_dir=str(reports), ami_precheck_work_parent=str(work),
                    ami_precheck_name="bookworm", **extra)
    started = time.monotonic()
    rc, out = ansible_playbook("playbooks/ami_precheck.yml", "-e", json.dumps(settings))
    seconds = time.monotonic() - started
    assert (reports / "latest" / "summary.json").exists(), out[-4000:]
    return rc, out, seconds, reports / "latest", work


def test_offline_check_of_a_qcow2_copy(vm_image, tmp_path):
    qcow2 = str(tmp_path / "disk.qcow2")
    started = time.monotonic()
    run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", vm_image["disk"], qcow2])
    converted = time.monotonic() - started
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    started = time.monotonic()
    facts = image_facts(tmp_path, image=qcow2, tmp_dir=str(scratch))
    print("qemu-img convert to qcow2 %.1f s, offline check of the qcow2 copy %.1f s"
          % (converted, time.monotonic() - started))
    assert facts["errors"] == [], facts["errors"]
    image = facts["image"]
    assert image["format"] == "qcow2" and image["partition_table"] == "none"
    assert image["root"]["uuid"] == dumpe2fs_uuid(vm_image["disk"])
    assert image["root"]["label"] == "root"  # vm_image.yml: mkfs.ext4 -L root
    assert sorted(k["release"] for k in image["kernels"]) == sorted(vm_image["kernels"].values())
    for kernel in image["kernels"]:
        # The upstream version from the bzImage's version string is the Debian package's version.
        package = [p for p in vm_image["packages"] if p.startswith("linux-image-%s=" % kernel["release"])]
        assert package and package[0].split("=")[1].startswith(kernel["upstream"] + "-"), (kernel, package)
        assert kernel["vendor"] == "debian" and kernel["initrd"] == "/boot/initrd.img-" + kernel["release"]
    root = [fs for fs in facts["filesystems"] if fs["mountpoint"] == "/"]
    assert len(root) == 1 and root[0]["device"] == "/dev/vda" and root[0]["fstab"]["spec"] == "/dev/vda"
    assert os.listdir(scratch) == []


def test_whole_flow_on_the_raw_image(vm_image, tmp_path):
    before = os.stat(vm_image["disk"])
    rc, out, seconds, run_dir, work = precheck(tmp_path, vm_image["disk"], ami_precheck_ssh_key=vm_image["key"])
    summary = load_json(str(run_dir / "summary.json"))
    print("ami_precheck.yml, whole flow: %.0f s" % seconds)
    assert (rc == 0) == (summary["verdict"] == "pass"), (rc, summary["verdict"], out[-4000:])
    # Only the kernel CNA's data-corruption fixes a later release of its kernel's branch has may
    # fail the image (both views).
    expected = upgradable_data_corruption(run_dir)
    assert failing_rules(run_dir) == expected, summary["reason"] + "\n" + out[-4000:]
    assert summary["verdict"] == ("fail" if expected else "pass"), summary["reason"]
    offline = load_host_report(str(run_dir / "hosts" / "bookworm-offline.json"))
    booted = load_host_report(str(run_dir / "hosts" / "bookworm.json"))
    assert offline["status"] == "audited" and booted["status"] == "audited", (offline["reason"], booted["reason"])
    assert offline["errors"] == [] and booted["errors"] == [], (offline["errors"], booted["errors"])

    # The kernel it booted is the one the offline check read from /boot (and the image's /vmlinuz).
    for key in ("release", "upstream", "vendor", "vendor_version"):
        assert booted["kernel"][key] == offline["kernel"][key], key
    assert offline["kernel"]["release"] in vm_image["kernels"].values()
    assert booted["kernel"]["proc_version"].startswith("Linux version " + offline["kernel"]["release"])

    # The root filesystem: same superblock, and the options inferred offline are those in effect.
    off_root = [fs for fs in offline["filesystems"] if fs["mountpoint"] == "/"][0]
    on_root = [fs for fs in booted["filesystems"] if fs["mountpoint"] == "/"][0]
    assert off_root["uuid"] == dumpe2fs_uuid(vm_image["disk"])  # the VM booted with root=UUID=<this>
    assert on_root["options_source"] == "proc" and off_root["options_source"] == "inferred"
    effective, inferred = option_map(on_root["options"]), option_map(off_root["options"])
    for name in COMPARED:
        # /proc/fs/ext4/<dev>/options lists every option in effect: an unlisted flag is off.
        assert effective.get(name, False) == inferred[name], (name, on_root["options"], off_root["options"])
    assert inferred["data"] == "ordered" and inferred["errors"] == "remount-ro"
    for key in ("block_size", "block_count", "inode_count", "inode_size", "journal_bytes"):
        assert on_root["superblock"][key] == off_root["superblock"][key], key
    assert set(on_root["superblock"]["features"]) - {"needs_recovery"} == set(off_root["superblock"]["features"])

    # Same rules on both sides: the findings for / agree (the probe may escalate the booted one's).
    rules = lambda report: sorted(f["rule"] for f in report["findings"] if f["mountpoint"] in ("/", None))
    assert rules(offline) == rules(booted), (rules(offline), rules(booted))

    probe = booted["probe"]
    assert probe and probe["status"] == "ran", probe
    sweep = probe["sweep"]
    print("probe under TCG: %s of %s runs, confirmations %s" % (
        sweep["runs_completed"], sweep["runs_planned"], [(c["id"], c.get("status")) for c in probe["confirmations"]]))
    assert sweep["runs_completed"] >= 1

    # Nothing left: the work folder (boot files, overlay) is gone, no qemu, the image unchanged.
    assert os.listdir(work) == []
    assert qemu_processes(str(work)) == []
    after = os.stat(vm_image["disk"])
    assert (after.st_mtime_ns, after.st_size) == (before.st_mtime_ns, before.st_size)


def test_a_random_file_is_incomplete_with_its_reason(vm_image, tmp_path):
    junk = tmp_path / "junk.raw"
    junk.write_bytes(random.Random(11).randbytes(8 * 1024 * 1024))
    rc, out, seconds, run_dir, work = precheck(tmp_path, str(junk), ami_precheck_ssh_key=vm_image["key"])
    summary = load_json(str(run_dir / "summary.json"))
    assert summary["verdict"] == "incomplete" and rc != 0, (rc, summary["verdict"], out[-3000:])
    reasons = dict((h["host"], h["reason"]) for h in summary["hosts_not_audited"])
    assert sorted(reasons) == ["bookworm", "bookworm-offline"], reasons
    assert "no partition table" in reasons["bookworm-offline"], reasons
    assert reasons["bookworm"].startswith("not booted"), reasons
    assert os.listdir(work) == [] and qemu_processes(str(work)) == []
