"""The real ext4_image_facts module, run by ansible, on real disk images made here: mkfs.ext4 -d from a
folder, partition tables written by sfdisk (MBR with a separate /boot, GPT), a bare filesystem,
qcow2 copies made by qemu-img, and images that must be refused with a clear error.

The kernels in these images are files that carry a real x86 setup header (magic, boot protocol and
the version-string pointer) and the version string of a Debian cloud kernel; the VM test
(tests/vm/test_ami_precheck.py) reads real kernels. Nothing is mounted and no loop device is used."""

import binascii
import datetime
import hashlib
import json
import os
import random
import re
import struct
import subprocess
import time

import pytest

from conftest import ROOT, VENV_BIN, ansible_playbook, load_host_report, load_json, module_return_doc, run, undocumented
from ext4audit.report import reports
from ext4audit.steps import fleet
from ext4audit.rules import catalog as catalog_mod, engine

TOOLS = ["/usr/sbin/sfdisk", "/usr/bin/qemu-img", "/usr/sbin/mkfs.ext4", "/usr/sbin/debugfs"]
MISSING = [tool for tool in TOOLS if not os.path.exists(tool)]
pytestmark = pytest.mark.skipif(bool(MISSING), reason="needs %s: apt-get install fdisk qemu-utils e2fsprogs"
                                % ", ".join(MISSING))

MIB = 1024 * 1024
HANG_S = 120  # one module run; the slowest here takes about 4 s
K61 = ("6.1.0-28-cloud-amd64", "6.1.0-28-cloud-amd64 (debian-kernel@lists.debian.org) #1 SMP PREEMPT_DYNAMIC "
       "Debian 6.1.119-1 (2024-11-22)")
K612 = ("6.12.57+deb12-cloud-amd64", "6.12.57+deb12-cloud-amd64 (debian-kernel@lists.debian.org) #1 SMP "
        "PREEMPT_DYNAMIC Debian 6.12.57-1~deb12u1 (2025-11-05)")
ROOT_UUID = "0b7c1a52-5e2f-4d3c-9a10-6f1e2d3c4b5a"
BOOT_UUID = "1c8d2b63-6f30-4e4d-8b21-7a2f3e4d5c6b"
DATA_UUID = "2d9e3c74-7041-4f5e-9c32-8b304f5e6d7c"


def write_kernel(path, version):
    """A file with a bzImage setup header: 'HdrS' at 0x202, boot protocol 2.15, kernel_version at 0x20E
    pointing at the NUL-terminated version string (0x200 further on), as the kernel's build writes it."""
    data = bytearray(64 * 1024)
    data[0x1FE:0x200] = b"\x55\xaa"
    data[0x202:0x206] = b"HdrS"
    struct.pack_into("<HH", data, 0x206, 0x020F, 0)
    struct.pack_into("<H", data, 0x20E, 0x3000)
    text = version.encode() + b"\0"
    data[0x3200:0x3200 + len(text)] = text
    with open(path, "wb") as handle:
        handle.write(bytes(data))


def make_tree(base, fstab, kernels=(K61,), boot_in_root=True, vmlinuz_link=None, extra=None):
    """A root folder: etc/fstab, etc/os-release -> ../usr/lib/os-release, boot/ with kernels and initrds."""
    tree = base
    for folder in ("etc", "usr/lib", "boot"):
        os.makedirs(os.path.join(tree, folder), exist_ok=True)
    with open(os.path.join(tree, "etc", "fstab"), "w") as handle:
        handle.write("# <file system> <mount point> <type> <options> <dump> <pass>\n" + fstab)
    with open(os.path.join(tree, "usr", "lib", "os-release"), "w") as handle:
        handle.write('PRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\nID=debian\nVERSION_ID="12"\n')
    os.symlink("../usr/lib/os-release", os.path.join(tree, "etc", "os-release"))
    if boot_in_root:
        make_boot(os.path.join(tree, "boot"), kernels)
    if vmlinuz_link:
        os.symlink(vmlinuz_link, os.path.join(tree, "vmlinuz"))
    for name, content in (extra or {}).items():
        with open(os.path.join(tree, name), "w") as handle:
            handle.write(content)
    return tree


def make_boot(folder, kernels):
    os.makedirs(folder, exist_ok=True)
    for release, version in kernels:
        write_kernel(os.path.join(folder, "vmlinuz-" + release), version)
        with open(os.path.join(folder, "initrd.img-" + release), "wb") as handle:
            handle.write(b"initramfs of " + release.encode() + b"\n" * 1000)


def mkfs(path, tree, size, *args):
    run(["mkfs.ext4", "-q", "-F", "-d", tree] + list(args) + [path, size])


def partitioned(path, label, layout, filesystems):
    """A disk image with an sfdisk-written table (layout: sfdisk script lines) and each filesystem
    image copied in at its partition's offset."""
    run(["truncate", "-s", "%d" % (sum(size for _, size in filesystems) + 8 * MIB), path])
    script = "label: %s\n%s\n" % (label, "\n".join(layout))
    subprocess.run(["sfdisk", "-q", path], input=script.encode(), check=True)
    table = json.loads(run(["sfdisk", "--json", path]))["partitiontable"]
    for part, (fs_image, _) in zip(table["partitions"], filesystems):
        if fs_image:
            run(["dd", "if=" + fs_image, "of=" + path, "bs=512", "seek=%d" % part["start"], "conv=notrunc,sparse",
                 "status=none"])
    return table


def image_facts(tmp_path, **args):
    """Run the module through ansible's ad-hoc mode (JSON arguments: paths are data)."""
    return image_facts_and_output(tmp_path, **args)[0]


def image_facts_and_output(tmp_path, **args):
    """image_facts, and what ansible printed (its warnings)."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    tree = tmp_path / "tree"
    result = subprocess.run([os.path.join(VENV_BIN, "ansible"), "localhost", "-m", "ext4_image_facts", "-a",
                             json.dumps(args), "--tree", str(tree)], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=HANG_S)
    out = result.stdout.decode()
    assert result.returncode == 0, out
    with open(tree / "localhost") as handle:
        result = json.load(handle)
    assert result["changed"] is False and "exception" not in result, out
    return result["ext4_image_facts"], out


def assert_documented(facts):
    """Every key of a real result is documented in the module's RETURN (the output contract)."""
    doc = module_return_doc(os.path.join(ROOT, "plugins", "modules", "ext4_image_facts.py"))
    assert undocumented({"ext4_image_facts": facts}, doc, "result") == []


def by_mountpoint(facts):
    return dict((fs["mountpoint"], fs) for fs in facts["filesystems"])


def reasons(facts):
    return " | ".join("%s: %s" % (e["where"], e["reason"]) for e in facts["errors"])


def findings_of(facts):
    findings, _, _ = engine.evaluate_host(facts, catalog_mod.load(os.path.join(ROOT, "rules")))
    return findings


def image_rules(facts):
    """(rule, mountpoint) of the image rules' findings."""
    return sorted((f["rule"], f["mountpoint"]) for f in findings_of(facts) if f["rule"].startswith("IMAGE_"))


def offline_verdict(facts):
    """(verdict, host report) of the offline host of these facts, as the report step gives it
    (playbooks/ami_precheck.yml records it audited when a root filesystem was found and the check finished)."""
    judged = facts["image"]["root"] is not None and facts["image"]["incomplete"] is None
    record = {"host": "image-offline", "status": "audited" if judged else "failed",
              "reason": None if judged else facts["image"]["incomplete"] or reasons(facts), "facts": facts}
    report = fleet.build_host_report(record, catalog_mod.load(os.path.join(ROOT, "rules")), [], "test",
                                     datetime.datetime.now(datetime.timezone.utc))
    return reports.verdict([report], "high", True)[0], report


def sha256(path):
    with open(path, "rb") as handle:
        return hashlib.sha256(handle.read()).hexdigest()


# ------------------------------------------------------------------------ images
@pytest.fixture(scope="module")
def mbr_image(tmp_path_factory):
    """MBR: 1 = /boot (ext4, label 'boot'), 2 = / (ext4), extended 3 holding logical 5 = /data
    (128-byte inodes). fstab names them by LABEL=, UUID= and device name; /vmlinuz points into /boot."""
    base = tmp_path_factory.mktemp("mbr")
    boot_tree = str(base / "boot-tree")
    make_boot(boot_tree, [K61, K612])
    root_tree = make_tree(str(base / "root-tree"), fstab=(
        "UUID=%s / ext4 errors=remount-ro,nodelalloc 0 1\n"
        "LABEL=boot /boot ext4 defaults,noatime 0 2\n"
        "/dev/sda5 /data ext4 noatime,commit=60,nofail 0 2\n"
        "server:/export /srv/nfs nfs4 rw,hard 0 0\n" % ROOT_UUID), boot_in_root=False,
        vmlinuz_link="boot/vmlinuz-" + K612[0])
    os.makedirs(os.path.join(root_tree, "data"))
    data_tree = str(base / "data-tree")
    os.makedirs(data_tree)
    mkfs(str(base / "boot.fs"), boot_tree, "16M", "-L", "boot", "-U", BOOT_UUID)
    mkfs(str(base / "root.fs"), root_tree, "24M", "-U", ROOT_UUID)
    mkfs(str(base / "data.fs"), data_tree, "16M", "-I", "128", "-U", DATA_UUID)
    disk = str(base / "disk.raw")
    # Sectors: boot at 1 MiB, root at 17 MiB, the extended one at 41 MiB, /data (logical) at 42 MiB.
    table = partitioned(disk, "dos", ["start=2048, size=16MiB, type=83", "start=34816, size=24MiB, type=83",
                                      "start=83968, size=20MiB, type=5", "start=86016, size=16MiB, type=83"],
                        [(str(base / "boot.fs"), 16 * MIB), (str(base / "root.fs"), 24 * MIB), (None, 0),
                         (str(base / "data.fs"), 20 * MIB)])
    return {"path": disk, "table": table, "base": base}


