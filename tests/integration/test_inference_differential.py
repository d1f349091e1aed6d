"""Offline option inference against the real kernel.

For a matrix of mkfs, tune2fs and mount option combinations, real loop filesystems are mounted and
infer_options() (the image check's and old kernels' way to know the effective options) is given what
an offline reader has: the superblock (`dumpe2fs -h`), the mount's option tokens and this machine's
kernel version. Its answer is compared with what the running kernel says it applied
(/proc/fs/ext4/<dev>/options). The mount tokens come in both forms the inference meets: the super
options of /proc/self/mountinfo (what ext4_facts reads on a live host) and the `-o` string as written
(what an fstab in an image says: commit=0, auto_da_alloc=0, barrier=0, dioread_lock as typed).

Every option a rule reads must agree; every other option the kernel prints differently is listed in
NOT_INFERRED with the reason. One image per mkfs variant, remounted for each mount option string,
keeps the matrix at a few seconds. Run under the heavy lock (loop devices and mounts are shared)."""

import os
import subprocess
import time

import pytest

from ext4audit.parsers import kernel_version
from ext4audit.parsers.ext4_parsers.common import split_options
from ext4audit.parsers.ext4_parsers.fstab import fstab_mount_tokens
from ext4audit.parsers.ext4_parsers.kernel_defaults import infer_options
from ext4audit.parsers.ext4_parsers.mounts import option_map, parse_ext4_options, parse_mountinfo
from ext4audit.parsers.ext4_parsers.superblock import parse_dumpe2fs
from conftest import needs_root, rule_read_options, run

pytestmark = needs_root

# name -> (mkfs.ext4 arguments, commands that change the made image (the image path is appended),
# mount type, [mount option strings]).
# Every string mounts on this machine's kernel; combinations the kernel refuses
# (journal_async_commit with data=ordered, data= or commit= without a journal) are left out.
MATRIX = {
    "default": ([], [], "ext4", [
        "", "defaults", "nodelalloc", "delalloc", "data=journal", "data=writeback", "data=ordered",
        "ro,noload", "ro,norecovery", "commit=0", "commit=60", "auto_da_alloc=0", "auto_da_alloc=1",
        "noauto_da_alloc", "dioread_nolock", "nodioread_nolock", "dioread_lock", "nodelalloc,dioread_nolock",
        "nodelalloc,dioread_lock", "barrier=0", "barrier=1", "nobarrier", "discard", "nodiscard",
        "journal_checksum", "nojournal_checksum", "data=writeback,journal_async_commit",
        "data=journal,journal_async_commit", "errors=remount-ro", "errors=panic", "stripe=16",
        "mb_optimize_scan=1", "mb_optimize_scan=0", "ro", "noatime,nodiratime",
        "data=journal,nodelalloc", "data=journal,commit=0"]),
    "nojournal": (["-O", "^has_journal"], [], "ext4", [
        "", "nodelalloc", "dioread_lock", "nobarrier", "discard", "ro", "noload"]),
    "sb-journal-data": ([], [["tune2fs", "-o", "journal_data"]], "ext4", ["", "data=ordered", "data=writeback"]),
    "sb-nobarrier-nouserxattr": ([], [["tune2fs", "-o", "nobarrier,^user_xattr"]], "ext4", ["", "barrier"]),
    "sb-nodelalloc": ([], [["tune2fs", "-o", "nodelalloc"]], "ext4", ["", "delalloc", "dioread_lock"]),
    "sb-discard-writeback": ([], [["tune2fs", "-o", "discard,journal_data_writeback"]], "ext4", ["", "nodiscard"]),
    "sb-mount-opts": ([], [["tune2fs", "-E", "mount_opts=nodelalloc"]], "ext4", ["", "delalloc"]),
    # tune2fs -E splits at commas: several mount_opts are written with debugfs
    "sb-mount-opts-several": ([], [["debugfs", "-w", "-R", "ssv mount_opts nodelalloc,commit=30,noauto_da_alloc"]],
                              "ext4", ["", "delalloc", "commit=7"]),
    "sb-errors-panic": ([], [["tune2fs", "-e", "panic"]], "ext4", ["", "errors=continue"]),
    "block-1k": (["-b", "1024"], [], "ext4", ["", "nodelalloc", "dioread_lock"]),
    "fast-commit": (["-O", "fast_commit"], [], "ext4", ["", "data=journal", "nodelalloc"]),
    "raid-stride": (["-E", "stride=16,stripe_width=64"], [], "ext4", ["", "stripe=32"]),
    "no-metadata-csum": (["-O", "^metadata_csum"], [], "ext4", ["", "journal_checksum"]),
    "ext3": (["-t", "ext3"], [], "ext3", ["", "data=writeback"]),
}

