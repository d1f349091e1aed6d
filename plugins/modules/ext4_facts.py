#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Ansible module: read-only inventory of a host's ext4 filesystems and kernel."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_facts
short_description: Read the effective ext4 mount options, superblock settings and kernel of a host
description:
  - Lists every mounted ext4 filesystem (and ext2/ext3 served by the ext4 driver) with the
    options really in effect, defaults included, read from C(/proc/fs/ext4/<dev>/options).
  - Adds the per-mount and super options of C(/proc/self/mountinfo), the C(/etc/fstab) entry
    and its drift from what is in effect, superblock facts from C(dumpe2fs -h), live journal
    statistics from C(/proc/fs/jbd2), and the backing device's queue facts.
  - Reads each filesystem's live block and inode use with C(statvfs) on its mount point.
  - Lists network filesystem mounts too, and the local filesystems of other types it does not audit.
  - Never changes anything. Anything it cannot read becomes an entry in C(errors) with the
    reason; the module itself only fails on a bug.
options:
  fstab_path:
    description: The fstab file to compare with what is in effect.
    type: path
    default: /etc/fstab
  superblock:
    description: Run C(dumpe2fs -h) for superblock facts (needs read access to the device, usually root).
    type: bool
    default: true
  dumpe2fs:
    description: Name or path of the dumpe2fs binary.
    type: str
    default: dumpe2fs
  netfs_types:
    description: Filesystem types reported as network filesystems.
    type: list
    elements: str
    default: [nfs, nfs4, cifs, smb3, smbfs, afs, 9p, ceph, glusterfs, lustre, gpfs, beegfs, fuse.sshfs,
              fuse.glusterfs, fuse.cephfs, fuse.s3fs, fuse.gcsfuse, fuse.rclone, davfs, fuse.davfs2]
notes:
  - Target side needs only Python >= 3.8 and e2fsprogs.
seealso:
  - name: ext4 admin guide
    description: The kernel's documentation of every ext4 mount option.
    link: https://www.kernel.org/doc/html/latest/admin-guide/ext4.html
extends_documentation_fragment:
  - ext4audit.fleet.common
"""

EXAMPLES = r"""
- name: Read ext4 facts
  ext4audit.fleet.ext4_facts:
  register: ext4

- name: Without dumpe2fs (no root)
  ext4audit.fleet.ext4_facts:
    superblock: false