def test_mbr_image_with_separate_boot(mbr_image, tmp_path):
    facts = image_facts(tmp_path, image=mbr_image["path"])
    assert facts["schema"] == "ext4-fleet-audit/facts/v1"
    assert facts["errors"] == [], reasons(facts)
    image = facts["image"]
    assert image["format"] == "raw" and image["partition_table"] == "mbr"
    assert image["disk_id"] == mbr_image["table"]["id"].replace("0x", "")
    sfdisk_parts = dict((int(part["node"].rsplit("raw", 1)[1]), part) for part in mbr_image["table"]["partitions"])
    assert sorted(sfdisk_parts) == [1, 2, 3, 5]
    assert [part["number"] for part in image["partitions"]] == [1, 2, 5]  # 3 is the extended one holding 5
    for part in image["partitions"]:
        assert part["start"] == sfdisk_parts[part["number"]]["start"] * 512
        assert part["size"] == sfdisk_parts[part["number"]]["size"] * 512
    assert image["root"] == {"partition": 2, "uuid": ROOT_UUID, "label": None}

    mounts = by_mountpoint(facts)
    assert sorted(mounts) == ["/", "/boot", "/data"]
    root, boot, data = mounts["/"], mounts["/boot"], mounts["/data"]
    assert (root["device"], root["partition"], root["uuid"]) == ("UUID=" + ROOT_UUID, 2, ROOT_UUID)
    assert (boot["device"], boot["partition"], boot["label"]) == ("LABEL=boot", 1, "boot")
    assert (data["device"], data["partition"], data["uuid"]) == ("/dev/sda5", 5, DATA_UUID)
    assert all(fs["options_source"] == "inferred" and fs["fstype"] == "ext4" for fs in mounts.values())
    root_options = root["options"]
    assert {"data=ordered", "nodelalloc", "errors=remount-ro", "auto_da_alloc", "commit=5"} <= set(root_options)
    assert "commit=60" in data["options"] and data["superblock"]["inode_size"] == 128
    assert root["fstab"]["line"] == 2 and root["fstab_drift"] == []
    assert facts["netfs"] == [{"mountpoint": "/srv/nfs", "fstype": "nfs4", "source": "server:/export",
                               "options": ["rw", "hard"]}]

    # Kernels from the /boot partition; /vmlinuz (in root) points across the mount into it.
    assert [k["release"] for k in image["kernels"]] == [K61[0], K612[0]]
    assert image["boot_kernel"] == {"release": K612[0], "why": "the target of /vmlinuz"}
    kernel = facts["kernel"]
    assert kernel["release"] == K612[0] and kernel["vendor"] == "debian" and kernel["upstream"] == "6.12.57"
    assert kernel["proc_version"] == "Linux version " + K612[1] and kernel["page_size"] == 4096
    assert kernel["os_release"]["ID"] == "debian"  # through the relative os-release symlink

    # e2fsck -fn (at each partition's offset) and the superblocks find every filesystem clean.
    assert [fs["fsck"] for fs in facts["filesystems"]] == [{"clean": True, "exit_code": 0, "problems": []}] * 3
    assert facts["image"]["fstab_unresolved"] == []
    assert image_rules(facts) == []

    # The same rules as for a running host: the 128-byte inodes of /data are found.
    findings, undetermined, _ = engine.evaluate_host(facts, catalog_mod.load(os.path.join(ROOT, "rules")))
    assert ("EXT4_INODE_128", "/data") in [(f["rule"], f["mountpoint"]) for f in findings]
    assert not [f for f in findings if f["rule"] == "EXT4_INODE_128" and f["mountpoint"] != "/data"]
    assert_documented(facts)  # partitions (MBR, logical), three filesystems with fstab entries, netfs


def test_qcow2_copy_gives_the_same_facts_and_leaves_no_raw_copy(mbr_image, tmp_path):
    qcow2 = str(tmp_path / "disk.qcow2")
    run(["qemu-img", "convert", "-f", "raw", "-O", "qcow2", mbr_image["path"], qcow2])
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    raw = image_facts(tmp_path / "a", image=mbr_image["path"])
    converted = image_facts(tmp_path / "b", image=qcow2, tmp_dir=str(scratch))
    assert converted["errors"] == [], reasons(converted)
    assert converted["image"]["format"] == "qcow2"
    for key in ("kernel", "filesystems", "netfs"):
        assert converted[key] == raw[key], key
    assert os.listdir(scratch) == []  # the temporary raw copy is gone


# qemu-img's output format and options for each format the check reads, and what the check says it is.
FORMATS = [
    ("vpc", "subformat=fixed", "vhd", "fixed", True),
    ("vpc", "subformat=dynamic", "vhd", "dynamic", False),
    ("vmdk", "subformat=monolithicSparse", "vmdk", "monolithicSparse", False),
    ("vmdk", "subformat=streamOptimized", "vmdk", "streamOptimized", False),
    ("vhdx", "subformat=dynamic", "vhdx", None, False),
]


def convert(raw, path, driver, options):
    run(["qemu-img", "convert", "-f", "raw", "-O", driver, "-o", options, raw, path])
    return path


@pytest.mark.parametrize("driver, options, fmt, subformat, in_place", FORMATS)
def test_every_format_gives_the_raw_images_facts_and_leaves_nothing(mbr_image, tmp_path, driver, options, fmt,
                                                                    subformat, in_place):
    """Told apart by their headers (every copy is named disk.img), read with the same facts as the
    raw image; the raw copy of those not read in place is gone afterwards."""
    image = convert(mbr_image["path"], str(tmp_path / "disk.img"), driver, options)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    raw = image_facts(tmp_path / "a", image=mbr_image["path"])
    facts = image_facts(tmp_path / "b", image=image, tmp_dir=str(scratch))
    assert facts["errors"] == [], reasons(facts)
    assert (facts["image"]["format"], facts["image"]["subformat"], facts["image"]["read_in_place"]) == (
        fmt, subformat, in_place)
    for key in ("kernel", "filesystems", "netfs"):
        assert facts[key] == raw[key], key
    assert facts["image"]["partitions"] == raw["image"]["partitions"]
    assert [step["step"] == "raw copy of the image" for step in facts["image"]["steps"]][0] is not in_place
    assert os.listdir(scratch) == []
    assert_documented(facts)
    stated = image_facts(tmp_path / "c", image=image, format=fmt, tmp_dir=str(scratch))
    assert stated["errors"] == [] and stated["filesystems"] == raw["filesystems"]


def patch(path, offset, data):
    with open(path, "r+b") as handle:
        handle.seek(offset)
        handle.write(data)


def vhd_footer_patch(offset, data):
    """Change the footer of a VHD at the end of the file, and make its checksum right again: a lying footer."""
    def change(path):
        size = os.path.getsize(path)
        with open(path, "r+b") as handle:
            handle.seek(size - 512)
            footer = bytearray(handle.read(512))
            footer[offset:offset + len(data)] = data
            footer[64:68] = b"\0\0\0\0"
            footer[64:68] = struct.pack(">I", ~sum(footer) & 0xFFFFFFFF)
            handle.seek(size - 512)
            handle.write(footer)
    return change


def cut(length):
    def change(path):
        os.truncate(path, length if length > 0 else os.path.getsize(path) + length)
    return change


def flip(offset):
    def change(path):
        with open(path, "r+b") as handle:
            handle.seek(offset if offset >= 0 else os.path.getsize(path) + offset)
            byte = handle.read(1)
            handle.seek(-1, 1)
            handle.write(bytes([byte[0] ^ 0xFF]))
    return change


