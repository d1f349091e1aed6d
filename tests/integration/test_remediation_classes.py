"""Every fix class of rules/remediation.yml checked on this kernel with real loop-mounted ext4:
live fixes remount and show in /proc/fs/ext4/DEV/options, next-mount fixes do not take effect on
remount but do at the next mount, offline commands work on the unmounted filesystem, and a
rebuild is one tune2fs cannot do."""

import os
import subprocess

import pytest

from conftest import needs_root, run
from ext4audit.rules import catalog
from ext4audit.steps import remediation

pytestmark = needs_root

# Per rule: the filesystem that raises the finding (mkfs and mount options, size), and for
# offline and rebuild fixes what the superblock shows once fixed (dumpe2fs -h line, text in it).
SETUPS = {
    "EXT4_AUTO_DA_ALLOC_RENAME": dict(),
    "EXT4_DIOREAD_NOLOCK_NODELALLOC": dict(mount="nodelalloc,dioread_nolock"),
    "KERNEL_DIOREAD_NOLOCK_SUBPAGE": dict(mount="dioread_nolock"),
    "EXT4_NOBARRIER": dict(mount="nobarrier"),
    "EXT4_DATA_WRITEBACK": dict(mount="data=writeback"),
    "EXT4_DATA_JOURNAL": dict(mount="data=journal"),
    # this kernel mounts journal_async_commit only outside data=ordered
    "EXT4_JOURNAL_ASYNC_COMMIT": dict(mount="data=writeback,journal_async_commit", keep="data=writeback"),
    "EXT4_NORECOVERY": dict(mount="noload"),
    "EXT4_DATA_ERR_IGNORE_DATABASE": dict(mount="data_err=ignore"),
    "EXT4_ERRORS_CONTINUE": dict(mount="errors=continue"),
    "EXT4_LONG_COMMIT": dict(mount="commit=120"),
    "EXT4_ONLINE_DISCARD": dict(mount="discard"),
    # mb_optimize_scan is on by default from 16 block groups (2 GiB at 4 KiB blocks)
    "KERNEL_MB_OPTIMIZE_SCAN_REGRESSION": dict(size="4G"),
    "KERNEL_STRIPE_ALLOC_SPIN": dict(mkfs=["-E", "stride=16,stripe_width=64"]),
    "EXT4_STRIPE_WITHOUT_RAID": dict(mount="stripe=64"),
    "EXT4_RESERVED_BLOCKS_LARGE": dict(mkfs=["-m", "10"], shows=("Reserved block count", "2621")),
    "EXT4_SMALL_JOURNAL": dict(size="2G", mkfs=["-J", "size=4"], shows=("Total journal size", "64M")),
    "EXT4_INODE_128": dict(mkfs=["-I", "128", "-O", "^flex_bg,^metadata_csum"], shows=("Inode size", "256")),
    "KERNEL_FAST_COMMIT_EARLY": dict(mkfs=["-O", "fast_commit"], shows=("Filesystem features", "!fast_commit")),
    "EXT4_NO_JOURNAL": dict(mkfs=["-O", "^has_journal"], shows=("Filesystem features", "has_journal")),
    "EXT4_NO_METADATA_CSUM": dict(mkfs=["-O", "^metadata_csum"], shows=("Filesystem features", "metadata_csum")),
    "EXT4_NO_64BIT": dict(mkfs=["-O", "^64bit"], shows=("Filesystem features", "64bit")),
    "EXT4_LEGACY_FEATURES": dict(mkfs=["-O", "^extent,^flex_bg,^huge_file,^dir_index,^metadata_csum,^64bit"],
                                 shows=("Filesystem features", "extent")),
    # rebuild: tune2fs refuses what only mkfs fixes
    "EXT4_INODES_NEARLY_EXHAUSTED": dict(mkfs=["-N", "64"], refuses=["tune2fs", "-N", "100000"]),
}
REBUILD_OF_INODE_128 = dict(mkfs=["-I", "128"], refuses=["tune2fs", "-I", "256"])


def effective(device):
    """The option tokens in effect: /proc/fs/ext4/DEV/options and the mount's super options."""
    name = os.path.basename(os.path.realpath(device))
    with open("/proc/fs/ext4/%s/options" % name) as handle:
        tokens = set(handle.read().split())
    with open("/proc/self/mounts") as handle:
        for line in handle:
            fields = line.split()
            if fields[0] == device:
                tokens |= set(fields[3].split(","))
    return tokens