"""

RETURN = r"""
ext4_facts:
  description: Everything read from the host.
  returned: always
  type: dict
  contains:
    schema:
      description: The record's format.
      returned: always
      type: str
      sample: ext4-fleet-audit/facts/v1
    kernel:
      description: The running kernel, and the upstream version it corresponds to.
      returned: always
      type: dict
      contains:
        release:
          description: C(uname -r).
          returned: always
          type: str
          sample: 6.1.0-50-cloud-amd64
        proc_version:
          description: C(/proc/version).
          returned: always
          type: str
        version_signature:
          description: C(/proc/version_signature) (Ubuntu), or null.
          returned: always
          type: str
        os_release:
          description: ID, ID_LIKE, VERSION_ID and PRETTY_NAME of C(/etc/os-release), those present.
          returned: always
          type: dict
        page_size:
          description: The page size in bytes.
          returned: always
          type: int
          sample: 4096
        vendor:
          description: Whose kernel it is (debian, ubuntu, rhel, mainline, ...).
          returned: always
          type: str
          sample: debian
        upstream:
          description: The upstream (kernel.org) version, or null when it cannot be told.
          returned: always
          type: str
          sample: 6.1.170
        vendor_version:
          description: The vendor's full version-release (compared rpm-style for backporting vendors), or null.
          returned: always
          type: str
        backports:
          description: Whether the vendor backports fixes (the upstream version alone does not decide).
          returned: always
          type: bool
        notes:
          description: Why a version could not be told, or how it was.
          returned: always
          type: list
          elements: str
    filesystems:
      description: One entry per mounted ext2/3/4 superblock (bind mounts listed under bind_mounts).
      returned: always
      type: list
      elements: dict
      contains:
        device:
          description: The mounted device.
          returned: always
          type: str
          sample: /dev/vda1
        kernel_name:
          description: The block device's kernel name (the C(/proc/fs/ext4/<name>) folder).
          returned: always
          type: str
          sample: vda1
        major:
          description: Device major number.
          returned: always
          type: int
        minor:
          description: Device minor number.
          returned: always
          type: int
        mountpoint:
          description: Where it is mounted (unescaped).
          returned: always
          type: str
          sample: /
        fstype:
          description: The filesystem type mounted (ext4, ext3, ext2).
          returned: always
          type: str
        bind_mounts:
          description: Other mount points of the same superblock.
          returned: always
          type: list
          elements: str
        mount_options:
          description: Per-mount options of C(/proc/self/mountinfo).
          returned: always
          type: list
          elements: str
        super_options:
          description: Super options of C(/proc/self/mountinfo).
          returned: always
          type: list
          elements: str
        options:
          description: The options in effect, defaults included.
          returned: always
          type: list
          elements: str
        options_source:
          description: Where RV(ext4_facts.filesystems[].options) came from (proc, or inferred when C(/proc/fs/ext4) is missing).
          returned: always
          type: str
          sample: proc
        options_kernel:
          description: Which kernel version's defaults the options were inferred for, and why that one.
          returned: when RV(ext4_facts.filesystems[].options_source) is inferred
          type: dict
          contains:
            upstream:
              description: The upstream kernel version whose defaults were used.
              type: str
              sample: 6.1.170
            why:
              description: Why that version (the running kernel's, or an assumed one).
              type: str
        device_bytes:
          description: The block device's size in bytes (C(/sys/dev/block/<major>:<minor>/size)), or null.
          returned: always
          type: int
        superblock:
          description: C(dumpe2fs -h) facts, or null (O(superblock=false), or not readable; see errors).
          returned: always
          type: dict
          contains:
            # superblock fields: written by tools/module_return.py from ext4_parsers.superblock.SUPERBLOCK_FIELDS
            block_count:
              description: Blocks.
              type: int
            block_size:
              description: Block size in bytes.
              type: int
            blocks_per_group:
              description: Blocks per group.
              type: int
            inode_count:
              description: Inodes.
              type: int
            free_inodes:
              description: >-
                Free inodes as the superblock last recorded them: exact in an image, which is not mounted; on a mounted
                filesystem written back at unmount, freeze or error (its usage has the live count).
              type: int
            free_blocks:
              description: Free blocks as the superblock last recorded them (like free_inodes).
              type: int
            reserved_block_count:
              description: Blocks reserved for root.
              type: int
            inode_size:
              description: Inode size in bytes.
              type: int
            features:
              description: Filesystem features.
              type: list
              elements: str
            default_mount_options:
              description: Default mount options stored in the superblock.
              type: list
              elements: str
            mount_options:
              description: Mount options stored in the superblock (tune2fs -E mount_opts).
              type: list
              elements: str
            errors_behavior:
              description: What the filesystem does on an error (continue, remount-ro, panic).
              type: str
            state:
              description: Filesystem state.
              type: str
            error_count:
              description: Filesystem errors the superblock records (0 when none).
              type: int
            journal_bytes:
              description: Journal size in bytes, or null without a journal.
              type: int
            journal_blocks:
              description: Journal size in blocks, or null.
              type: int
            journal_device:
              description: External journal device, or null.
              type: str
            journal_features:
              description: Journal features.
              type: list
              elements: str
            fast_commit_blocks:
              description: Fast-commit area in blocks, or null.
              type: int
            raid_stride:
              description: RAID stride (0 when not set).
              type: int
            raid_stripe_width:
              description: RAID stripe width (0 when not set).
              type: int
            e2fsprogs_fields:
              description: >-
                Which journal field names this e2fsprogs version printed (total or legacy; they changed across
                versions).
              type: str
            # end of the superblock fields
        usage:
          description: >-
            Live block and inode counts of C(statvfs) on the mount point (what C(df) and C(df -i) show), or null
            (not readable, see errors; a mount point below a network mount or covered by a later mount is not asked).
          returned: always
          type: dict
          contains:
            block_size:
              description: The unit of the block counts, in bytes (C(f_frsize)).
              type: int
              sample: 4096
            blocks:
              description: Blocks of the filesystem (C(f_blocks)).
              type: int
            blocks_free:
              description: Free blocks, the reserved ones included (C(f_bfree)).
              type: int
            blocks_avail:
              description: Blocks free for unprivileged users (C(f_bavail)); 0 means they get ENOSPC.
              type: int
            inodes:
              description: Inodes of the filesystem (C(f_files)).
              type: int
            inodes_free:
              description: Free inodes (C(f_ffree)).
              type: int
        jbd2:
          description: Live journal statistics of C(/proc/fs/jbd2/<dev>-8/info) (numbers, units in the key names), or null.
          returned: always
          type: dict
          contains:
            transactions:
              description: Transactions seen.
              type: int
            requested:
              description: Transactions requested, or null.
              type: int
            max_transaction_blocks:
              description: Largest transaction, in blocks.
              type: int
            waiting_for_transaction_ms:
              description: Average wait for a transaction, ms.
              type: int
            request_delay_ms:
              description: Average request delay, ms.
              type: int
            running_transaction_ms:
              description: Average time a transaction runs, ms.
              type: int
            transaction_was_being_locked_ms:
              description: Average time a transaction was being locked, ms.
              type: int
            flushing_data_in_ordered_mode_ms:
              description: Average time flushing data (data=ordered), ms.
              type: int
            logging_transaction_ms:
              description: Average time logging a transaction, ms.
              type: int
            average_transaction_commit_time_us:
              description: Average commit time, microseconds.
              type: int
            handles_per_transaction:
              description: Average handles per transaction.
              type: int
            blocks_per_transaction:
              description: Average blocks per transaction.
              type: int
            logged_blocks_per_transaction:
              description: Average logged blocks per transaction.
              type: int
        fstab:
          description: The fstab entry for this mount point, or null.
          returned: always
          type: dict
          contains:
            spec:
              description: The entry's device field.
              type: str
            fstype:
              description: The entry's type field.
              type: str
            options:
              description: The entry's options.
              type: list
              elements: str
            line:
              description: The entry's line number.
              type: int
        fstab_drift:
          description: What fstab asks for that is not in effect.
          returned: always
          type: list
          elements: dict
          contains:
            option:
              description: The option name.
              type: str
            wanted:
              description: What fstab asks for.
              type: str
            effective:
              description: What is in effect, or null when the option is not.
              type: str
        queue:
          description: The backing device's queue facts, or null (no queue folder).
          returned: always
          type: dict
          contains:
            device:
              description: The device whose queue this is (the whole disk for a partition).
              type: str
            rotational:
              description: 1 for a spinning disk.
              type: int
            write_cache:
              description: The write cache mode (write back, write through).
              type: str
            discard_max_bytes:
              description: Largest discard, in bytes (0 without discard).
              type: int
            optimal_io_size:
              description: The optimal I/O size in bytes (0 when the device gives none).
              type: int
            model:
              description: The disk's model (sysfs C(device/model)), or null.
              type: str
            kind:
              description: What the whole disk is (md-raid, device-mapper, loop, virtual, disk).
              type: str
              sample: virtual
    netfs:
      description: Network filesystem mounts.
      returned: always
      type: list
      elements: dict
      contains:
        mountpoint:
          description: Where it is mounted.
          type: str
        fstype:
          description: Its type (nfs4, cifs, fuse.sshfs, ...).
          type: str
        source:
          description: The mount source.
          type: str
        options:
          description: Per-mount and super options.
          type: list
          elements: str
    not_audited:
      description: >-
        Local filesystems of other types that the audit does not check (xfs, btrfs, vfat, an overlay or tmpfs
        root, ...): block-device-backed ones, btrfs, ZFS and bcachefs, and whatever is mounted at C(/); not
        pseudo filesystems (proc, sysfs, cgroup, tmpfs elsewhere) nor read-only images (squashfs, iso9660).
      returned: always
      type: list
      elements: dict
      contains:
        mountpoint:
          description: Where it is mounted (the first mount point of a filesystem mounted more than once).
          type: str
        fstype:
          description: Its type.
          type: str
          sample: xfs
        source:
          description: The mount source (a device, a ZFS dataset, C(overlay), ...).
          type: str
    errors:
      description: What could not be read, with the reason.
      returned: always
      type: list
      elements: dict
      contains:
        where:
          description: What was being read (e.g. C(filesystem /)).
          type: str
        reason:
          description: Why it failed.
          type: str
"""

import glob
import os
import stat

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers.common import (
    EXT4_DRIVER_TYPES, FACTS_SCHEMA, NETFS_TYPES, ParseError,
)
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers.fstab import fstab_drift, parse_fstab
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers.kernel_defaults import infer_options
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers.mounts import (
    not_audited, option_map, parse_ext4_options, parse_mountinfo,
)
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers.os_files import parse_os_release
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers.superblock import (
    parse_dumpe2fs, parse_jbd2_info, volume_kind,
)
from ansible_collections.ext4audit.fleet.plugins.module_utils.kernel_version import identify, options_kernel


SYSFS_READ_LIMIT = 4096  # a sysfs attribute is at most a page


def _covers(mountpoint: str, path: str) -> bool:
    """Is path at mountpoint or below it?"""
    return path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/")


def read_text(path, limit=-1):
    with open(path, "rb") as handle:
        return handle.read(limit).decode("utf-8", "backslashreplace")


class Collector:
    """Reads one host; every failure is recorded in self.errors instead of raised."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.errors = []

    def error(self, where, reason):
        self.errors.append({"where": where, "reason": reason})

    def read(self, path, where, limit=-1):
        try:
            return read_text(path, limit)
        except (IOError, OSError) as exc:
            self.error(where, "%s: %s" % (path, exc.strerror or exc))
            return None

    # ------------------------------------------------------------------ kernel
    def kernel(self):
        release = self.read("/proc/sys/kernel/osrelease", "kernel") or os.uname()[2]
        proc_version = self.read("/proc/version", "kernel") or ""
        signature = ""
        if os.path.exists("/proc/version_signature"):
            signature = self.read("/proc/version_signature", "kernel") or ""
        os_release = {}
        for path in ("/etc/os-release", "/usr/lib/os-release"):
            if os.path.exists(path):
                os_release = parse_os_release(self.read(path, "os-release") or "")
                break
        info = identify(release.strip(), proc_version.strip(), signature.strip(), os_release)
        info.update({
            "proc_version": proc_version.strip(),
            "version_signature": signature.strip() or None,
            "os_release": dict((k, os_release[k]) for k in ("ID", "ID_LIKE", "VERSION_ID", "PRETTY_NAME")
                               if k in os_release),
            "page_size": os.sysconf("SC_PAGE_SIZE"),
        })
        return info

    # ------------------------------------------------------------- filesystems
    def collect(self):
        self.kernel_facts = self.kernel()
        self.options_kernel = options_kernel(self.kernel_facts, "the running kernel")  # for inferred options
        text = self.read("/proc/self/mountinfo", "mountinfo")
        try:
            mounts = parse_mountinfo(text) if text is not None else []
        except ParseError as exc:
            self.error("mountinfo", str(exc))
            mounts = []
        fstab = self.fstab()
        filesystems, netfs, others, seen, seen_others = [], [], [], {}, set()
        for mount in mounts:
            if mount["fstype"] in self.params["netfs_types"]:
                netfs.append({"mountpoint": mount["mountpoint"], "fstype": mount["fstype"],
                              "source": mount["source"],
                              "options": mount["mount_options"] + mount["super_options"]})
            elif mount["fstype"] in EXT4_DRIVER_TYPES:
                key = (mount["major"], mount["minor"])
                if key in seen:  # same superblock mounted again (bind mount, namespace)
                    seen[key]["bind_mounts"].append(mount["mountpoint"])
                else:
                    seen[key] = self.filesystem(mount, fstab)
                    filesystems.append(seen[key])
            elif not_audited(mount, self.params["netfs_types"]):
                key = (mount["major"], mount["minor"], mount["fstype"])
                if key not in seen_others:  # a bind mount of one already listed is not listed again
                    seen_others.add(key)
                    others.append({"mountpoint": mount["mountpoint"], "fstype": mount["fstype"],
                                   "source": mount["source"]})
        for fs in filesystems:
            fs["usage"] = self.usage(fs, mounts)
        return {
            "schema": FACTS_SCHEMA,
            "kernel": self.kernel_facts,
            "filesystems": filesystems,
            "netfs": netfs,
            "not_audited": others,
            "errors": self.errors,
        }

    def usage(self, fs: dict, mounts: list) -> "dict | None":
        """Live block and inode counts of statvfs(2) (what df and df -i show; the superblock's
        free counts are written back only at unmount, freeze or error), or None (recorded).

        statvfs walks the mount point's path and asks whatever filesystem is mounted there: only
        a path of this filesystem that no later mount covers, and none below a network mount
        (a hung server would block the walk), is asked; and the path's device is checked first."""
        where = "filesystem %s" % fs["mountpoint"]
        device = os.makedev(fs["major"], fs["minor"])
        reasons = []
        for path in [fs["mountpoint"]] + fs["bind_mounts"]:
            mine = [i for i, m in enumerate(mounts) if m["mountpoint"] == path and (m["major"], m["minor"]) == (
                fs["major"], fs["minor"])]
            above = [m for m in mounts[mine[-1] + 1:] if _covers(m["mountpoint"], path)]
            network = [m for m in mounts if m["fstype"] in self.params["netfs_types"] and _covers(m["mountpoint"], path)
                       and m["mountpoint"] != path]
            if above or network:
                covering = (network or above)[0]["mountpoint"]
                reasons.append("%s is below %s mount %s" % (path, "a network" if network else "a later", covering))
                continue
            try:
                if os.stat(path).st_dev != device:
                    reasons.append("%s is not on this filesystem's device" % path)
                    continue
                st = os.statvfs(path)
            except OSError as exc:
                reasons.append("statvfs %s: %s" % (path, exc.strerror or exc))
                continue
            return {"block_size": st.f_frsize, "blocks": st.f_blocks, "blocks_free": st.f_bfree,
                    "blocks_avail": st.f_bavail, "inodes": st.f_files, "inodes_free": st.f_ffree}
        self.error(where, "no live use read: " + "; ".join(reasons))
        return None

    def fstab(self):
        path = self.params["fstab_path"]
        text = self.read(path, "fstab")
        if text is None:
            return {}
        entries, problems = parse_fstab(text)
        for problem in problems:
            self.error("fstab", "%s: %s" % (path, problem))
        return dict((entry["mountpoint"], entry) for entry in entries)

    def filesystem(self, mount, fstab):
        where = "filesystem %s" % mount["mountpoint"]
        sysdev = "/sys/dev/block/%d:%d" % (mount["major"], mount["minor"])
        kname = os.path.basename(os.path.realpath(sysdev)) if os.path.exists(sysdev) else None
        fs = {
            "device": mount["source"],
            "kernel_name": kname,
            "major": mount["major"],
            "minor": mount["minor"],
            "mountpoint": mount["mountpoint"],
            "fstype": mount["fstype"],
            "bind_mounts": [],
            "mount_options": mount["mount_options"],
            "super_options": mount["super_options"],
            "superblock": None,
            "jbd2": None,
            "queue": self.queue(sysdev, where),
            "device_bytes": self.sysfs_value(os.path.join(sysdev, "size"), int, where),
        }
        if fs["device_bytes"] is not None:
            fs["device_bytes"] *= 512  # /sys/.../size counts 512-byte sectors whatever the block size
        if self.params["superblock"]:
            fs["superblock"] = self.superblock(mount, kname, where)
        fs["options"], fs["options_source"] = self.effective_options(mount, kname, fs["superblock"], where)
        if fs["options_source"] == "inferred":
            fs["options_kernel"] = self.options_kernel
        fs["jbd2"] = self.jbd2(kname, where)
        entry = fstab.get(mount["mountpoint"])
        fs["fstab"] = None
        fs["fstab_drift"] = []
        if entry:
            fs["fstab"] = {"spec": entry["spec"], "fstype": entry["fstype"],
                           "options": entry["options"], "line": entry["line"]}
            flags = set(mount["mount_options"]) | set(mount["super_options"])
            fs["fstab_drift"] = fstab_drift(entry["options"], option_map(fs["options"]), flags)
        return fs

    def effective_options(self, mount, kname, superblock, where):
        path = "/proc/fs/ext4/%s/options" % kname
        if kname and os.path.exists(path):
            text = self.read(path, where)
            if text is not None:
                try:
                    return parse_ext4_options(text), "proc"
                except ParseError as exc:
                    self.error(where, str(exc))
        # Old kernels (or ext2 served by ext2.ko): rebuild from the running kernel's defaults, the
        # superblock and mountinfo.
        return infer_options(superblock, mount["super_options"], self.options_kernel["upstream"], mount["fstype"],
                             self.kernel_facts["page_size"]), "inferred"

    def superblock(self, mount, kname, where):
        device = self.device_node(mount, kname)
        if device is None:
            self.error(where, "no block device node for %d:%d to read the superblock from"
                       % (mount["major"], mount["minor"]))
            return None
        binary = self.params["dumpe2fs"]
        if "/" not in binary:
            binary = self.module.get_bin_path(binary)
        if not binary or not os.access(binary, os.X_OK):
            self.error(where, "dumpe2fs not found (%s); install e2fsprogs" % self.params["dumpe2fs"])
            return None
        rc, out, err = self.module.run_command([binary, "-h", device],
                                               environ_update={"LC_ALL": "C", "LANG": "C"})
        if rc != 0:
            reason = " ".join(line for line in err.splitlines() if not line.startswith("dumpe2fs 1."))
            self.error(where, "dumpe2fs -h %s failed (rc=%d): %s" % (device, rc, reason.strip()[:300]))
            return None
        try:
            return parse_dumpe2fs(out)
        except ParseError as exc:
            self.error(where, "dumpe2fs -h %s: %s" % (device, exc))
            return None

    @staticmethod
    def device_node(mount, kname):
        """A device node whose st_rdev really is this mount's major:minor (mount sources lie:
        /dev/root, stale names in containers)."""
        want = os.makedev(mount["major"], mount["minor"])
        for path in ("/dev/block/%d:%d" % (mount["major"], mount["minor"]), mount["source"],
                     "/dev/%s" % kname if kname else None):
            try:
                st = os.stat(path) if path else None
            except (OSError, ValueError):
                continue
            if st is not None and stat.S_ISBLK(st.st_mode) and st.st_rdev == want:
                return path
        return None

    def jbd2(self, kname, where):
        if not kname:
            return None
        # The journal inode is 8 unless the superblock says otherwise; the glob catches the rest.
        paths = ["/proc/fs/jbd2/%s-8/info" % kname] + sorted(glob.glob("/proc/fs/jbd2/%s-*/info" % kname))
        for path in paths:
            if os.path.exists(path):
                text = self.read(path, where)
                try:
                    return parse_jbd2_info(text) if text is not None else None
                except ParseError as exc:
                    self.error(where, "%s: %s" % (path, exc))
                    return None
        return None

    def queue(self, sysdev, where):
        queue_dir = os.path.join(sysdev, "queue")
        if not os.path.isdir(queue_dir):  # a partition: the queue belongs to the whole disk
            queue_dir = os.path.join(sysdev, "..", "queue")
        if not os.path.isdir(queue_dir):
            return None
        disk_dir = os.path.join(queue_dir, "..")
        facts = {"device": os.path.basename(os.path.realpath(disk_dir))}
        for name, kind in (("rotational", int), ("write_cache", str), ("discard_max_bytes", int),
                           ("optimal_io_size", int)):
            path = os.path.join(queue_dir, name)
            if os.path.exists(path):
                facts[name] = self.sysfs_value(path, kind, where)
        model_path = os.path.join(disk_dir, "device", "model")  # SCSI, ATA and NVMe disks have one
        facts["model"] = self.sysfs_value(model_path, str, where) if os.path.exists(model_path) else None
        facts["kind"] = volume_kind(facts["device"], facts["model"])
        return facts

    def sysfs_value(self, path, kind, where):
        """One sysfs attribute as kind (int or str), or None (recorded) if unreadable or malformed."""
        text = self.read(path, where, SYSFS_READ_LIMIT)
        try:
            return kind(text.strip()) if text is not None else None
        except ValueError:
            self.error(where, "%s: unexpected value %r" % (path, text[:40]))
            return None


def main():
    module = AnsibleModule(
        argument_spec=dict(
            fstab_path=dict(type="path", default="/etc/fstab"),
            superblock=dict(type="bool", default=True),
            dumpe2fs=dict(type="str", default="dumpe2fs"),
            netfs_types=dict(type="list", elements="str", default=list(NETFS_TYPES)),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, ext4_facts=Collector(module).collect())


if __name__ == "__main__":
    main()