@pytest.mark.parametrize("driver, options, change, message", [
    ("qcow2", "compat=1.1", cut(64), "the qcow2 header ends at byte 72, past the end of the file (64 bytes)"),
    ("qcow2", "compat=1.1", lambda p: patch(p, 40, struct.pack(">Q", 1 << 40)),
     "the qcow2 L1 table (l1_table_offset 1099511627776"),
    ("vpc", "subformat=fixed", vhd_footer_patch(48, struct.pack(">Q", 1 << 30)),
     "fixed VHD footer says the disk is 1073741824 bytes, the file holds"),
    ("vpc", "subformat=fixed", cut(-100), "VHD footer not at the file's last 512 bytes (found at byte"),
    ("vpc", "subformat=dynamic", flip(-400), "VHD footer at the end: checksum"),
    ("vpc", "subformat=dynamic", cut(4096), "VHD footer not at the file's last 512 bytes (absent)"),
    ("vpc", "subformat=dynamic", vhd_footer_patch(60, struct.pack(">I", 4)), "VHD differencing disk: refused"),
    ("vmdk", "subformat=monolithicSparse", lambda p: patch(p, 28, struct.pack("<Q", 1 << 30)),
     "the VMDK descriptor (sector 1073741824"),
    ("vmdk", "subformat=monolithicSparse", cut(300), "the VMDK sparse extent header ends at byte 512"),
    ("vmdk", "subformat=streamOptimized", cut(2048), "the VMDK descriptor (sector 1,"),
    ("vmdk", "subformat=streamOptimized", lambda p: patch(p, 12, struct.pack("<Q", 99)),
     "VMDK extent 'RW "),
    ("vhdx", "subformat=dynamic", flip(64 * 1024 + 100), "VHDX header 1 (byte 65536): checksum"),
    ("vhdx", "subformat=dynamic", flip(256 * 1024 + 20), "VHDX region table 2 (byte 262144): checksum"),
    ("vhdx", "subformat=dynamic", cut(200 * 1024), "the VHDX headers and region tables ends at byte 327680"),
])
def test_truncated_or_lying_headers_are_refused_and_leave_nothing(bare_image, tmp_path, driver, options, change,
                                                                  message):
    image = convert(bare_image["path"], str(tmp_path / "disk.img"), driver, options)
    change(image)
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    facts = image_facts(tmp_path, image=image, tmp_dir=str(scratch))
    assert len(facts["errors"]) == 1 and facts["errors"][0]["where"] == "image", facts["errors"]
    reason = facts["errors"][0]["reason"]
    assert reason.startswith(image + ": ") and message in reason, reason
    assert facts["filesystems"] == [] and facts["image"]["root"] is None and facts["image"]["format"] is None
    assert offline_verdict(facts)[0] == "incomplete"
    assert os.listdir(scratch) == []


def test_vmdk_with_a_parent_is_refused(bare_image, tmp_path):
    base = convert(bare_image["path"], str(tmp_path / "base.vmdk"), "vmdk", "subformat=monolithicSparse")
    child = str(tmp_path / "child.vmdk")
    run(["qemu-img", "create", "-q", "-f", "vmdk", "-F", "vmdk", "-b", base, child])
    facts = image_facts(tmp_path, image=child)
    assert "%s: VMDK with a parent" % child in reasons(facts) and facts["filesystems"] == []


AMAZON_IMAGE_ID = ('image_name="al2023-ami"\nimage_version="2023"\nimage_arch="x86_64"\n'
                   'image_file="al2023-ami-2023.0.20230315.0-kernel-6.1-x86_64.xfs.gpt"\nimage_stamp="24b9-a9df"\n'
                   'image_date="20230315211521"\nrecipe_name="al2023 ami"\n')


@pytest.mark.parametrize("files, name, identity", [
    ({"etc/image-id": AMAZON_IMAGE_ID}, "disk.raw",
     {"name": "al2023-ami", "name_source": "/etc/image-id image_name", "version": "2023", "build_id": None,
      "vendor_image_id": "al2023-ami-2023.0.20230315.0-kernel-6.1-x86_64.xfs.gpt", "build_date": "2023-03-15",
      "build_date_source": "/etc/image-id image_date"}),
    ({"etc/cloud/build.info": "build_name: server\nserial: 20240423.1\n"}, "disk.raw",
     {"name": "server", "name_source": "/etc/cloud/build.info build_name", "version": None, "build_id": "20240423.1",
      "vendor_image_id": None, "build_date": "2024-04-23", "build_date_source": "/etc/cloud/build.info serial"}),
    ({"usr/lib/os-release": 'ID=debian\nVERSION_ID="12"\nIMAGE_ID=web\nIMAGE_VERSION=7\nBUILD_ID=2026-11-02\n'},
     "disk.raw", {"name": "web", "name_source": "os-release IMAGE_ID", "version": "7", "build_id": "2026-11-02",
                  "vendor_image_id": None, "build_date": "2026-11-02", "build_date_source": "os-release BUILD_ID"}),
    ({}, "aliyun-2.1903-x64-20G-alibase-20190327.vhd",
     {"name": None, "name_source": None, "version": None, "build_id": None, "vendor_image_id": None,
      "build_date": "2019-03-27", "build_date_source": "image file name"}),
    ({"etc/image-id": "image_date=20230315211521\n" + "#" * (64 * 1024)}, "web-20200101.raw",
     {"name": None, "name_source": None, "version": None, "build_id": None, "vendor_image_id": None,
      "build_date": "2020-01-01", "build_date_source": "image file name"}),
])
def test_the_image_identity_is_what_its_distribution_records(tmp_path, files, name, identity):
    """Amazon Linux's /etc/image-id, Ubuntu cloud images' build.info, os-release's IMAGE_ID and
    BUILD_ID, else the date in the file's name; an image-id over its 64 KiB cap is unread, not believed."""
    tree = readable_root(tmp_path)
    for path, text in files.items():
        os.makedirs(os.path.dirname(os.path.join(tree, path)), exist_ok=True)
        with open(os.path.join(tree, path), "w") as handle:
            handle.write(text)
    disk = str(tmp_path / name)
    mkfs(disk, tree, "32M", "-U", ROOT_UUID)
    facts = image_facts(tmp_path, image=disk)
    assert facts["image"]["identity"] == identity
    big = "#" * 1000 in files.get("etc/image-id", "")
    assert [entry["path"] for entry in facts["image"]["unread"]] == (["/etc/image-id"] if big else [])
    assert_documented(facts)


K_ALINUX = ("4.19.24-9.al7.x86_64", "4.19.24-9.al7.x86_64 (mockbuild@ecs-build) (gcc version 6.5.1 20181026 "
            "(Alibaba 6.5.1-1) (GCC)) #1 SMP Wed Mar 27 11:08:22 CST 2019")


@pytest.mark.parametrize("name, raised", [
    ("aliyun-2.1903-x64-20G-alibase-20190327.vhd", True),
    ("aliyun-2.1903-x64-20G-alibase-20190326.vhd", False),
])
def test_seed_001_notice_on_an_alibaba_vhd(tmp_path, name, raised):
    """The seed's own image name, an Alibaba Cloud Linux 2 root with the notice's first kernel and
    dioread_nolock + nodelalloc in fstab, as a dynamic VHD: the notice applies from 20190327 on."""
    tree = make_tree(str(tmp_path / "tree"), fstab="UUID=%s / ext4 defaults,dioread_nolock,nodelalloc 0 1\n"
                     % ROOT_UUID, kernels=[K_ALINUX], vmlinuz_link="boot/vmlinuz-" + K_ALINUX[0])
    with open(os.path.join(tree, "usr", "lib", "os-release"), "w") as handle:
        handle.write('NAME="Alibaba Cloud Linux (Aliyun Linux)"\nVERSION="2.1903 LTS (Hunting Beagle)"\n'
                     'ID="alinux"\nID_LIKE="rhel fedora centos anolis"\nVERSION_ID="2.1903"\n')
    raw = str(tmp_path / "disk.raw")
    mkfs(raw, tree, "32M", "-U", ROOT_UUID)
    image = convert(raw, str(tmp_path / name), "vpc", "subformat=dynamic")
    facts = image_facts(tmp_path, image=image)
    assert facts["errors"] == [], reasons(facts)
    assert facts["kernel"]["vendor"] == "alibaba" and facts["kernel"]["os_release"]["ID"] == "alinux"
    rules = [(f["rule"], f["mountpoint"]) for f in findings_of(facts)]
    assert (("IMAGE_ALIBABA_DIOREAD_NOLOCK_NODELALLOC", "/") in rules) is raised, rules
    assert ("EXT4_DIOREAD_NOLOCK_NODELALLOC", "/") in rules  # the mechanism, whatever the image's date