def shows(effect, tokens):
    return all(t in tokens for t in effect.get("present", [])) and not any(t in tokens for t in effect.get("absent", []))


def superblock_line(image, label):
    out = run(["dumpe2fs", "-h", image], env=dict(os.environ, LC_ALL="C"))
    return [line for line in out.splitlines() if line.lower().startswith(label.lower())][0]


def fresh(loopfs, name, setup, mount=True):
    image = os.path.join(loopfs.base, name + ".img")
    run(["truncate", "-s", setup.get("size", "1G"), image])
    run(["mkfs.ext4", "-F", "-q"] + setup.get("mkfs", []) + [image])
    loop = run(["losetup", "--find", "--show", image]).strip()
    loopfs.loops.append(loop)
    target = os.path.join(loopfs.base, "mnt", name)
    os.makedirs(target, exist_ok=True)
    if mount:
        run(["mount", "-t", "ext4"] + (["-o", setup["mount"]] if setup.get("mount") else []) + [loop, target])
        loopfs.mounts.append(target)
    return image, loop, target


def fixes():
    data = remediation.load(known_rules=list(catalog.load().by_id))
    for rule_id, fix in sorted(data["fixes"].items()):
        for choice in fix["choices"]:
            yield pytest.param(rule_id, choice, id="%s-%s" % (rule_id, choice["name"]))


def test_every_catalog_rule_is_classed_or_named_not_covered():
    data = remediation.load(known_rules=list(catalog.load().by_id))
    assert set(catalog.load().by_id) == set(data["fixes"]) | set(data["not_covered"])
    assert set(data["fixes"]) == set(SETUPS)


@pytest.mark.parametrize("rule_id,choice", list(fixes()))
def test_fix_class_holds_on_this_kernel(loopfs, rule_id, choice):
    setup = REBUILD_OF_INODE_128 if choice["name"] == "mkfs_inode_size" else SETUPS[rule_id]
    kind = choice["class"]
    image, loop, target = fresh(loopfs, "fs", setup, mount=kind in ("live", "next_mount"))
    fstab = choice.get("fstab")
    if kind == "live":
        if fstab:
            assert not shows(choice["effective"], effective(loop)), "the finding's state is not set up"
            run(["mount", "-o", ",".join(["remount"] + fstab["add"]), target])
            assert shows(choice["effective"], effective(loop)), effective(loop)
        for command in choice.get("commands", []):
            run([arg.replace("{device}", loop) for arg in command])  # on the mounted filesystem
        if "shows" in setup:
            label, text = setup["shows"]
            assert text in superblock_line(loop, label)
    elif kind == "next_mount":
        assert not shows(choice["effective"], effective(loop))
        remount = subprocess.run(["mount", "-o", ",".join(["remount"] + (fstab["add"] or ["rw"])), target],
                                 stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        # refused, or accepted without effect: either way not fixed before the next mount
        assert remount.returncode != 0 or not shows(choice["effective"], effective(loop))
        run(["umount", target])
        loopfs.mounts.remove(target)
        options = [o for o in (setup.get("keep") or "").split(",") if o] + fstab["add"]
        run(["mount", "-t", "ext4"] + (["-o", ",".join(options)] if options else []) + [loop, target])
        loopfs.mounts.append(target)
        assert shows(choice["effective"], effective(loop)), effective(loop)
    elif kind == "offline":
        journal_mib = remediation.journal_mib({"block_count": int(superblock_line(image, "Block count").split()[-1]),
                                               "block_size": int(superblock_line(image, "Block size").split()[-1])})
        for command in choice["commands"]:
            argv = [a.replace("{device}", loop).replace("{journal_mib}", str(journal_mib)) for a in command]
            result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
            # e2fsck: 1 = errors corrected (e.g. -D optimised directories)
            assert result.returncode in ((0, 1) if argv[0] == "e2fsck" else (0,)), (argv, result.stdout)
        label, text = setup["shows"]
        line = superblock_line(image, label)
        assert (text[1:] not in line.split()) if text.startswith("!") else (text in line), line
        run(["e2fsck", "-fn", image])
        run(["mount", "-t", "ext4", loop, target])  # and it mounts
        loopfs.mounts.append(target)
    else:
        refused = subprocess.run(setup["refuses"] + [loop], stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        assert refused.returncode != 0, refused.stdout
        assert choice.get("plan")