# Options the kernel prints that the inference leaves out (names as option_map() gives them); no rule
# reads any of them. Each differs in every case of the matrix on 6.18, so none counts as matched on
# all options.
NOT_INFERRED = {
    "bsddf": "the statfs mode, printed by every kernel (minixdf is the other)",
    "block_validity": "on by default in ext4_set_def_opts; the release that made it so is not pinned here",
    "user_xattr": "set on every mount by the kernel; inferred only where the superblock's default mount "
                  "options name it (mke2fs writes user_xattr acl there; tune2fs -o ^user_xattr removes it)",
    "noquota": "quota options are not inferred (printed as noquota when none is on)",
    "resuid": "the reserved-blocks owner, from a superblock field parse_dumpe2fs does not read",
    "resgid": "the reserved-blocks group, from a superblock field parse_dumpe2fs does not read",
    "min_batch_time": "jbd2 batching default (0 us)",
    "max_batch_time": "jbd2 batching default (15000 us)",
    "inode_readahead_blks": "inode table readahead default (32)",
    "init_itable": "lazy inode table initialisation delay default (10)",
    "max_dir_size_kb": "directory size limit default (0, none)",
    "i_version": "printed by recent kernels, where the VFS sets SB_I_VERSION; the release is not pinned here",
    "prefetch_block_bitmaps": "printed by recent kernels (on by default); the release is not pinned here",
    "fc_debug_force": "6.18 prints the fast_commit feature under this debug option's name",
}


def this_kernel():
    with open("/proc/version") as handle:
        info = kernel_version.identify(os.uname().release, handle.read())
    return info["upstream"]


class Mounter:
    """One image per mkfs variant on tmpfs, on a loop device this test attached, mounted and unmounted
    at a folder of its own for each option string."""

    def __init__(self, base):
        self.base, self.loops, self.mounted = base, [], None

    def image(self, name, mkfs_args, commands):
        image = os.path.join(self.base, name + ".img")
        run(["truncate", "-s", "128M", image])
        run(["mkfs.ext4", "-F", "-q"] + mkfs_args + [image])
        for command in commands:
            run(command + [image])
        loop = run(["losetup", "--find", "--show", image]).strip()
        self.loops.append(loop)
        return loop

    def mount(self, loop, fstype, options):
        target = os.path.join(self.base, "mnt")
        os.makedirs(target, exist_ok=True)
        run(["mount", "-t", fstype] + (["-o", options] if options else []) + [loop, target])
        self.mounted = target
        return target

    def umount(self):
        if self.mounted:
            run(["umount", self.mounted])
            self.mounted = None

    def cleanup(self):
        if self.mounted:
            subprocess.run(["umount", self.mounted], check=False)
        for loop in self.loops:
            subprocess.run(["losetup", "-d", loop], check=False)


@pytest.fixture
def mounter(tmp_path):
    base = os.path.join("/dev/shm", "ext4audit-inference-%d" % os.getpid())
    os.makedirs(base)
    m = Mounter(base)
    try:
        yield m
    finally:
        m.cleanup()
        subprocess.run(["rm", "-rf", "--one-file-system", base], check=False)


def super_options_of(mountpoint):
    with open("/proc/self/mountinfo") as handle:
        mounts = [m for m in parse_mountinfo(handle.read()) if m["mountpoint"] == mountpoint]
    assert len(mounts) == 1, mounts
    return mounts[0]["super_options"]


def differences(inferred, kernel):
    """{option: (inferred, kernel)} for every option whose normalised value differs. Both lists name every
    option in effect, so an option one side does not list is off there (as the engine reads them)."""
    a, b = option_map(inferred), option_map(kernel)
    return dict((name, (a.get(name, False), b.get(name, False))) for name in set(a) | set(b)
                if a.get(name, False) != b.get(name, False))


def test_inference_matches_the_kernel_on_every_option_a_rule_reads(mounter):
    started = time.monotonic()
    rule_options = rule_read_options()
    assert {"data", "delalloc", "dioread_nolock", "commit", "auto_da_alloc", "barrier", "discard",
            "journal_async_commit", "errors", "mb_optimize_scan", "stripe"} <= rule_options
    kernel = this_kernel()
    page_size = os.sysconf("SC_PAGE_SIZE")
    rule_failures, other_failures, cases = [], [], 0
    rule_matches = all_matches = 0
    for name, (mkfs_args, commands, fstype, option_strings) in sorted(MATRIX.items()):
        loop = mounter.image(name, mkfs_args, commands)
        superblock = parse_dumpe2fs(run(["dumpe2fs", "-h", loop], env=dict(os.environ, LC_ALL="C")))
        for options in option_strings:
            mountpoint = mounter.mount(loop, fstype, options)
            with open("/proc/fs/ext4/%s/options" % os.path.basename(loop)) as handle:
                truth = parse_ext4_options(handle.read())
            inputs = {"mountinfo": super_options_of(mountpoint),
                      "as written": fstab_mount_tokens(split_options(options) or ["defaults"])}
            mounter.umount()
            for source, tokens in sorted(inputs.items()):
                cases += 1
                inferred = infer_options(superblock, tokens, kernel, fstype=fstype, page_size=page_size)
                diff = differences(inferred, truth)
                where = "%s -o %r (%s: %s)" % (name, options, source, ",".join(tokens))
                rule_diff = dict((k, v) for k, v in diff.items() if k in rule_options)
                other = dict((k, v) for k, v in diff.items() if k not in rule_options and k not in NOT_INFERRED)
                rule_matches += not rule_diff
                all_matches += not diff
                if rule_diff:
                    rule_failures.append("%s: %s" % (where, rule_diff))
                if other:
                    other_failures.append("%s: %s" % (where, other))
    elapsed = time.monotonic() - started
    print("\ninference vs kernel %s: %d cases, %d match on the options rules read, %d on all options, %.1f s"
          % (kernel, cases, rule_matches, all_matches, elapsed))
    assert not rule_failures, "\n".join(rule_failures)
    assert not other_failures, "differences not listed in NOT_INFERRED:\n" + "\n".join(other_failures)