def test_gpt_image_by_partuuid_and_partlabel_and_grub(tmp_path):
    tree = make_tree(str(tmp_path / "root-tree"), fstab="", kernels=[K61, K612], extra={})
    os.makedirs(os.path.join(tree, "boot", "grub"))
    with open(os.path.join(tree, "boot", "grub", "grub.cfg"), "w") as handle:
        handle.write("menuentry 'Debian, with Linux %s' {\n\tlinux\t/boot/vmlinuz-%s root=UUID=%s ro quiet\n}\n"
                     % (K61[0], K61[0], ROOT_UUID))
    data_tree = str(tmp_path / "data-tree")
    os.makedirs(data_tree)
    mkfs(str(tmp_path / "data.fs"), data_tree, "16M", "-U", DATA_UUID, "-O", "^has_journal")
    disk = str(tmp_path / "disk.raw")
    layout = ["start=2048, size=4MiB, type=C12A7328-F81F-11D2-BA4B-00A0C93EC93B, name=EFI",
              "size=24MiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=root",
              "size=16MiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4, name=data"]
    # sfdisk picks the partition GUIDs; fstab names root by PARTUUID and data by PARTLABEL.
    run(["truncate", "-s", "%d" % (48 * MIB), disk])
    subprocess.run(["sfdisk", "-q", disk], input=("label: gpt\n" + "\n".join(layout) + "\n").encode(), check=True)
    table = json.loads(run(["sfdisk", "--json", disk]))["partitiontable"]
    root_partuuid = table["partitions"][1]["uuid"]
    with open(os.path.join(tree, "etc", "fstab"), "a") as handle:
        handle.write("PARTUUID=%s / ext4 defaults 0 1\nPARTLABEL=data /srv ext4 nobarrier 0 2\n" % root_partuuid.lower())
    mkfs(str(tmp_path / "root.fs"), tree, "24M", "-U", ROOT_UUID)
    for part, fs_image in zip(table["partitions"][1:], ["root.fs", "data.fs"]):
        run(["dd", "if=%s" % (tmp_path / fs_image), "of=" + disk, "bs=512", "seek=%d" % part["start"],
             "conv=notrunc,sparse", "status=none"])

    facts = image_facts(tmp_path, image=disk)
    assert facts["errors"] == [], reasons(facts)
    image = facts["image"]
    assert image["partition_table"] == "gpt" and image["disk_id"] == table["id"].lower()
    assert [(p["number"], p["type_name"], p["name"], p["partuuid"]) for p in image["partitions"]] == \
        [(i + 1, kind, name, part["uuid"].lower()) for i, (part, kind, name) in
         enumerate(zip(table["partitions"], ["efi-system", "linux", "linux"], ["EFI", "root", "data"]))]
    assert image["partitions"][0]["fs"] is None  # not ext: listed, not read
    mounts = by_mountpoint(facts)
    assert mounts["/"]["partition"] == 2 and mounts["/srv"]["partition"] == 3
    assert "nobarrier" in mounts["/srv"]["options"] and "data=ordered" not in mounts["/srv"]["options"]
    assert image["boot_kernel"] == {"release": K61[0], "why": "the first entry of /boot/grub/grub.cfg"}
    findings, _, _ = engine.evaluate_host(facts, catalog_mod.load(os.path.join(ROOT, "rules")))
    assert ("EXT4_NO_JOURNAL", "/srv") in [(f["rule"], f["mountpoint"]) for f in findings]
    assert_documented(facts)  # GPT partitions with names, one without a filesystem


@pytest.fixture
def bare_image(tmp_path):
    tree = make_tree(str(tmp_path / "tree"), fstab="/dev/vda / ext4 errors=remount-ro 0 1\n",
                     kernels=[K61, K612], vmlinuz_link="boot/vmlinuz-" + K61[0])
    disk = str(tmp_path / "bare.raw")
    mkfs(disk, tree, "32M", "-U", ROOT_UUID)
    return {"path": disk, "tree": tree}


def test_bare_filesystem_and_boot_files(bare_image, tmp_path):
    out = tmp_path / "boot-files"
    out.mkdir()
    facts = image_facts(tmp_path, image=bare_image["path"], boot_files_dir=str(out))
    assert facts["errors"] == [], reasons(facts)
    assert facts["image"]["partition_table"] == "none"
    assert by_mountpoint(facts)["/"]["device"] == "/dev/vda"
    assert facts["image"]["boot_kernel"]["release"] == K61[0]  # the /vmlinuz link, not the highest version
    files = facts["image"]["boot_files"]
    assert files == {"kernel": str(out / "vmlinuz"), "initrd": str(out / "initrd.img"),
                     "root": "UUID=" + ROOT_UUID, "release": K61[0]}
    for name, source in (("vmlinuz", "vmlinuz-"), ("initrd.img", "initrd.img-")):
        with open(out / name, "rb") as got, open(os.path.join(bare_image["tree"], "boot", source + K61[0]), "rb") as want:
            assert got.read() == want.read()
    chosen = image_facts(tmp_path / "again", image=bare_image["path"], boot_kernel=K612[0])
    assert chosen["image"]["boot_kernel"] == {"release": K612[0], "why": "chosen (boot_kernel)"}
    missing = image_facts(tmp_path / "missing", image=bare_image["path"], boot_kernel="9.9.9")
    assert "boot_kernel '9.9.9' is not in the image" in reasons(missing)
    assert missing["kernel"]["release"] is None and missing["kernel"]["upstream"] is None
    assert_documented(facts)  # boot_files
    assert_documented(missing)  # errors, a kernel whose versions are unknown


def test_hostile_names_are_refused_and_nothing_is_written(tmp_path):
    """A symlink whose target reads like a debugfs request, and a kernel whose name has one in it:
    both refused, and neither 'dump' ever runs."""
    victim = tmp_path / "written-by-debugfs"
    tree = make_tree(str(tmp_path / "tree"), fstab="/dev/vda / ext4 defaults 0 1\n", kernels=[K61],
                     vmlinuz_link="boot/vmlinuz-1 %s %s" % ("/etc/fstab", victim))
    write_kernel(os.path.join(tree, "boot", "vmlinuz-6.1.0-1 dump fstab written-by-debugfs"), K612[1])
    os.symlink("/" + "a" * 90 + " dump /etc/fstab " + str(victim), os.path.join(tree, "boot", "vmlinuz"))  # a slow symlink
    disk = str(tmp_path / "hostile.raw")
    mkfs(disk, tree, "32M")
    out = tmp_path / "boot-files"
    out.mkdir()
    facts = image_facts(tmp_path, image=disk, boot_files_dir=str(out))
    text = reasons(facts)
    assert "refused symlink /vmlinuz -> 'boot/vmlinuz-1 /etc/fstab %s'" % victim in text, text
    assert "refused symlink /boot/vmlinuz -> '/%s dump" % ("a" * 90) in text, text
    assert "refused in-image path '/boot/vmlinuz-6.1.0-1 dump fstab written-by-debugfs'" in text, text
    assert not victim.exists()
    # The plain kernel is still read, and chosen as the highest version since the links were refused.
    assert [k["release"] for k in facts["image"]["kernels"]] == [K61[0]]
    assert facts["image"]["boot_kernel"]["why"].startswith("the highest version")
    assert sorted(os.listdir(out)) == ["initrd.img", "vmlinuz"]


def write_bytes(data):
    def make(path):
        with open(path, "wb") as handle:
            handle.write(data)
    return make


@pytest.mark.parametrize("make, message", [
    (write_bytes(b""), "is empty"),
    (write_bytes(random.Random(4).randbytes(4 * MIB)), "no partition table"),
    (lambda path: None, "cannot read"),
    (os.mkdir, "is not a regular file"),
])
def test_unreadable_images_give_one_clear_error(tmp_path, make, message):
    path = str(tmp_path / "image.raw")
    make(path)
    facts = image_facts(tmp_path, image=path)
    assert len(facts["errors"]) == 1 and facts["errors"][0]["where"] == "image", facts["errors"]
    assert message in facts["errors"][0]["reason"]
    assert facts["filesystems"] == [] and facts["image"]["root"] is None
    assert facts["kernel"]["release"] is None  # the schema's kernel object, versions unknown


def test_a_question_mark_in_the_path_is_refused(bare_image, tmp_path):
    """e2fsprogs reads what follows '?' as I/O options (that is how the offset is passed)."""
    odd = str(tmp_path / "odd?offset=4096.raw")
    run(["cp", "--sparse=always", bare_image["path"], odd])
    facts = image_facts(tmp_path, image=odd)
    assert "holds '?', which e2fsprogs reads as the start of I/O options" in reasons(facts)
    assert facts["filesystems"] == []


def test_qcow2_with_a_backing_file_is_refused(bare_image, tmp_path):
    overlay = str(tmp_path / "overlay.qcow2")
    run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", bare_image["path"], overlay])
    facts = image_facts(tmp_path, image=overlay)
    assert "qcow2 image %s refers to another file (%s): refused" % (overlay, bare_image["path"]) in reasons(facts)
    assert facts["filesystems"] == []
    wrong = image_facts(tmp_path / "wrong", image=bare_image["path"], format="qcow2")
    assert "was given as qcow2 but its headers say raw" in reasons(wrong)


def test_offline_precheck_playbook(mbr_image, tmp_path):
    """playbooks/ami_precheck.yml without the boot: the offline host's report, rules and verdict."""
    reports, work = tmp_path / "reports", tmp_path / "work"
    work.mkdir()
    rc, out = ansible_playbook("playbooks/ami_precheck.yml", "-e", json.dumps({
        "image": mbr_image["path"], "ami_precheck_boot": False, "ext4_audit_reports_dir": str(reports),
        "ami_precheck_name": "golden", "ami_precheck_work_parent": str(work)}))
    assert (reports / "latest" / "summary.json").exists(), out[-3000:]
    summary = load_json(str(reports / "latest" / "summary.json"))
    assert (rc == 0) == (summary["verdict"] == "pass"), (rc, summary["verdict"], out[-3000:])
    report = load_host_report(str(reports / "latest" / "hosts" / "golden-offline.json"))
    assert report["status"] == "audited" and report["kernel"]["release"] == K612[0]
    assert ("EXT4_INODE_128", "/data") in [(f["rule"], f["mountpoint"]) for f in report["findings"]]
    assert [h["host"] for h in summary["hosts"]] == ["golden-offline"], summary["hosts"]
    assert os.listdir(work) == []  # the work folder is removed


