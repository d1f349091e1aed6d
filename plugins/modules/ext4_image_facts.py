#!/usr/bin/python
# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Ansible module: the ext4 facts of a disk image file, read offline with e2fsprogs alone."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
---
module: ext4_image_facts
short_description: Read the ext4 filesystems, fstab and kernels of a disk image without mounting it
description:
  - Reads a disk image (raw, qcow2, VHD, VMDK or VHDX), a machine image before rollout, and returns the same facts as
    M(ext4audit.fleet.ext4_facts) does for a running host, so the same rules apply to it.
  - Reads the MBR or GPT partition table (or a bare filesystem), C(dumpe2fs -h) of every ext2/3/4
    filesystem, the root filesystem's C(/etc/fstab) (sources matched by UUID=, LABEL=, PARTUUID=,
    PARTLABEL=, device name or partition number), C(/etc/os-release) and the kernels in C(/boot)
    (a separate C(/boot) partition or a folder of root). Each kernel's release and version string
    come from its bzImage setup header, so the kernel rules work offline.
  - Every filesystem the image mounts is checked with C(e2fsck -fn) (read-only, since it opens the image
    read-only and answers no to every repair) and its superblock's state, error count and journal
    recovery flag; the result is the filesystem's C(fsck) entry. fstab entries the boot needs that match
    no filesystem of the image are listed in C(image.fstab_unresolved).
  - Every read is bounded. Files are read only up to a size cap (os-release 64 KiB, fstab and
    grub.cfg 1 MiB, the dpkg database 32 MiB, an fstab entry 4096 bytes, a kernel's first 64 KiB),
    every command's output is capped and every command is killed after its timeout; what goes over
    becomes an entry in C(errors).
  - A file the check needs that is there but cannot be read (over its cap, a FIFO or device node, a
    symlink loop, a folder too large to list) is listed in C(image.unread) and never counts as
    absent; without a readable os-release the kernel's vendor is null (a kernel that looks like an
    upstream one may be a vendor's that backports fixes).
  - The effective mount options are inferred from the defaults of the image's boot kernel, the superblock
    and the fstab options (C(options_source=inferred); C(options_kernel) says which kernel version's
    defaults were used and why), as M(ext4audit.fleet.ext4_facts) does on kernels without C(/proc/fs/ext4/<dev>/options).
  - Nothing is mounted and no loop device is attached, so the image never reaches the controller
    kernel's ext4 code; C(dumpe2fs) and C(debugfs) (read-only) open the file at each partition's
    offset (C(file?offset=N)). In-image paths, symlink targets included, are followed inside the
    image only (at most 40 links in a path, as the kernel does) and refused unless they are plain
    characters (they go into debugfs requests).
  - The format is told by the file's headers, never its name - raw, qcow2, VHD (fixed and dynamic),
    VMDK (monolithic sparse and stream-optimized) or VHDX - and the headers are checked before any
    tool reads the file - present, whole, their checksums right and every table inside the file; a
    truncated or inconsistent header is an error naming the file and the field.
  - A raw image and a fixed VHD (a raw disk followed by a 512-byte footer) are read in place. Any
    other format is converted to a temporary raw copy with C(qemu-img) (sparse, removed
    afterwards); one that would read another file (a backing or external data file, a VHD
    differencing disk, a VMDK parent or separate extents) is refused, and so is one whose virtual
    size (the raw copy's size, however small the image file is) is more than O(tmp_dir) has free.
    The folders of raw copies that killed checks left in O(tmp_dir) (this user's, named
    C(ext4-image-*), whose process is gone) are removed at the next start.
  - Never fails on a bad image; what cannot be read becomes an entry in C(errors).
options:
  image:
    description: The image file, raw, qcow2, VHD, VMDK or VHDX.
    type: path
    required: true
  format:
    description: The image format; C(auto) tells the formats apart by their headers. Any other value
      is checked against the headers, and a file of another format is refused.
    type: str
    choices: [auto, raw, qcow2, vhd, vmdk, vhdx]
    default: auto
  boot_kernel:
    description: The kernel release to treat as the one the image boots (default, empty, is the
      target of C(/vmlinuz) or C(/boot/vmlinuz), else the first GRUB entry, else the highest version).
    type: str
    default: ""
  boot_files_dir:
    description: When set, an existing folder where that kernel and its initrd are written
      (C(vmlinuz), C(initrd.img)) so that the image can be booted with qemu C(-kernel/-initrd).
    type: path
  tmp_dir:
    description: Folder for the temporary raw copy of a qcow2, dynamic VHD, VMDK or VHDX image (default, the system's).
    type: path
  timeout:
    description: Seconds each command that reads part of the image (dumpe2fs, debugfs, qemu-img info)
      may run before it is killed.
    type: int
    default: 60
  scan_timeout:
    description: Seconds each command that reads a whole filesystem or image (e2fsck -fn, qemu-img
      convert) may run before it is killed; a filesystem whose check did not finish is not clean.
    type: int
    default: 900
  budget:
    description: Seconds the whole check may take. Every command is killed at the end of the budget
      at the latest, and the check stops there; RV(ext4_image_facts.image.incomplete) then says so
      and which steps were not done, and the facts are not complete enough to judge the image.
    type: int
    default: 600
notes:
  - Needs e2fsprogs (and qemu-utils for every format but raw and fixed VHD) on the host that runs it,
    usually the controller.
  - Partition tables are read with 512-byte sectors (and 4096 for GPT); LVM and md sources in fstab
    are not followed and are listed in C(errors).
  - Only x86 bzImage kernels are read; the page size is taken as 4096 (x86).
extends_documentation_fragment:
  - ext4audit.fleet.common
"""

EXAMPLES = r"""
- name: Inspect an image offline
  ext4audit.fleet.ext4_image_facts:
    image: /var/lib/images/web-2026-11.qcow2
  register: image

- name: Inspect and extract its kernel and initrd to boot it
  ext4audit.fleet.ext4_image_facts:
    image: /var/lib/images/web-2026-11.raw
    boot_files_dir: /var/tmp/precheck
"""

RETURN = r"""
ext4_image_facts:
  description: The facts of the image, in the schema of M(ext4audit.fleet.ext4_facts) (what a running host
    has and an image does not is null or empty), plus RV(ext4_image_facts.image).
  returned: always
  type: dict
  contains:
    schema:
      description: The record's format.
      returned: always
      type: str
      sample: ext4-fleet-audit/facts/v1
    kernel:
      description: The boot kernel (RV(ext4_image_facts.image.boot_kernel)), with the keys of ext4_facts' running kernel;
        when no kernel could be read, one whose versions are null and whose notes say why.
      returned: always
      type: dict
      contains:
        release:
          description: The kernel release read from its bzImage header, or null.
          returned: always
          type: str
          sample: 6.12.57+deb12-cloud-amd64
        proc_version:
          description: C(Linux version) and the kernel's version string, as C(/proc/version) would show it, or null.
          returned: always
          type: str
        version_signature:
          description: Always null (there is no C(/proc/version_signature) in an image).
          returned: always
          type: str
        os_release:
          description: ID, ID_LIKE, VERSION_ID and PRETTY_NAME of the image's C(/etc/os-release), those present.
          returned: always
          type: dict
        page_size:
          description: The page size in bytes, taken as 4096 (only x86 kernels are read).
          returned: always
          type: int
          sample: 4096
        vendor:
          description: Whose kernel it is (debian, ubuntu, rhel, mainline, ...), or null.
          returned: always
          type: str
          sample: debian
        upstream:
          description: The upstream (kernel.org) version, or null when it cannot be told.
          returned: always
          type: str
          sample: 6.12.57
        vendor_version:
          description: The vendor's full version-release, or null.
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
        source:
          description: Where the kernel facts come from.
          returned: always
          type: str
          sample: image
    filesystems:
      description: The ext2/3/4 filesystems the image mounts (its root and the fstab entries that match a filesystem
        of the image), with the keys of ext4_facts' filesystems and uuid, label, partition and fsck.
      returned: always
      type: list
      elements: dict
      contains:
        device:
          description: The fstab source (C(UUID=...) for a root without an fstab entry).
          returned: always
          type: str
          sample: UUID=0b7c1a52-5e2f-4d3c-9a10-6f1e2d3c4b5a
        kernel_name:
          description: Always null (no block device).
          returned: always
          type: str
        major:
          description: Always null (no block device).
          returned: always
          type: int
        minor:
          description: Always null (no block device).
          returned: always
          type: int
        mountpoint:
          description: Where the image mounts it.
          returned: always
          type: str
          sample: /
        fstype:
          description: The type fstab gives (ext4, ext3, ext2), or the one the superblock's features tell.
          returned: always
          type: str
        bind_mounts:
          description: Always empty.
          returned: always
          type: list
          elements: str
        mount_options:
          description: Always empty (the per-mount options fstab asks for are in super_options).
          returned: always
          type: list
          elements: str
        super_options:
          description: The options the fstab entry passes to the mount (C(rw) unless it says C(ro)).
          returned: always
          type: list
          elements: str
        options:
          description: The options that would be in effect, inferred from the boot kernel's defaults, the
            superblock and fstab.
          returned: always
          type: list
          elements: str
        options_source:
          description: Always C(inferred).
          returned: always
          type: str
          sample: inferred
        options_kernel:
          description: Which kernel version's defaults the options were inferred for, and why that one.
          returned: always
          type: dict
          contains:
            upstream:
              description: The upstream kernel version whose defaults were used.
              returned: always
              type: str
              sample: 6.12.57
            why:
              description: Why that version (the boot kernel's, or an assumed one).
              returned: always
              type: str
        superblock:
          description: C(dumpe2fs -h) facts, as in ext4_facts.
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
        jbd2:
          description: Always null (no live journal).
          returned: always
          type: dict
        queue:
          description: Always null (no block device queue).
          returned: always
          type: dict
        usage:
          description: Always null (no live counts offline; the superblock's free counts are exact in an image).
          returned: always
          type: dict
        fstab:
          description: The image's fstab entry for this mount point, or null (a root without one).
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
          description: What fstab asks for that would not be in effect.
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
              description: What would be in effect, or null when the option would not be.
              type: str
        uuid:
          description: The filesystem's UUID, or null.
          returned: always
          type: str
        label:
          description: The filesystem's label, or null.
          returned: always
          type: str
        partition:
          description: The number of the partition holding it (null for a bare filesystem image).
          returned: always
          type: int
          sample: 2
        fsck:
          description: Whether the filesystem is consistent and was unmounted cleanly (C(e2fsck -fn) and the superblock).
          returned: always
          type: dict
          contains:
            clean:
              description: True when there are no problems.
              returned: always
              type: bool
            exit_code:
              description: The exit code of C(e2fsck -fn), or null when it did not run to the end.
              returned: always
              type: int
              sample: 0
            problems:
              description: What is wrong (superblock state, recorded errors, journal needing recovery, e2fsck's messages).
              returned: always
              type: list
              elements: str
    netfs:
      description: Network filesystems in the image's fstab.
      returned: always
      type: list
      elements: dict
      contains:
        mountpoint:
          description: Where it would be mounted.
          type: str
        fstype:
          description: Its type (nfs4, cifs, ...).
          type: str
        source:
          description: The fstab source.
          type: str
        options:
          description: The fstab options.
          type: list
          elements: str
    not_audited:
      description: Local filesystems of other types in the image's fstab (xfs, btrfs, vfat, ...), which the audit does not check.
      returned: always
      type: list
      elements: dict
      contains:
        mountpoint:
          description: Its fstab mount point.
          type: str
        fstype:
          description: Its fstab type (xfs, btrfs, vfat, ...).
          type: str
        source:
          description: Its fstab source (a device, UUID=, LABEL=, ...).
          type: str
    errors:
      description: What could not be read, with the reason.
      returned: always
      type: list
      elements: dict
      contains:
        where:
          description: What was being read (image, kernel, fstab, boot files, C(partition N), ...).
          type: str
        reason:
          description: Why it failed.
          type: str
    image:
      description: The image itself.
      returned: always
      type: dict
      contains:
        path:
          description: The image file, as given.
          returned: always
          type: str
        format:
          description: raw, qcow2, vhd, vmdk or vhdx (told by the file's headers), or null when the file
            could not be read or its headers were refused.
          returned: always
          type: str
          sample: raw
        subformat:
          description: fixed or dynamic for a VHD, monolithicSparse or streamOptimized for a VMDK, else null.
          returned: always
          type: str
          sample: streamOptimized
        read_in_place:
          description: Whether the image was read where it is (raw, fixed VHD) rather than from a
            temporary raw copy; null when it was not read.
          returned: always
          type: bool
        size:
          description: The virtual disk's size in bytes (of its raw copy, or of a fixed VHD's data), or null.
          returned: always
          type: int
        partition_table:
          description: gpt, mbr, none (a bare filesystem), or null when the image could not be read.
          returned: always
          type: str
          sample: gpt
        disk_id:
          description: The GPT disk GUID or the MBR disk signature (hex), or null.
          returned: always
          type: str
        partitions:
          description: The partitions (a bare filesystem is one partition numbered null).
          returned: always
          type: list
          elements: dict
          contains:
            number:
              description: The partition number (logical MBR partitions from 5), or null for a bare filesystem.
              returned: always
              type: int
            start:
              description: Offset in bytes.
              returned: always
              type: int
            size:
              description: Size in bytes.
              returned: always
              type: int
            type:
              description: The MBR type (C(0x83)) or GPT type GUID, or null.
              returned: always
              type: str
            type_name:
              description: The type's name (linux, efi-system, ext-filesystem, ...), or null when unknown.
              returned: always
              type: str
            partuuid:
              description: The PARTUUID (GPT partition GUID, or MBR signature-number), or null.
              returned: always
              type: str
            name:
              description: The GPT partition name (PARTLABEL), or null.
              returned: always
              type: str
            fs:
              description: The ext2/3/4 filesystem in it, or null when there is none.
              returned: always
              type: dict
              contains:
                uuid:
                  description: The filesystem's UUID, or null.
                  type: str
                label:
                  description: The filesystem's label, or null.
                  type: str
                fstype:
                  description: ext4, ext3 or ext2, told by the superblock's features.
                  type: str
                superblock:
                  description: C(dumpe2fs -h) facts, as RV(ext4_image_facts.filesystems[].superblock).
                  type: dict
        root:
          description: The root filesystem, or null when none was found.
          returned: always
          type: dict
          contains:
            partition:
              description: Its partition number (null for a bare filesystem).
              type: int
            uuid:
              description: Its UUID, or null.
              type: str
            label:
              description: Its label, or null.
              type: str
        os_release:
          description: Every field of the image's C(/etc/os-release), or null.
          returned: always
          type: dict
        packages:
          description: The installed versions of grub-common, grub2-common and e2fsprogs, from the image's
            C(/var/lib/dpkg/status) (read up to 32 MiB), those installed; null when the image has no dpkg
            database (an rpm-based image) or it could not be read (see RV(ext4_image_facts.image.unread)).
            The rules on what the image's boot loader and fsck can read use them (rules/boot_tools.yml).
          returned: always
          type: dict
          sample: {"grub-common": "2.06-13+deb12u1", "e2fsprogs": "1.47.0-2"}
        identity:
          description: What the image says it is, so that vendor notices naming ranges of images can be
            checked - from os-release's IMAGE_ID, IMAGE_VERSION and BUILD_ID, Amazon Linux's
            C(/etc/image-id) and Ubuntu cloud images' C(/etc/cloud/build.info) (each read up to 64 KiB;
            one that cannot be read is in RV(ext4_image_facts.image.unread)); null when there is no root filesystem.
          returned: always
          type: dict
          contains:
            name:
              description: The image's name (os-release IMAGE_ID, image-id image_name, build.info build_name), or null.
              returned: always
              type: str
              sample: al2023-ami
            name_source:
              description: The field the name came from, or null.
              returned: always
              type: str
            version:
              description: os-release IMAGE_VERSION or image-id image_version, or null.
              returned: always
              type: str
            build_id:
              description: os-release BUILD_ID or build.info serial, or null.
              returned: always
              type: str
            vendor_image_id:
              description: The vendor's id of the image it was built from (image-id image_file, image_id or
                image_name), or null.
              returned: always
              type: str
              sample: al2023-ami-2023.0.20230315.0-kernel-6.1-x86_64.xfs.gpt
            build_date:
              description: The build date (YYYY-MM-DD), the first date in image_date, serial, BUILD_ID,
                IMAGE_VERSION, the names above, then the image file's own name (Alibaba names its images
                C(..._alibase_YYYYMMDD.vhd)); null when none holds a date.
              returned: always
              type: str
              sample: "2019-03-27"
            build_date_source:
              description: The field the build date came from (C(image file name) when only the file's name has one), or null.
              returned: always
              type: str
        kernels:
          description: Every kernel (C(/boot/vmlinuz-*)) whose bzImage header could be read.
          returned: always
          type: list
          elements: dict
          contains:
            release:
              description: The release in its version string.
              type: str
            version:
              description: Its version string.
              type: str
            path:
              description: Its path in the image.
              type: str
              sample: /boot/vmlinuz-6.1.0-28-cloud-amd64
            initrd:
              description: The path of its initrd in the image, or null.
              type: str
            file_release_matches:
              description: Whether the file name carries the release of the version string.
              type: bool
            vendor:
              description: Whose kernel it is, or null.
              type: str
            upstream:
              description: Its upstream version, or null.
              type: str
        boot_kernel:
          description: The kernel the image boots, or null.
          returned: always
          type: dict
          contains:
            release:
              description: Its release.
              type: str
            why:
              description: How it was chosen (O(boot_kernel), the C(/vmlinuz) link, the first GRUB entry, the highest version).
              type: str
        boot_files:
          description: The boot kernel and its initrd written to O(boot_files_dir), or null (not asked for, or not written; see errors).
          returned: always
          type: dict
          contains:
            kernel:
              description: The kernel file written.
              type: str
            initrd:
              description: The initrd file written.
              type: str
            root:
              description: The root to boot, C(UUID=...).
              type: str
            release:
              description: The kernel's release.
              type: str
        fstab_unresolved:
          description: The fstab entries the boot needs (not nofail or noauto) that match no filesystem of the image
            (empty when the root filesystem has no fstab); null when its fstab could not be read (see RV(ext4_image_facts.image.unread)).
          returned: always
          type: list
          elements: dict
          contains:
            line:
              description: The entry's line number.
              type: int
            spec:
              description: The entry's source.
              type: str
            mountpoint:
              description: The entry's mount point.
              type: str
            fstype:
              description: The entry's type.
              type: str
        budget_s:
          description: The check's time budget in seconds (O(budget)).
          returned: always
          type: int
          sample: 600
        steps:
          description: Each step of the check that ran, in order, with the seconds it took.
          returned: always
          type: list
          elements: dict
          contains:
            step:
              description: The step (raw copy of the image, partition table and superblocks, root filesystem and
                fstab, os-release and kernels, e2fsck -fn of the filesystems, boot files).
              type: str
            seconds:
              description: How long it took.
              type: float
        incomplete:
          description: Null, or why the check did not finish (its time budget ran out) and which steps were not
            done; the image is then not judged.
          returned: always
          type: str
        unread:
          description: The files the check needs (fstab, os-release, grub.cfg, kernels) that are in the image but
            could not be read, with the reason (a FIFO or device node, a symlink loop, a folder too large to
            list, over its size cap, an fstab entry longer than mount(2) takes). The rules that need them are
            undetermined, and the rule IMAGE_FILE_UNREAD fails the image.
          returned: always
          type: list
          elements: dict
          contains:
            path:
              description: The file's path in the image (for an fstab, which filesystem it was read from as the root).
              type: str
              sample: /etc/fstab of partition 2
            reason:
              description: Why it could not be read.
              type: str
"""

import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ext4audit.fleet.plugins.module_utils.disk_formats import FORMATS
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_image.commands import WORK_PREFIX
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_image.reader import ImageReader
from ansible_collections.ext4audit.fleet.plugins.module_utils.own_folders import sweep


def main():
    module = AnsibleModule(
        argument_spec=dict(
            image=dict(type="path", required=True),
            format=dict(type="str", default="auto", choices=["auto"] + list(FORMATS)),
            boot_kernel=dict(type="str", default=""),
            boot_files_dir=dict(type="path"),
            tmp_dir=dict(type="path"),
            timeout=dict(type="int", default=60),
            scan_timeout=dict(type="int", default=900),
            budget=dict(type="int", default=600),
        ),
        supports_check_mode=True,
    )
    # The raw copies that checks killed before their cleanup left (each as large as its image's disk)
    swept = sweep(module.params["tmp_dir"] or tempfile.gettempdir(), WORK_PREFIX)
    if swept:
        module.warn("removed the work folders that %d killed earlier check(s) left: %s" % (len(swept), ", ".join(swept)))
    module.exit_json(changed=False, ext4_image_facts=ImageReader(module).collect())


if __name__ == "__main__":
    main()
