"""ext4_fstab_edit on real fstab files (comments, odd spacing, UUID=/LABEL= sources, a \\040 mount
point) and real loop-mounted ext4: --check --diff shows exactly the line and changes nothing, a run
changes only that line with a backup and the original's owner and mode, a second run changes
nothing, and a remount the kernel refuses is pending, never fixed. ext4_tune refuses a mounted device."""

import json
import os
import re
import subprocess

import pytest

from conftest import ROOT, VENV_BIN, needs_root, run

pytestmark = needs_root


def module(name, args, *flags):
    """(rc, result, output) of one real ad-hoc module run on localhost."""
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               ANSIBLE_CALLBACK_RESULT_FORMAT="json")
    result = subprocess.run([os.path.join(VENV_BIN, "ansible"), "localhost", "-m", name, "-a", json.dumps(args)]
                            + list(flags), cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = result.stdout.decode(errors="replace")
    found = re.search(r"^localhost \| \w+.*?=> (\{.*\})\s*\Z", out, re.M | re.S)
    return result.returncode, json.loads(found.group(1)) if found else None, out


@pytest.fixture
def mounted(loopfs, tmp_path):
    spaced = loopfs.make("spaced", mountpoint=os.path.join(loopfs.base, "mnt", "my data"))
    writeback = loopfs.make("wb", mount_options="data=writeback")
    uuid = run(["blkid", "-o", "value", "-s", "UUID", spaced["device"]]).strip()
    fstab = tmp_path / "fstab"
    text = ("# /etc/fstab: static file system information.\n"
            "#\n# <file system> <mount point>   <type>  <options>       <dump>  <pass>\n"
            "UUID=%s  %s\text4   errors=continue,noatime   0  2\n"
            "\n"
            "LABEL=scratch   /scratch ext4 defaults 0 0   # a trailing comment\n"
            "%s %s ext4 data=writeback,nodev 0 2\n") % (
        uuid, spaced["mountpoint"].replace(" ", "\\040"), writeback["device"], writeback["mountpoint"])
    fstab.write_text(text)
    os.chown(str(fstab), 1234, 5678)
    os.chmod(str(fstab), 0o640)
    return dict(spaced=spaced, writeback=writeback, fstab=str(fstab), text=text)


def errors_fix(fstab, mountpoint):
    return dict(path=fstab, mountpoint=mountpoint, add=["errors=remount-ro"], drop=["errors"], remount=True,
                present=["errors=remount-ro"])


def test_check_diff_apply_and_idempotence(mounted):
    fstab, text = mounted["fstab"], mounted["text"]
    args = errors_fix(fstab, mounted["spaced"]["mountpoint"])
    old_line = [line for line in text.splitlines() if "errors=continue" in line][0]
    new_line = old_line.replace("errors=continue,noatime", "noatime,errors=remount-ro")

    rc, result, out = module("ext4_fstab_edit", args, "--check", "--diff")
    assert rc == 0 and result["changed"], out
    assert "-%s" % old_line in out and "+%s" % new_line in out
    assert len(re.findall(r"^[-+](?![-+])", out, re.M)) == 2, out  # exactly the one line, old and new
    assert result["remount"] == "would remount"
    assert open(fstab).read() == text
    assert os.listdir(os.path.dirname(fstab)) == ["fstab"]

    rc, result, out = module("ext4_fstab_edit", args)
    assert rc == 0 and result["changed"] and result["remount"] == "applied" and result["pending"] is None, out
    assert result["effective"] is True
    assert open(fstab).read() == text.replace(old_line, new_line)
    assert open(result["backup_file"]).read() == text
    st = os.stat(fstab)
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1234, 5678, 0o640)
    options = open("/proc/fs/ext4/%s/options" % os.path.basename(mounted["spaced"]["device"])).read().split()
    assert "errors=remount-ro" in options

    rc, result, out = module("ext4_fstab_edit", args)
    assert rc == 0 and not result["changed"] and result["remount"] == "not needed", out
    assert len(os.listdir(os.path.dirname(fstab))) == 2  # the file and one backup: no temporary left


def test_refused_remount_is_pending_not_fixed(mounted):
    fstab, text = mounted["fstab"], mounted["text"]
    args = dict(path=fstab, mountpoint=mounted["writeback"]["mountpoint"], add=["data=ordered"], drop=["data"],
                remount=True, present=["data=ordered"])
    rc, result, out = module("ext4_fstab_edit", args)
    assert rc == 0 and result["changed"], out
    assert result["remount"] == "refused" and result["effective"] is False
    assert "next mount" in result["pending"]
    assert "ext4 nodev,data=ordered 0 2" in open(fstab).read()
    rc, result, out = module("ext4_fstab_edit", args)
    assert rc == 0 and not result["changed"] and "next mount" in result["pending"], out


def test_label_source_and_unmounted_entry(mounted):
    args = dict(path=mounted["fstab"], mountpoint="/scratch", add=["noauto_da_alloc"], drop=["auto_da_alloc"],
                remount=True, present=["noauto_da_alloc"])
    rc, result, out = module("ext4_fstab_edit", args)
    assert rc == 0 and result["changed"] and result["remount"] == "not mounted", out
    assert "LABEL=scratch   /scratch ext4 defaults,noauto_da_alloc 0 0   # a trailing comment\n" in open(mounted["fstab"]).read()


def test_no_entry_names_the_file(mounted):
    rc, result, out = module("ext4_fstab_edit", dict(path=mounted["fstab"], mountpoint="/nowhere", add=["barrier"]))
    assert rc != 0 and mounted["fstab"] in result["msg"] and "/nowhere" in result["msg"]


def test_tune_refuses_a_mounted_device_and_runs_on_an_unmounted_one(mounted, loopfs):
    device = mounted["writeback"]["device"]
    commands = [["tune2fs", "-m", "2", device]]
    rc, result, out = module("ext4_tune", dict(device=device, commands=commands))
    assert rc != 0 and "is mounted" in result["msg"], out
    rc, result, out = module("ext4_tune", dict(device=device, commands=commands, unmounted=False), "--check")
    assert rc == 0 and result["commands"][0]["rc"] is None, out
    run(["umount", mounted["writeback"]["mountpoint"]])
    loopfs.mounts.remove(mounted["writeback"]["mountpoint"])
    rc, result, out = module("ext4_tune", dict(device=device, commands=commands))
    assert rc == 0 and result["changed"] and result["commands"][0]["rc"] == 0, out
    assert "5242" in run(["dumpe2fs", "-h", device], env=dict(os.environ, LC_ALL="C")).split("Reserved block count:")[1].split("\n")[0]