def test_offline_precheck_of_an_image_without_kernels(tmp_path):
    """No kernel in /boot: the offline host is still audited (its kernel's versions unknown, the
    kernel rules undetermined), and under --check the boot is skipped."""
    tree = make_tree(str(tmp_path / "tree"), fstab="/dev/vda / ext4 defaults 0 1\n", kernels=())
    disk = str(tmp_path / "no-kernel.raw")
    mkfs(disk, tree, "32M")
    reports = tmp_path / "reports"
    rc, out = ansible_playbook("--check", "playbooks/ami_precheck.yml", "-e", json.dumps({
        "image": disk, "ext4_audit_reports_dir": str(reports), "ami_precheck_name": "bare",
        "ami_precheck_ssh_key": str(tmp_path / "unused-key"), "ami_precheck_work_parent": str(tmp_path)}))
    assert (reports / "latest" / "summary.json").exists(), out[-3000:]
    summary = load_json(str(reports / "latest" / "summary.json"))
    assert [h["host"] for h in summary["hosts"]] == ["bare-offline"], summary["hosts"]  # not booted under --check
    report = load_host_report(str(reports / "latest" / "hosts" / "bare-offline.json"))
    assert report["status"] == "audited" and report["kernel"]["release"] is None
    assert [e for e in report["errors"] if e["reason"] == "no readable kernel (vmlinuz-*) in /boot"], report["errors"]
    assert "KERNEL_DIO_CORRUPTION_6_1_64" in [u["rule"] for u in report["undetermined"]]
    # ... and the gate fails it: the kernel rules could not be checked
    no_kernel = [f for f in report["findings"] if f["rule"] == "IMAGE_NO_KERNEL"]
    assert [f["severity"] for f in no_kernel] == ["high"], report["findings"]
    assert no_kernel[0]["message"] == ("No kernel could be read from the image (no readable kernel (vmlinuz-*) in "
                                       "/boot): its kernel rules cannot be checked."), no_kernel
    assert rc != 0 and summary["verdict"] == "fail", (rc, summary["verdict"])


# ------------------------------------------------------------------ hostile images
def test_huge_sparse_files_are_not_read(tmp_path):
    """A 16 MiB image holding a sparse 300 MiB os-release and a sparse 2 GiB kernel (a real setup header
    first): os-release is refused by its size without being read, and of the kernel only the first
    64 KiB are read; the check takes seconds (it took over 200 s when debugfs' output was read whole)."""
    tree = make_tree(str(tmp_path / "tree"), fstab="/dev/vda / ext4 defaults 0 1\n", kernels=[K61])
    os.truncate(os.path.join(tree, "usr", "lib", "os-release"), 300 * MIB)
    os.truncate(os.path.join(tree, "boot", "vmlinuz-" + K61[0]), 2048 * MIB)
    disk = str(tmp_path / "sparse.raw")
    mkfs(disk, tree, "16M")
    start = time.monotonic()
    facts = image_facts(tmp_path, image=disk)
    assert time.monotonic() - start < 30
    assert "os-release: /etc/os-release: 314572800 bytes, over the 65536-byte cap for this file: not read" in \
        reasons(facts), reasons(facts)
    assert facts["image"]["os_release"] is None
    assert [k["release"] for k in facts["image"]["kernels"]] == [K61[0]]


@pytest.mark.parametrize("digits", [4000, 5000])
def test_fstab_source_with_thousands_of_digits(tmp_path, digits):
    """/dev/sda and 5,000 digits went to int() (Python refuses strings of over 4,300 digits): a traceback.
    Now a line that long is over the 4096 bytes mount(2) takes: the fstab is not read, and the gate
    fails the image for it. With 4,000 digits the line is read: the source names no partition, and
    like every entry the boot needs that matches nothing (not one with nofail), it fails the gate."""
    spec = "/dev/sda" + "1" * digits
    tree = make_tree(str(tmp_path / "tree"), fstab=(
        "/dev/vda / ext4 defaults 0 1\n%s /data ext4 defaults 0 2\n"
        "UUID=%s /scratch ext4 defaults,nofail 0 2\n" % (spec, DATA_UUID)))
    disk = str(tmp_path / "digits.raw")
    mkfs(disk, tree, "32M")
    facts = image_facts(tmp_path, image=disk)
    if digits > 4096:
        assert facts["image"]["unread"] == [{"path": "/etc/fstab of filesystem", "reason": "line 3 is %d bytes, over "
                                             "the 4096 bytes mount(2) takes for an entry's options: not read"
                                             % (digits + 32)}]
        assert "IMAGE_FILE_UNREAD" in [f["rule"] for f in findings_of(facts)]
        return
    assert "fstab: line 3: %s (/data) matches no ext2/3/4 filesystem in the image" % spec in reasons(facts)
    assert "line 4: UUID=%s (/scratch) matches no ext2/3/4 filesystem in the image (nofail or noauto: the boot " \
        "does not need it)" % DATA_UUID in reasons(facts)
    assert facts["image"]["fstab_unresolved"] == [{"line": 3, "spec": spec, "mountpoint": "/data", "fstype": "ext4"}]
    unresolved = [f for f in findings_of(facts) if f["rule"] == "IMAGE_FSTAB_UNRESOLVED"]
    assert [f["severity"] for f in unresolved] == ["high"]
    assert unresolved[0]["message"] == ("fstab entries the boot needs match no ext2/3/4 filesystem of the image: "
                                        "line 3: %s (/data)." % spec)


def test_gpt_with_huge_entries(tmp_path):
    """A GPT header (its CRC valid) declaring 4,096 entries of 0xFFFFFFF0 bytes: the table was read
    whole (MemoryError); now the sizes are bounded before anything is read."""
    disk = bytearray(4 * MIB)
    disk[446:462] = struct.pack("<B3xB3xII", 0, 0xEE, 1, len(disk) // 512 - 1)
    disk[510:512] = b"\x55\xaa"
    header = bytearray(92)
    struct.pack_into("<8sIII4xQQQQ16sQIII", header, 0, b"EFI PART", 0x10000, 92, 0, 1, len(disk) // 512 - 1, 34,
                     len(disk) // 512 - 34, bytes(16), 2, 4096, 0xFFFFFFF0, 0)
    struct.pack_into("<I", header, 16, binascii.crc32(bytes(header)) & 0xFFFFFFFF)
    disk[512:604] = header
    path = tmp_path / "gpt.raw"
    path.write_bytes(bytes(disk))
    facts = image_facts(tmp_path, image=str(path))
    assert facts["errors"] == [{"where": "image", "reason": "GPT has 4096 entries of 4294967280 bytes: not a table "
                                "this check reads (entries of 128/256/512/1024/2048/4096 bytes, at most 1048576 "
                                "bytes in all)"}]


def test_damaged_filesystem_at_a_partition_offset(mbr_image, tmp_path):
    """/data (logical partition 5) damaged, root and /boot clean: e2fsck -fn runs at each partition's
    offset, finds only /data not clean, and writes nothing to the image."""
    disk = str(tmp_path / "damaged.raw")
    run(["cp", "--sparse=always", mbr_image["path"], disk])
    data = str(tmp_path / "data.fs")
    offset = [p for p in image_facts(tmp_path / "a", image=disk)["image"]["partitions"] if p["number"] == 5][0]
    run(["dd", "if=" + disk, "of=" + data, "bs=512", "skip=%d" % (offset["start"] // 512),
         "count=%d" % (offset["size"] // 512), "status=none"])
    run(["debugfs", "-w", "-R", "mkdir /lost-dir", data])
    run(["debugfs", "-w", "-R", "clri /lost-dir", data])  # the entry stays, its inode is zeroed
    run(["dd", "if=" + data, "of=" + disk, "bs=512", "seek=%d" % (offset["start"] // 512), "conv=notrunc",
         "status=none"])
    before = sha256(disk)
    facts = image_facts(tmp_path / "b", image=disk)
    assert sha256(disk) == before
    fsck = dict((fs["mountpoint"], fs["fsck"]) for fs in facts["filesystems"])
    assert fsck["/"]["clean"] and fsck["/boot"]["clean"]
    assert fsck["/data"]["exit_code"] == 4 and not fsck["/data"]["clean"]
    assert fsck["/data"]["problems"][0].startswith("e2fsck -fn exited 4 (errors left uncorrected): "), fsck["/data"]
    assert image_rules(facts) == [("IMAGE_FS_NOT_CLEAN", "/data")]


# ------------------------------------------------- files the check cannot read (issue 27)
# A kernel with every fix: the verdict of these images is decided by the image rules alone (the
# Debian kernels above have open kernel CNA records, which fail the gate by themselves).
KNEW = ("99.1.0", "99.1.0 (builder@example.org) #1 SMP PREEMPT_DYNAMIC")


def readable_root(tmp_path, fstab="UUID=%s / ext4 defaults 0 1\n" % ROOT_UUID, **kwargs):
    """A root tree that passes the gate when nothing is changed in it."""
    return make_tree(str(tmp_path / "tree"), fstab=fstab, kernels=[KNEW], vmlinuz_link="boot/vmlinuz-" + KNEW[0],
                     **kwargs)


def test_a_readable_image_passes(tmp_path):
    """The baseline of the cases below: the same tree, nothing done to it, passes."""
    disk = str(tmp_path / "good.raw")
    mkfs(disk, readable_root(tmp_path), "32M", "-U", ROOT_UUID)
    facts = image_facts(tmp_path, image=disk)
    assert facts["image"]["unread"] == [] and facts["image"]["fstab_unresolved"] == [], reasons(facts)
    verdict, report = offline_verdict(facts)
    assert verdict == "pass", report["findings"]
    assert "IMAGE_FSTAB_UNRESOLVED" in [p["rule"] for p in report["passed"]]
    # each step's time is in the record
    assert [step["step"] for step in facts["image"]["steps"]] == [
        "partition table and superblocks", "root filesystem and fstab", "os-release and kernels",
        "e2fsck -fn of the filesystems"]
    assert all(0 <= step["seconds"] < 30 for step in facts["image"]["steps"])
    assert facts["image"]["incomplete"] is None and facts["image"]["budget_s"] == 600


def write_dpkg_status(tree, installed, removed=()):
    """var/lib/dpkg/status as dpkg writes it: stanzas with multi-line descriptions; `removed` packages
    keep only their configuration files (not installed)."""
    folder = os.path.join(tree, "var", "lib", "dpkg")
    os.makedirs(folder)
    stanzas = ["Package: base-files\nEssential: yes\nStatus: install ok installed\nVersion: 12.4+deb12u8\n"]
    for name, version in installed.items():
        stanzas.append("Package: %s\nStatus: install ok installed\nPriority: optional\nVersion: %s\n"
                       "Description: %s\n the package\n .\n Version: 0.0 (a continuation line)\n" % (name, version, name))
    for name, version in removed:
        stanzas.append("Package: %s\nStatus: deinstall ok config-files\nVersion: %s\n" % (name, version))
    with open(os.path.join(folder, "status"), "w") as handle:
        handle.write("\n".join(stanzas))


NEW_FEATURES = "metadata_csum_seed,orphan_file"  # what mke2fs 1.47.0's own mke2fs.conf turns on


@pytest.mark.parametrize("installed, removed, features, expected", [
    # Debian 12's GRUB, Ubuntu 22.04's e2fsprogs, a root made by an upstream mke2fs 1.47: neither reads it
    ({"grub-common": "2.06-13+deb12u1", "e2fsprogs": "1.46.5-2ubuntu1.2"}, (), NEW_FEATURES,
     [("IMAGE_FSCK_UNSUPPORTED_FEATURES", "/", "orphan_file"),
      ("IMAGE_GRUB_CANNOT_READ_BOOT_FS", "/", "metadata_csum_seed")]),
    ({"grub2-common": "1:2.12-1ubuntu7", "e2fsprogs": "1.47.0-2ubuntu1"}, (), NEW_FEATURES, []),
    # GRUB removed (its configuration files left): nothing of the image needs to read /boot with it
    ({"e2fsprogs": "1.47.0-2"}, [("grub-common", "2.06-13")], NEW_FEATURES, []),
    # the features the image's own tools know
    ({"grub-common": "2.06-13+deb12u1", "e2fsprogs": "1.46.5-2ubuntu1.2"}, (), "^metadata_csum_seed,^orphan_file", []),
], ids=["old-tools", "new-tools", "no-grub", "old-features"])
def test_the_image_tools_read_its_filesystems(tmp_path, installed, removed, features, expected):
    """The image's own GRUB and e2fsck, by the versions in its dpkg database, against the features of
    a real filesystem made here: what they cannot read fails the image."""
    tree = readable_root(tmp_path)
    write_dpkg_status(tree, installed, removed)
    disk = str(tmp_path / "tools.raw")
    mkfs(disk, tree, "32M", "-U", ROOT_UUID, "-O", features)
    facts = image_facts(tmp_path, image=disk)
    assert facts["image"]["packages"] == installed and facts["image"]["unread"] == [], reasons(facts)
    verdict, report = offline_verdict(facts)
    found = sorted((f["rule"], f["mountpoint"], " ".join(f["evidence"].get("derived.fsck_unsupported_features")
                                                         or f["evidence"].get("derived.grub_unreadable_features")))
                   for f in report["findings"] if f["rule"] in ("IMAGE_GRUB_CANNOT_READ_BOOT_FS",
                                                                 "IMAGE_FSCK_UNSUPPORTED_FEATURES"))
    assert found == expected, report["findings"]
    assert verdict == ("fail" if expected else "pass"), report["findings"]


def test_an_image_without_a_dpkg_database_leaves_its_tools_undetermined(tmp_path):
    """An rpm-based image: the versions are not read, so the two rules are undetermined, never a pass
    of what was not checked; the image's verdict does not turn on them."""
    disk = str(tmp_path / "rpm.raw")
    mkfs(disk, readable_root(tmp_path), "32M", "-U", ROOT_UUID, "-O", NEW_FEATURES)
    facts = image_facts(tmp_path, image=disk)
    assert facts["image"]["packages"] is None
    _, undetermined, _ = engine.evaluate_host(facts, catalog_mod.load(os.path.join(ROOT, "rules")))
    assert sorted((u["rule"], u["missing"][0]) for u in undetermined if u["rule"].startswith("IMAGE_")) == [
        ("IMAGE_FSCK_UNSUPPORTED_FEATURES", "derived.fsck_unsupported_features"),
        ("IMAGE_GRUB_CANNOT_READ_BOOT_FS", "derived.grub_unreadable_features")]


def test_a_dpkg_database_that_is_a_fifo_is_unread(tmp_path):
    tree = readable_root(tmp_path)
    os.makedirs(os.path.join(tree, "var", "lib", "dpkg"))
    os.mkfifo(os.path.join(tree, "var", "lib", "dpkg", "status"))
    disk = str(tmp_path / "fifo.raw")
    mkfs(disk, tree, "32M", "-U", ROOT_UUID)
    facts = image_facts(tmp_path, image=disk)
    assert facts["image"]["packages"] is None
    assert facts["image"]["unread"] == [{"path": "/var/lib/dpkg/status", "reason": "not a regular file (a FIFO)"}]
    assert offline_verdict(facts)[0] == "fail"


def dead_pid():
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


@pytest.fixture
def shared_folder():
    """A world-writable sticky folder (a /var/tmp) that the unprivileged attacker can reach."""
    path = "/dev/shm/ext4audit-shared-%d-%d" % (os.getpid(), time.monotonic_ns())
    os.mkdir(path)
    os.chmod(path, 0o1777)
    yield path
    run(["rm", "-rf", "--one-file-system", path])


def test_work_folders_of_killed_checks_are_swept_and_nothing_else(tmp_path, shared_folder):
    """A check killed while it converts a qcow2 image leaves its raw copy (as large as the image's
    disk). The next check removes such folders: only its own kind, this user's, mode 0700, whose
    process is gone; an unprivileged user's look-alikes in the shared folder are left alone."""
    victim = tmp_path / "victim"
    victim.mkdir(mode=0o700)
    (victim / "pid").write_text("%d\n" % dead_pid())
    (victim / "keep").write_text("root's file")
    # the attacker (nobody) plants a symlink to root's folder and a folder of their own, both with
    # the prefix and a dead pid
    attack = ("import os, sys; os.symlink(sys.argv[2], sys.argv[1] + '/ext4-image-link'); "
              "os.mkdir(sys.argv[1] + '/ext4-image-theirs', 0o700); "
              "open(sys.argv[1] + '/ext4-image-theirs/pid', 'w').write(sys.argv[3])")
    run(["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--", "/usr/bin/python3", "-c", attack,
         shared_folder, str(victim), "%d\n" % dead_pid()])
    stale, live = os.path.join(shared_folder, "ext4-image-stale"), os.path.join(shared_folder, "ext4-image-live")
    for folder, pid in ((stale, dead_pid()), (live, os.getpid())):
        os.mkdir(folder, 0o700)
        with open(os.path.join(folder, "pid"), "w") as handle:
            handle.write("%d\n" % pid)
        with open(os.path.join(folder, "image.raw"), "wb") as handle:
            handle.write(b"\0" * 4096)
    disk = str(tmp_path / "good.raw")
    mkfs(disk, readable_root(tmp_path), "32M", "-U", ROOT_UUID)
    facts, out = image_facts_and_output(tmp_path, image=disk, tmp_dir=shared_folder)
    assert facts["image"]["root"] is not None, reasons(facts)
    assert sorted(os.listdir(shared_folder)) == ["ext4-image-link", "ext4-image-live", "ext4-image-theirs"]
    assert sorted(os.listdir(str(victim))) == ["keep", "pid"]
    assert "removed the work folders that 1 killed earlier check(s) left: %s" % stale in " ".join(out.split()), out


def test_fstab_symlink_is_read_through_inside_the_image(tmp_path):
    """/etc/fstab -> fstab.real (relative) whose second entry names a UUID the image lacks: the link was
    not followed, the fstab skipped and the image passed; now it is read through the link and fails."""
    tree = readable_root(tmp_path, fstab="")
    os.remove(os.path.join(tree, "etc", "fstab"))
    with open(os.path.join(tree, "etc", "fstab.real"), "w") as handle:
        handle.write("UUID=%s / ext4 defaults 0 1\nUUID=%s /data ext4 defaults 0 2\n" % (ROOT_UUID, DATA_UUID))
    os.symlink("fstab.real", os.path.join(tree, "etc", "fstab"))
    disk = str(tmp_path / "link.raw")
    mkfs(disk, tree, "32M", "-U", ROOT_UUID)
    facts = image_facts(tmp_path, image=disk)
    assert facts["image"]["unread"] == [], reasons(facts)
    assert facts["image"]["fstab_unresolved"] == [{"line": 2, "spec": "UUID=" + DATA_UUID, "mountpoint": "/data",
                                                   "fstype": "ext4"}]
    assert by_mountpoint(facts)["/"]["fstab"]["line"] == 1
    verdict, report = offline_verdict(facts)
    assert verdict == "fail" and [f["rule"] for f in report["findings"] if f["severity"] in ("high", "critical")] == \
        ["IMAGE_FSTAB_UNRESOLVED"]


def test_a_symlink_is_never_followed_on_the_controller(tmp_path):
    """/etc/fstab -> an absolute path that exists on the controller (naming a missing UUID) but not in
    the image: resolved from the image's root, there is no fstab at all."""
    outside = tmp_path / "controller-fstab"
    outside.write_text("UUID=%s /data ext4 defaults 0 2\n" % DATA_UUID)
    tree = readable_root(tmp_path)
    os.remove(os.path.join(tree, "etc", "fstab"))
    os.symlink(str(outside), os.path.join(tree, "etc", "fstab"))
    disk = str(tmp_path / "outside.raw")
    mkfs(disk, tree, "32M", "-U", ROOT_UUID)
    facts = image_facts(tmp_path, image=disk)
    assert facts["image"]["fstab_unresolved"] == [] and facts["image"]["unread"] == [], reasons(facts)
    assert "no /etc/fstab: taken as the root filesystem" in reasons(facts)


def link(target, name="fstab", folder="etc"):
    def make(tree):
        path = os.path.join(tree, folder, name)
        os.remove(path)
        os.symlink(target, path)
    return make


def loop(tree):
    link("fstab.b")(tree)
    os.symlink("fstab", os.path.join(tree, "etc", "fstab.b"))


def fifo(tree):
    os.remove(os.path.join(tree, "etc", "fstab"))
    os.mkfifo(os.path.join(tree, "etc", "fstab"))


def block_device(tree):
    os.remove(os.path.join(tree, "etc", "fstab"))
    os.mknod(os.path.join(tree, "etc", "fstab"), 0o600 | 0o060000, os.makedev(7, 0))


def etc_to_itself(tree):
    run(["rm", "-rf", os.path.join(tree, "etc")])
    os.symlink("/etc", os.path.join(tree, "etc"))


def huge_etc(tree):
    """16,500 names of 250 characters: `debugfs ls -p /etc` prints over the 4 MiB listing cap. Made
    through the kernel's ext4 (mkfs.ext4 -d takes minutes over a folder this large)."""
    def fill(disk):
        mountpoint = os.path.join(os.path.dirname(disk), "mnt")
        os.mkdir(mountpoint)
        run(["mount", "-o", "loop", disk, mountpoint])
        try:
            for number in range(16500):
                open(os.path.join(mountpoint, "etc", "%05d" % number + "x" * 245), "w").close()
        finally:
            run(["umount", mountpoint])
    return fill


def long_option_field(tree):
    """A root entry (line 3) whose option field is 1,000,000 bytes (the file is under fstab's 1 MiB cap)."""
    with open(os.path.join(tree, "etc", "fstab"), "a") as handle:
        handle.write("UUID=%s / ext4 defaults,x-%s 0 1\n" % (ROOT_UUID, "a" * (1000000 - 11)))


def huge_os_release(tree):
    os.truncate(os.path.join(tree, "usr", "lib", "os-release"), 1024 * MIB)  # sparse: 1 GiB, no blocks


LOOP = "more than 40 symlinks resolving %s (a loop?)"
OVER_CAP = "debugfs -R ls -p /etc printed more than 4194304 bytes: over the cap"


@pytest.mark.parametrize("name, change, unread", [
    ("link to itself", link("fstab"), ["/etc/fstab of filesystem: " + LOOP % "/etc/fstab"]),
    ("link loop", loop, ["/etc/fstab of filesystem: " + LOOP % "/etc/fstab"]),
    ("FIFO", fifo, ["/etc/fstab of filesystem: not a regular file (a FIFO)"]),
    ("block device", block_device, ["/etc/fstab of filesystem: not a regular file (a block device)"]),
    # an /etc that cannot be read leaves the image's identity files unread too
    ("/etc to itself", etc_to_itself, ["/etc/fstab of filesystem: " + LOOP % "/etc/fstab",
                                       "/etc/os-release: " + LOOP % "/etc/os-release",
                                       "/etc/image-id: " + LOOP % "/etc/image-id",
                                       "/etc/cloud/build.info: " + LOOP % "/etc/cloud/build.info"]),
    ("/etc over the listing cap", huge_etc, ["/etc/fstab of filesystem: " + OVER_CAP, "/etc/os-release: " + OVER_CAP,
                                             "/etc/image-id: " + OVER_CAP, "/etc/cloud/build.info: " + OVER_CAP]),
    ("1 MB option field", long_option_field, ["/etc/fstab of filesystem: line 3 is 1000053 bytes, over the 4096 "
                                              "bytes mount(2) takes for an entry's options: not read"]),
    ("1 GiB os-release", huge_os_release, ["/etc/os-release: 1073741824 bytes, over the 65536-byte cap for this "
                                           "file: not read"]),
])
def test_a_file_the_check_cannot_read_never_passes(tmp_path, name, change, unread):
    """Each of these passed (exit 0): the file was skipped with a read error and IMAGE_FSTAB_UNRESOLVED
    listed as passed. Now the file is in image.unread with the reason, the rules that need it are
    undetermined and IMAGE_FILE_UNREAD fails the image."""
    tree = readable_root(tmp_path)
    after_mkfs = change(tree)
    disk = str(tmp_path / "unread.raw")
    mkfs(disk, tree, "64M", "-N", "20000", "-U", ROOT_UUID)
    if after_mkfs:
        after_mkfs(disk)
    start = time.monotonic()
    facts = image_facts(tmp_path, image=disk)
    assert time.monotonic() - start < 60
    assert ["%s: %s" % (u["path"], u["reason"]) for u in facts["image"]["unread"]] == unread, reasons(facts)
    reason = unread[0]
    verdict, report = offline_verdict(facts)
    assert verdict == "fail", report["findings"]
    unread = [f for f in report["findings"] if f["rule"] == "IMAGE_FILE_UNREAD"]
    assert [f["severity"] for f in unread] == ["high"] and reason.split(": ", 1)[1] in unread[0]["message"]
    passed = [p["rule"] for p in report["passed"]]
    if "fstab" in reason:
        assert facts["image"]["fstab_unresolved"] is None
        assert "IMAGE_FSTAB_UNRESOLVED" not in passed
        assert ["IMAGE_FSTAB_UNRESOLVED"] == [u["rule"] for u in report["undetermined"]
                                              if u["missing"] == ["host.fstab_unresolved_count"]]
    if any("os-release" in entry for entry in unread):  # whose kernel it is cannot be told: the kernel rules by version are undetermined
        assert facts["kernel"]["vendor"] is None and facts["kernel"]["backports"] is True
        assert [u for u in report["undetermined"] if u["rule"].startswith("KERNEL_")], report["undetermined"]
    assert_documented(facts)


def rewrite_gpt(path, edit):
    """Rewrite the primary GPT of a disk image (512-byte sectors) that sfdisk wrote: edit(entries) gets
    its entries as bytearrays and returns the new ones; the CRC32s are made right again."""
    with open(path, "r+b") as handle:
        handle.seek(512)
        header = bytearray(handle.read(92))
        entries_lba, count, size = struct.unpack_from("<QII", header, 72)
        handle.seek(entries_lba * 512)
        table = handle.read(count * size)
        table = b"".join(edit([bytearray(table[i * size:(i + 1) * size]) for i in range(count)]))
        assert len(table) == count * size
        struct.pack_into("<I", header, 88, binascii.crc32(table) & 0xFFFFFFFF)
        struct.pack_into("<I", header, 16, 0)
        struct.pack_into("<I", header, 16, binascii.crc32(bytes(header)) & 0xFFFFFFFF)
        handle.seek(entries_lba * 512)
        handle.write(table)
        handle.seek(512)
        handle.write(header)


def root_and_data(tmp_path, data_in_fstab=True):
    """A root filesystem (24 MiB) whose fstab mounts / and (data_in_fstab) /data by UUID, and the /data
    one (16 MiB)."""
    tree = readable_root(tmp_path, fstab="UUID=%s / ext4 defaults 0 1\n" % ROOT_UUID
                         + ("UUID=%s /data ext4 defaults 0 2\n" % DATA_UUID if data_in_fstab else ""))
    os.makedirs(os.path.join(tree, "data"))
    data_tree = str(tmp_path / "data-tree")
    os.makedirs(data_tree)
    mkfs(str(tmp_path / "root.fs"), tree, "24M", "-U", ROOT_UUID)
    mkfs(str(tmp_path / "data.fs"), data_tree, "16M", "-U", DATA_UUID)
    return str(tmp_path / "root.fs"), str(tmp_path / "data.fs")


def mbr_four_identical(tmp_path):
    root, _ = root_and_data(tmp_path, data_in_fstab=False)
    disk = str(tmp_path / "disk.raw")
    partitioned(disk, "dos", ["start=2048, size=24MiB, type=83"], [(root, 24 * MIB)])
    with open(disk, "r+b") as handle:
        handle.seek(446)
        entry = handle.read(16)
        handle.write(entry * 3)  # entries 2-4 repeat entry 1
    return disk


def gpt_4096_identical(tmp_path):
    root, _ = root_and_data(tmp_path, data_in_fstab=False)
    disk = str(tmp_path / "disk.raw")
    run(["truncate", "-s", "%d" % (32 * MIB), disk])
    subprocess.run(["sfdisk", "-q", disk], check=True, input=b"label: gpt\ntable-length: 4096\n"
                   b"start=2048, size=24MiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4\n")
    run(["dd", "if=" + root, "of=" + disk, "bs=512", "seek=2048", "conv=notrunc,sparse", "status=none"])
    rewrite_gpt(disk, lambda entries: [entries[0]] * len(entries))
    return disk


def gpt_second_inside_first(tmp_path):
    """Partition 1 (root, at 1 MiB) is stretched over partition 2 (/data, at 26 MiB) after sfdisk wrote them."""
    root, data = root_and_data(tmp_path)
    disk = str(tmp_path / "disk.raw")
    partitioned(disk, "gpt", ["start=2048, size=24MiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4",
                              "start=53248, size=16MiB, type=0FC63DAF-8483-4772-8E79-3D69D8477DE4"],
                [(root, 24 * MIB), (data, 26 * MIB)])

    def stretch(entries):
        struct.pack_into("<Q", entries[0], 40, 53248 + 32768 - 1)  # last LBA: the end of partition 2
        return entries
    rewrite_gpt(disk, stretch)
    return disk


@pytest.mark.parametrize("make, message", [
    (mbr_four_identical, "partitions 1 (bytes 1048576-26214400) and 2 (bytes 1048576-26214400) overlap"),
    (gpt_4096_identical, "partitions 1 (bytes 1048576-26214400) and 2 (bytes 1048576-26214400) overlap"),
    (gpt_second_inside_first, "partitions 1 (bytes 1048576-44040192) and 2 (bytes 27262976-44040192) overlap"),
])
def test_overlapping_partitions_are_an_image_error(tmp_path, make, message):
    """Each passed: every copy of the partition was read (4,096 times in 36 s for the GPT), or /data was
    read inside root's partition. Now the table is an image error, found before anything else is read;
    no root filesystem, so the offline host is failed and the verdict incomplete."""
    disk = make(tmp_path)
    start = time.monotonic()
    facts = image_facts(tmp_path, image=disk)
    assert time.monotonic() - start < 15
    assert facts["errors"] == [{"where": "image", "reason": message + ": a corrupt or forged partition table"}]
    assert facts["image"]["root"] is None and facts["filesystems"] == []
    verdict, report = offline_verdict(facts)
    assert verdict == "incomplete" and report["status"] == "failed"


def test_offline_precheck_of_an_image_whose_fstab_loops(tmp_path):
    """The playbook end to end: /etc/fstab a symlink to itself exited 0 with IMAGE_FSTAB_UNRESOLVED
    passed; now the rule is undetermined, IMAGE_FILE_UNREAD fails the image and the exit code is not 0."""
    tree = readable_root(tmp_path)
    link("fstab")(tree)
    disk = str(tmp_path / "loop.raw")
    mkfs(disk, tree, "32M", "-U", ROOT_UUID)
    reports_dir = tmp_path / "reports"
    rc, out = ansible_playbook("playbooks/ami_precheck.yml", "-e", json.dumps({
        "image": disk, "ami_precheck_boot": False, "ext4_audit_reports_dir": str(reports_dir),
        "ami_precheck_name": "loop", "ami_precheck_work_parent": str(tmp_path)}))
    summary = load_json(str(reports_dir / "latest" / "summary.json"))
    report = load_host_report(str(reports_dir / "latest" / "hosts" / "loop-offline.json"))
    assert rc != 0 and summary["verdict"] == "fail", (rc, summary["verdict"], out[-3000:])
    assert "IMAGE_FSTAB_UNRESOLVED" not in [p["rule"] for p in report["passed"]]
    assert "IMAGE_FSTAB_UNRESOLVED" in [u["rule"] for u in report["undetermined"]]
    assert [f["rule"] for f in report["findings"] if f["severity"] == "high"] == ["IMAGE_FILE_UNREAD"]


# ------------------------------------------------------ time and space bounds (issue 27)
def slow_image(tmp_path):
    """300 /boot/vmlinuz-* symlinks, each into a chain of 39 more links (1,000 such took 134 s)."""
    tree = readable_root(tmp_path)
    boot = os.path.join(tree, "boot")
    for hop in range(39):
        os.symlink("chain-%d" % (hop + 1) if hop < 38 else "vmlinuz-" + KNEW[0], os.path.join(boot, "chain-%d" % hop))
    for number in range(300):
        os.symlink("chain-0", os.path.join(boot, "vmlinuz-5.%d.0" % number))
    disk = str(tmp_path / "slow.raw")
    mkfs(disk, tree, "32M", "-U", ROOT_UUID)
    return disk


def test_a_slow_image_stops_at_the_budget_as_incomplete(tmp_path):
    """With a budget of 1 s the check of a slow image stops there, names the steps not done, and the
    image is not judged. (The image's kernels take about 1.9 s on an idle 2-CPU machine: a budget of
    2 s was sometimes enough.)"""
    disk = slow_image(tmp_path)
    start = time.monotonic()
    facts = image_facts(tmp_path, image=disk, budget=1)
    assert time.monotonic() - start < 20  # ansible's own start-up included
    image = facts["image"]
    # Where the budget runs out depends on the machine's load: inside debugfs, or just before it.
    assert image["incomplete"] in ("the check's time budget of 1 s ran out (%s); not done: os-release and kernels, "
                                   "e2fsck -fn of the filesystems" % where
                                   for where in ("debugfs was killed at the end of the budget", "before debugfs")), \
        image["incomplete"]
    assert [step["step"] for step in image["steps"]][-1] == "os-release and kernels"
    assert sum(step["seconds"] for step in image["steps"]) < 3
    verdict, report = offline_verdict(facts)
    assert verdict == "incomplete" and report["status"] == "failed" and report["reason"] == image["incomplete"]


@pytest.fixture
def small_tmpfs(tmp_path):
    """A 64 MiB tmpfs: the work folder given to the check."""
    folder = tmp_path / "work"
    folder.mkdir()
    run(["mount", "-t", "tmpfs", "-o", "size=64m,mode=0700", "tmpfs", str(folder)])
    yield folder
    run(["umount", str(folder)])


def test_a_qcow2_larger_than_the_work_folder_is_refused_before_writing(tmp_path, small_tmpfs):
    """A compressed qcow2 of a few MiB whose virtual disk is 256 MiB of data: the free-space check
    used qemu-img's actual-size and went on to write the raw copy until the work folder was full
    (4,055 MiB to /var/tmp for a 5.9 MB image). Now its virtual size is checked, before writing."""
    tree = readable_root(tmp_path)
    with open(os.path.join(tree, "filler"), "wb") as handle:
        handle.write(b"compressible, not zero " * (200 * MIB // 23))
    raw = str(tmp_path / "big.raw")
    mkfs(raw, tree, "256M", "-U", ROOT_UUID)
    qcow2 = str(tmp_path / "big.qcow2")
    run(["qemu-img", "convert", "-c", "-f", "raw", "-O", "qcow2", raw, qcow2])
    assert os.path.getsize(qcow2) < 16 * MIB
    facts = image_facts(tmp_path, image=qcow2, tmp_dir=str(small_tmpfs))
    [error] = facts["errors"]
    assert error["where"] == "image" and error["reason"].startswith(str(small_tmpfs / "ext4-image-")), error
    # 64 MiB, less the block of the work folder's pid file (own_folders.claim) on some filesystems
    assert re.search(r" has 6[34] MiB free, the raw copy of this image needs up to its virtual size, "
                     r"256 MiB: refused before writing$", error["reason"]), error
    assert os.listdir(str(small_tmpfs)) == []
    assert offline_verdict(facts)[0] == "incomplete"
    # the same image with room for its raw copy is read
    roomy = image_facts(tmp_path / "roomy", image=qcow2, tmp_dir=str(tmp_path))
    assert roomy["image"]["root"] is not None and roomy["image"]["steps"][0]["step"] == "raw copy of the image"


def test_offline_precheck_stops_at_its_budget(tmp_path):
    """The playbook end to end with ami_precheck_budget_s=2: the offline host is failed with what was
    not done, and the verdict is incomplete (exit 2), in seconds."""
    disk = slow_image(tmp_path)
    reports_dir = tmp_path / "reports"
    rc, out = ansible_playbook("playbooks/ami_precheck.yml", "-e", json.dumps({
        "image": disk, "ami_precheck_boot": False, "ext4_audit_reports_dir": str(reports_dir),
        "ami_precheck_name": "slow", "ami_precheck_work_parent": str(tmp_path), "ami_precheck_budget_s": 2}))
    summary = load_json(str(reports_dir / "latest" / "summary.json"))
    assert rc != 0 and summary["verdict"] == "incomplete", (rc, summary["verdict"], out[-3000:])
    [host] = summary["hosts_not_audited"]
    assert host["host"] == "slow-offline" and host["status"] == "failed"
    assert host["reason"].startswith("the check's time budget of 2 s ran out") and \
        host["reason"].endswith("not done: os-release and kernels, e2fsck -fn of the filesystems"), host
