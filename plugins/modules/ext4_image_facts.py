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
          description: ID, ID_LIKE, VERSION_ID, PRETTY_NAME, IMAGE_ID and IMAGE_VERSION of the image's C(/etc/os-release), those present.
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
            # superblock fields: written by tools/module_return.py from ext4_parsers.SUPERBLOCK_FIELDS
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

import contextlib
import os
import re
import shutil
import stat
import tempfile
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers import (
    EXT4_DRIVER_TYPES, FACTS_SCHEMA, NETFS_TYPES, ParseError, ext_fstype, fstab_drift, fstab_long_line,
    fstab_mount_tokens, fstab_not_audited, fstab_spec_target, has_ext_magic, infer_options, option_map,
    parse_bzimage_version, parse_debugfs_fast_link, parse_debugfs_ls,
    os_release_kept, parse_dpkg_status, parse_dumpe2fs, parse_dumpe2fs_identity, parse_fstab, parse_grub_first_kernel,
    parse_os_release,
    parse_build_info, image_identity, parse_partition_table, plain_image_path, release_sort_key,
)
from ansible_collections.ext4audit.fleet.plugins.module_utils.capped_command import CommandTimeout, run_capped
from ansible_collections.ext4audit.fleet.plugins.module_utils.disk_formats import FORMATS, QEMU_DRIVERS, FormatError
from ansible_collections.ext4audit.fleet.plugins.module_utils.disk_formats import identify as identify_format
from ansible_collections.ext4audit.fleet.plugins.module_utils.kernel_version import identify, options_kernel
from ansible_collections.ext4audit.fleet.plugins.module_utils.own_folders import claim, sweep

WORK_PREFIX = "ext4-image-"  # the folder of an image's raw copy, in tmp_dir
# E2FSCK_CONFIG: the controller's /etc/e2fsck.conf (logging, fix-up policies) has no say in the check
ENV = {"LC_ALL": "C", "LANG": "C", "E2FSCK_CONFIG": "/dev/null"}
BANNER = re.compile(r"^(debugfs|dumpe2fs|e2fsck) \d+\.\d+")
FSCK_EXIT_BITS = ((1, "errors corrected"), (2, "reboot needed"), (4, "errors left uncorrected"),
                  (8, "operational error"), (16, "usage error"), (32, "cancelled"), (128, "shared library error"))
FSCK_PROGRESS = re.compile(r"^(Pass \d[A-Z]?: |.*: \d+/\d+ files )")  # e2fsck's lines that say nothing is wrong
KIB = 1024
MIB = 1024 * KIB
# How much of each thing read out of an image is read at most; over the cap is an error.
OS_RELEASE_CAP = 64 * KIB
FSTAB_CAP = MIB
TEXT_CAP = MIB  # grub.cfg, dumpe2fs -h, debugfs stat, qemu-img info
LISTING_CAP = 4 * MIB  # debugfs ls -p of /etc or /boot: some 50,000 entries
LINK_CAP = 4096  # PATH_MAX: the longest symlink target Linux follows
SYMLINK_HOPS = 40  # MAXSYMLINKS: how many symlinks the kernel follows in one path lookup
FSTAB_LINE_CAP = 4096  # mount(2) copies one page of options: a longer fstab entry cannot be mounted as written
BOOT_FILE_CAP = 1024 * MIB  # a kernel or initrd extracted to boot the image
DPKG_STATUS_CAP = 32 * MIB  # /var/lib/dpkg/status: some 3 MiB on a server image, 10 on a large desktop
DPKG_STATUS = "/var/lib/dpkg/status"
# The packages whose versions decide whether the image's boot loader and fsck read its filesystems
# (rules/boot_tools.yml): GRUB's shared files (every GRUB platform package depends on them), e2fsprogs.
BOOT_PACKAGES = ("grub-common", "grub2-common", "e2fsprogs")
STDERR_KEPT = 64 * KIB
FSCK_KEPT = 64 * KIB  # of e2fsck's output, the rest read and thrown away
BZIMAGE_HEAD = 64 * KIB  # the setup header and the version string it points at sit in the first sectors
# The steps of the check, in order (image.steps times each; an incomplete check names those not done).
STEP_COPY = "raw copy of the image"
STEP_TABLE = "partition table and superblocks"
STEP_ROOT = "root filesystem and fstab"
STEP_SYSTEM = "os-release and kernels"
STEP_FSCK = "e2fsck -fn of the filesystems"
STEP_BOOT_FILES = "boot files"
STEPS = (STEP_COPY, STEP_TABLE, STEP_ROOT, STEP_SYSTEM, STEP_FSCK, STEP_BOOT_FILES)


class ImageError(Exception):
    """The image (or a part of it) cannot be read; the message says why."""


class OutOfTime(Exception):
    """The whole check's time budget ran out. Not an ImageError: nothing may take it for a file that
    could not be read or a filesystem that is not clean; it ends the check, which is incomplete."""


class Unread(ImageError):
    """A file the check needs is in the image but could not be read (already recorded in image.unread)."""


def file_kind(mode):
    """What a directory entry that is not a regular file is, for the reason it was not read."""
    for test, name in ((stat.S_ISDIR, "a folder"), (stat.S_ISLNK, "a symlink"), (stat.S_ISFIFO, "a FIFO"),
                       (stat.S_ISBLK, "a block device"), (stat.S_ISCHR, "a character device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return "mode %o" % mode


class ImageReader:
    """Reads one image; every failure is recorded in self.errors instead of raised."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.errors = []
        self.unread = []
        self.os_release_unread = False
        self.deadline = time.monotonic() + module.params["budget"]
        self.steps = []
        self.current = None
        self.raw = None
        self.raw_size = None
        self.listings = {}
        self.fscks = {}
        self.tools = {}
        self.mounts = []

    def error(self, where, reason):
        self.errors.append({"where": where, "reason": reason})

    def tool(self, name):
        if name not in self.tools:
            path = self.module.get_bin_path(name)
            if not path:
                raise ImageError("%s not found; install %s" % (name, "qemu-utils" if name == "qemu-img" else "e2fsprogs"))
            self.tools[name] = path
        return self.tools[name]

    # ---------------------------------------------------------------- commands
    def run(self, argv, limit, timeout, drain=False):
        """Run argv (a list, never a shell) for at most `timeout` seconds, keeping at most `limit`
        bytes of its output. Returns (rc, out, err, over): over is True when it printed more; it is
        then killed (rc None) unless drain, which reads the rest and throws it away to learn its exit
        code. A command still running at its timeout is killed and raises ImageError."""
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise OutOfTime("before %s" % os.path.basename(argv[0]))
        # the budget cuts a command short: then the budget, not the command, is what ran out
        by_budget, timeout = left < timeout, min(timeout, left)
        try:
            return run_capped(self.module, argv, limit, STDERR_KEPT, timeout, drain, environ_update=ENV)
        except CommandTimeout:
            raise self.too_slow(argv, timeout, by_budget) from None

    @staticmethod
    def too_slow(argv, timeout, by_budget):
        """The error of a command killed at its timeout, or at the end of the check's budget."""
        name = os.path.basename(argv[0])
        if by_budget:
            return OutOfTime("%s was killed at the end of the budget" % name)
        return ImageError("%s did not finish in %d s: killed" % (name, timeout))

    def e2fs(self, name, args, part, limit, head=False):
        """Run dumpe2fs or debugfs on the filesystem at a partition's offset; its output as bytes, at
        most `limit` of them (head: the first `limit` bytes are wanted and the rest is not read;
        otherwise more is an error). e2fsprogs' unix I/O manager reads 'file?offset=N'; debugfs
        opens read-only without -w and exits 0 on failed requests, so anything on stderr but its
        banner is the error."""
        rc, out, err, over = self.run([self.tool(name)] + args + [self.target(part)], limit, self.params["timeout"])
        if over:
            if head:
                return out
            raise ImageError("%s %s printed more than %d bytes: over the cap" % (name, " ".join(args), limit))
        problems = [line for line in err.splitlines() if line.strip() and not BANNER.match(line)]
        if rc != 0 or problems:
            raise ImageError("%s failed (rc=%d): %s" % (name, rc, " ".join(problems)[:300] or "no message"))
        return out

    def target(self, part):
        return self.raw if not part["start"] else "%s?offset=%d" % (self.raw, part["start"])

    def debugfs(self, part, request, limit=TEXT_CAP, head=False):
        return self.e2fs("debugfs", ["-R", request], part, limit, head)

    # ------------------------------------------------------------ the whole image
    def collect(self):
        facts = {"schema": FACTS_SCHEMA, "kernel": None, "filesystems": [], "netfs": [], "not_audited": [],
                 "errors": self.errors,
                 "image": {"path": self.params["image"], "format": None, "subformat": None,
                           "read_in_place": None, "size": None, "partition_table": None,
                           "disk_id": None, "partitions": [], "root": None, "os_release": None, "kernels": [],
                           "boot_kernel": None, "boot_files": None, "fstab_unresolved": None, "packages": None,
                           "identity": None,
                           "unread": self.unread}}
        facts["image"].update(budget_s=self.params["budget"], steps=self.steps, incomplete=None)
        workdir = None
        try:
            path = os.path.abspath(self.params["image"])
            found = self.check_image(path)
            facts["image"].update(format=found["format"], subformat=found["subformat"],
                                  read_in_place=found["data_size"] is not None)
            if found["data_size"] is None:
                workdir = tempfile.mkdtemp(prefix=WORK_PREFIX, dir=self.params["tmp_dir"])
                claim(workdir)  # a check killed before it removes the folder: the next one does
                with self.step(STEP_COPY):
                    self.raw = self.to_raw(path, found["format"], workdir)
                self.raw_size = os.path.getsize(self.raw)
            else:  # the virtual disk is the file's first data_size bytes
                self.raw, self.raw_size = path, found["data_size"]
            if "?" in self.raw:
                raise ImageError("path %r holds '?', which e2fsprogs reads as the start of I/O options" % self.raw)
            self.read_image(facts)
        except OutOfTime as exc:
            left = [name for name in STEPS[STEPS.index(self.current):]
                    if name != STEP_BOOT_FILES or self.params["boot_files_dir"]]
            facts["image"]["incomplete"] = "the check's time budget of %d s ran out (%s); not done: %s" % (
                self.params["budget"], exc, ", ".join(left))
            self.error("image", facts["image"]["incomplete"])
        except ImageError as exc:
            self.error("image", str(exc))
        except (IOError, OSError) as exc:  # the work folder or a controller file
            self.error("image", "%s: %s" % (getattr(exc, "filename", None) or "image", exc.strerror or exc))
        finally:
            if workdir:
                shutil.rmtree(workdir, ignore_errors=True)
        if facts["kernel"] is None:  # the schema has a kernel object: one whose versions are unknown
            os_release = facts["image"]["os_release"] or {}
            facts["kernel"] = {"release": None, "vendor": None, "upstream": None, "vendor_version": None,
                               "backports": False,
                               "notes": [e["reason"] for e in self.errors if e["where"] == "kernel"]
                               or ["no kernel could be read from the image"],
                               "proc_version": None, "version_signature": None,
                               "os_release": os_release_kept(os_release), "page_size": 4096, "source": "image"}
        return facts

    def check_image(self, path):
        """The format (disk_formats.identify), after refusing what is not a readable regular image
        file or whose headers are cut short or inconsistent."""
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise ImageError("%s is not a regular file" % path)
            if st.st_size == 0:
                raise ImageError("%s is empty" % path)
            with open(path, "rb") as handle:
                def read(offset, length):
                    handle.seek(offset)
                    return handle.read(length)
                found = identify_format(read, st.st_size, path)
        except (IOError, OSError) as exc:
            raise ImageError("cannot read %s: %s" % (path, exc.strerror or exc))
        except FormatError as exc:
            raise ImageError(str(exc))
        wanted = self.params["format"]
        if wanted != "auto" and wanted != found["format"]:
            raise ImageError("%s was given as %s but its headers say %s" % (path, wanted, found["format"]))
        return found

    def to_raw(self, path, fmt, workdir):
        """A sparse raw copy of an image in a format qemu-img reads, after checking it reads no other file."""
        qemu_img = self.tool("qemu-img")
        driver = QEMU_DRIVERS[fmt]
        rc, out, err, over = self.run([qemu_img, "info", "-f", driver, "--output=json", path], TEXT_CAP,
                                      self.params["timeout"])
        if over or rc != 0:
            raise ImageError("qemu-img info failed (%s): %s" % ("over %d bytes of output" % TEXT_CAP if over
                                                                else "rc=%d" % rc, err.strip()[:300]))
        try:
            info = self.module.from_json(out.decode("utf-8", "replace"))
        except ValueError:
            raise ImageError("qemu-img info printed no JSON: %r" % out[:200])
        if not isinstance(info, dict):
            raise ImageError("qemu-img info printed JSON that is not an object: %r" % out[:200])
        specific = (info.get("format-specific") or {}).get("data") or {}
        # a VMDK's extents are files of their own: the monolithic ones qemu-img names are this one
        others = [extent.get("filename") for extent in specific.get("extents") or []
                  if not isinstance(extent, dict)
                  or os.path.realpath(extent.get("filename") or "") != os.path.realpath(path)]
        other = info.get("backing-filename") or info.get("full-backing-filename") or specific.get("data-file") \
            or (others and others[0])
        if other:
            raise ImageError("%s image %s refers to another file (%s): refused, it would be read too; "
                             "convert it to a standalone image first (qemu-img convert)" % (fmt, path, other))
        # The raw copy is as large as the virtual disk: a compressed image (actual-size) can be far smaller.
        needed = info.get("virtual-size")
        if not isinstance(needed, int) or isinstance(needed, bool) or needed <= 0:
            raise ImageError("qemu-img info gave no virtual size (%r): the raw copy's size is unknown" % (needed,))
        vfs = os.statvfs(workdir)
        if vfs.f_bavail * vfs.f_frsize < needed:
            raise ImageError("%s has %d MiB free, the raw copy of this image needs up to its virtual size, %d MiB: "
                             "refused before writing" % (workdir, vfs.f_bavail * vfs.f_frsize // MIB, needed // MIB))
        raw = os.path.join(workdir, "image.raw")
        rc, out, err, _unused = self.run([qemu_img, "convert", "-f", driver, "-O", "raw", path, raw], TEXT_CAP,
                                         self.params["scan_timeout"], drain=True)
        if rc != 0:
            raise ImageError("qemu-img convert failed (rc=%d): %s" % (rc, err.strip()[:300]))
        return raw

    def read(self, offset, length):
        with open(self.raw, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    def read_image(self, facts):
        image = facts["image"]
        image["size"] = self.raw_size
        with self.step(STEP_TABLE):
            try:
                table = parse_partition_table(self.read, image["size"])
            except ParseError as exc:
                raise ImageError(str(exc))
            image.update(partition_table=table["table"], disk_id=table["disk_id"], partitions=table["partitions"])
            for part in table["partitions"]:
                part["fs"] = self.superblock(part)
        with self.step(STEP_ROOT):
            root, fstab_text, fstab_unread = self.find_root(table["partitions"])
            if root is None:
                return
            image["root"] = {"partition": root["number"], "uuid": root["fs"]["uuid"], "label": root["fs"]["label"]}
            if fstab_text is None and not fstab_unread:
                image["fstab_unresolved"] = []  # no fstab: nothing in it to resolve
            mounts = self.fstab(root, fstab_text, table, facts)
            self.mounts = sorted(mounts.items(), key=lambda item: -len(item[0]))  # longest mount point first
        with self.step(STEP_SYSTEM):
            try:
                image["os_release"] = self.os_release()
            except Unread:
                self.os_release_unread = True
            image["identity"] = self.identity(image["os_release"])
            try:
                image["packages"] = self.packages()
            except Unread:
                pass  # recorded in image.unread: the rules that need the versions are undetermined
            try:
                facts["kernel"] = self.kernels(image)
            except ImageError as exc:
                self.error("kernel", str(exc))
        with self.step(STEP_FSCK):
            # the options are inferred for the kernel the image boots
            inferred_for = options_kernel(facts["kernel"], "the image's boot kernel")
            for mountpoint, (part, entry) in sorted(mounts.items()):
                facts["filesystems"].append(self.filesystem(mountpoint, part, entry, inferred_for))
        if self.params["boot_files_dir"] and image["boot_kernel"]:
            with self.step(STEP_BOOT_FILES):
                image["boot_files"] = self.extract_boot_files(image)

    @contextlib.contextmanager
    def step(self, name):
        """Time one step of the check into image.steps (also when it fails or the budget runs out)."""
        self.current, start = name, time.monotonic()
        try:
            yield
        finally:
            self.steps.append({"step": name, "seconds": round(time.monotonic() - start, 3)})

    # ------------------------------------------------------------- filesystems
    def superblock(self, part):
        where = self.where(part)
        if not has_ext_magic(self.read(part["start"], 2048)):
            return None
        try:
            text = self.e2fs("dumpe2fs", ["-h"], part, TEXT_CAP).decode("utf-8", "replace")
            sb = parse_dumpe2fs(text)
        except (ImageError, ParseError) as exc:
            self.error(where, "dumpe2fs -h: %s" % exc)
            return None
        fs = parse_dumpe2fs_identity(text)
        fs.update(superblock=sb, fstype=ext_fstype(sb["features"]))
        return fs

    @staticmethod
    def where(part):
        return "partition %d" % part["number"] if part["number"] is not None else "filesystem"

    def find_root(self, partitions):
        """(root, its /etc/fstab's text, whether that fstab could not be read): the ext filesystem
        holding /etc/fstab whose fstab mounts it at / (else the first that has one, else the only
        ext filesystem, without fstab); (None, None, False) when there is none. A filesystem whose
        fstab cannot be read is recorded in image.unread, whichever is taken as the root."""
        candidates, unread = [], []
        for part in partitions:
            if part["fs"] is None:
                continue
            try:
                text = self.own_fstab(part)
            except Unread:
                unread.append(part)
                continue
            if text is not None:
                candidates.append((part, text))
        for part, text in candidates:
            entries, _unused = parse_fstab(text)
            for entry in entries:
                if entry["mountpoint"] == "/" and self.match(entry["spec"], [part], None) is part:
                    return part, text, False
        if candidates:
            return candidates[0] + (False,)
        ext = [part for part in partitions if part["fs"] is not None]
        if len(ext) == 1:
            if not unread:
                self.error(self.where(ext[0]), "no /etc/fstab: taken as the root filesystem, the only ext2/3/4 one")
            return ext[0], None, bool(unread)
        self.error("image", "no root filesystem: none of the %d ext2/3/4 filesystem(s) has a readable /etc/fstab%s"
                   % (len(ext), " (%d could not be read)" % len(unread) if unread else "")
                   if ext else "no ext2/3/4 filesystem in the image (partitions: %s)"
                   % (", ".join("%s %s" % (p["number"], p["type_name"] or p["type"]) for p in partitions) or "none"))
        return None, None, False

    def own_fstab(self, part):
        """The text of a filesystem's own /etc/fstab (read as if it were the root, its symlinks
        followed inside it), or None when it has none. Raises Unread (recorded) when it is there but
        cannot be read, or has an entry longer than mount(2) takes."""
        data = self.read_path("/etc/fstab", "fstab", FSTAB_CAP, root=part)
        if data is None:
            return None
        text = data.decode("utf-8", "replace")
        too_long = fstab_long_line(text, FSTAB_LINE_CAP)
        if too_long:
            raise self.unread_file("fstab", "/etc/fstab of %s" % self.where(part),
                                   "line %d is %d bytes, over the %d bytes mount(2) takes for an entry's options: "
                                   "not read" % (too_long[0], too_long[1], FSTAB_LINE_CAP))
        return text

    def match(self, spec, partitions, root):
        """The partition an fstab source names, or None."""
        kind, value = fstab_spec_target(spec)
        for part in partitions:
            fs = part["fs"] or {}
            if (kind == "uuid" and fs.get("uuid") == value) or (kind == "label" and fs.get("label") == value) or \
                    (kind == "partuuid" and (part["partuuid"] or "").lower() == value) or \
                    (kind == "partlabel" and part["name"] == value) or \
                    (kind == "number" and part["number"] == value) or \
                    (kind == "disk" and part["number"] is None):
                return part
        return root if kind == "root" else None

    def fstab(self, root, text, table, facts):
        """Mount points -> (partition, fstab entry) for the ext filesystems the image mounts; the
        entries the boot needs that match none go to image.fstab_unresolved (empty without an
        fstab; it stays None when the fstab could not be read: text None and in image.unread)."""
        mounts = {"/": (root, None)}
        if text is None:
            return mounts
        unresolved = facts["image"]["fstab_unresolved"] = []
        entries, problems = parse_fstab(text)
        for problem in problems:
            self.error("fstab", problem)
        for entry in entries:
            if entry["fstype"] in NETFS_TYPES:
                facts["netfs"].append({"mountpoint": entry["mountpoint"], "fstype": entry["fstype"],
                                       "source": entry["spec"], "options": entry["options"]})
                continue
            if fstab_not_audited(entry):
                facts["not_audited"].append({"mountpoint": entry["mountpoint"], "fstype": entry["fstype"],
                                             "source": entry["spec"]})
                continue
            if entry["fstype"] not in EXT4_DRIVER_TYPES + ("auto",):
                continue
            part = self.match(entry["spec"], table["partitions"], root)
            if part is None or part["fs"] is None:
                optional = "nofail" in entry["options"] or "noauto" in entry["options"]
                self.error("fstab", "line %d: %s (%s) matches no ext2/3/4 filesystem in the image%s"
                           % (entry["line"], entry["spec"], entry["mountpoint"],
                              " (nofail or noauto: the boot does not need it)" if optional else ""))
                if not optional:
                    unresolved.append(dict((key, entry[key]) for key in ("line", "spec", "mountpoint", "fstype")))
                continue
            mounts[entry["mountpoint"]] = (part, entry)
        return mounts

    def filesystem(self, mountpoint, part, entry, inferred_for):
        fs = part["fs"]
        options = entry["options"] if entry else []
        tokens = fstab_mount_tokens(options)
        device = entry["spec"] if entry else ("UUID=" + fs["uuid"] if fs["uuid"] else None)
        fstype = entry["fstype"] if entry and entry["fstype"] in EXT4_DRIVER_TYPES else fs["fstype"]
        result = {
            "device": device, "kernel_name": None, "major": None, "minor": None,
            "mountpoint": mountpoint, "fstype": fstype,
            "bind_mounts": [], "mount_options": [], "super_options": tokens,
            "superblock": fs["superblock"], "jbd2": None, "queue": None, "usage": None,  # offline: no statvfs
            "options": infer_options(fs["superblock"], tokens, inferred_for["upstream"], fstype),
            "options_source": "inferred", "options_kernel": inferred_for,
            "fstab": None, "fstab_drift": [],
            "uuid": fs["uuid"], "label": fs["label"], "partition": part["number"],
            "fsck": self.fsck(part),
        }
        if entry:
            result["fstab"] = {"spec": entry["spec"], "fstype": entry["fstype"], "options": entry["options"],
                               "line": entry["line"]}
            # the VFS flags fstab asks for are applied at mount time: only ext4's own options can drift
            result["fstab_drift"] = fstab_drift(options, option_map(result["options"]), set(options) | set(tokens))
        return result

    def fsck(self, part):
        """Whether a filesystem is consistent and was unmounted cleanly: {clean, exit_code (of e2fsck
        -fn, None when it did not run to the end), problems}. e2fsck -n opens the image read-only and
        answers no to every repair, so it runs on the image itself: nothing is written (no copy is
        needed) and the journal is not replayed. It passes a filesystem whose superblock says it
        is not clean or records errors, so those are read from the superblock."""
        if part["start"] in self.fscks:
            return self.fscks[part["start"]]
        sb = part["fs"]["superblock"]
        problems, exit_code = [], None
        if sb["state"] != "clean":
            problems.append("the superblock's state is %r" % sb["state"])
        if sb["error_count"]:
            problems.append("the superblock records %d filesystem error(s)" % sb["error_count"])
        if "needs_recovery" in sb["features"]:
            problems.append("the journal needs recovery: the filesystem was not unmounted cleanly")
        if sb["journal_device"]:
            problems.append("its journal is on another device (%s), not in the image: not checked" % sb["journal_device"])
        else:
            try:
                exit_code, out, err, _unused = self.run([self.tool("e2fsck"), "-f", "-n", self.target(part)], FSCK_KEPT,
                                                        self.params["scan_timeout"], drain=True)
            except ImageError as exc:
                problems.append("e2fsck -fn: %s" % exc)
            else:
                if exit_code != 0:
                    said = [line.strip() for line in (err + "\n" + out.decode("utf-8", "replace")).splitlines()
                            if line.strip() and not BANNER.match(line) and not FSCK_PROGRESS.match(line)]
                    meaning = ("killed by signal %d" % (0 - exit_code) if exit_code < 0 else
                               ", ".join(text for bit, text in FSCK_EXIT_BITS if exit_code & bit) or "unknown")
                    problems.append("e2fsck -fn exited %d (%s): %s" % (
                        exit_code, meaning, " / ".join(line[:200] for line in said[:6]) or "no message"))
        self.fscks[part["start"]] = {"clean": not problems, "exit_code": exit_code, "problems": problems}
        return self.fscks[part["start"]]

    # ------------------------------------------------- files inside the image
    def listing(self, part, directory):
        key = (part["start"], directory)
        if key not in self.listings:
            if not plain_image_path(directory):
                raise ImageError("refused in-image path %r: not plain characters" % directory)
            text = self.debugfs(part, "ls -p " + directory, LISTING_CAP).decode("utf-8", "replace")
            self.listings[key] = parse_debugfs_ls(text)
        return self.listings[key]

    def cat(self, part, inner, entry, cap, head=False):
        """The bytes of a regular file (inner: its resolved path in that filesystem, entry: its
        directory entry): all of them, and a file over cap bytes is an error; or (head) its first cap
        bytes, the rest left unread. The size is checked first, and debugfs' output is capped too."""
        if not plain_image_path(inner):
            raise ImageError("refused in-image path %r: not plain characters" % inner)
        if not stat.S_ISREG(entry["mode"]):
            raise ImageError("not a regular file (%s)" % file_kind(entry["mode"]))
        if not head and entry["size"] > cap:
            raise ImageError("%d bytes, over the %d-byte cap for this file: not read" % (entry["size"], cap))
        return self.debugfs(part, "cat " + inner, cap, head)

    @staticmethod
    def mount_for(path, mounts):
        for mountpoint, (part, _unused) in mounts:
            if path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/"):
                return part, "/" + path[len(mountpoint):].lstrip("/")
        raise ImageError("no filesystem for %s" % path)

    def lookup(self, path, mounts):
        """The directory entry at an image path (its parent already resolved), or None."""
        part, inner = self.mount_for(path, mounts)
        if inner == "/":
            return part, inner, {"mode": stat.S_IFDIR}
        parent, name = inner.rsplit("/", 1)
        for entry in self.listing(part, parent or "/"):
            if entry["name"] == name:
                return part, inner, entry
        return part, inner, None

    def resolve(self, path, mounts=None):
        """Follow symlinks component by component inside the image, as the booted system would:
        absolute targets start at the image's root, '..' stops there, and at most SYMLINK_HOPS links
        are followed (the kernel's limit). mounts: (mount point, (partition, fstab entry)) pairs,
        longest mount point first (default: the image's, from its fstab). Returns (partition, path in
        it, entry) or None when something on the way is missing. Raises ImageError on a refused or
        looping path, and on a directory on the way that cannot be listed."""
        mounts = self.mounts if mounts is None else mounts
        done, todo, hops = "/", [p for p in path.split("/") if p], 0
        while todo:
            part_name = todo.pop(0)
            if part_name == ".":
                continue
            if part_name == "..":
                done = done.rsplit("/", 1)[0] or "/"
                continue
            candidate = done.rstrip("/") + "/" + part_name
            if not plain_image_path(candidate):
                raise ImageError("refused in-image path %r: not plain characters" % candidate)
            part, inner, entry = self.lookup(candidate, mounts)
            if entry is None:
                return None
            if stat.S_ISLNK(entry["mode"]):
                hops += 1
                if hops > SYMLINK_HOPS:
                    raise ImageError("more than %d symlinks resolving %s (a loop?)" % (SYMLINK_HOPS, path))
                target = self.readlink(part, inner)
                if not target or not plain_image_path("/" + target.lstrip("/")):
                    raise ImageError("refused symlink %s -> %r: the target is not plain characters" % (candidate, target))
                todo = [p for p in target.split("/") if p] + todo
                if target.startswith("/"):
                    done = "/"
                continue
            if todo and not stat.S_ISDIR(entry["mode"]):
                return None  # a file where a folder is needed: ENOTDIR, nothing there
            done = candidate
        return self.lookup(done, mounts)

    def readlink(self, part, inner):
        fast = parse_debugfs_fast_link(self.debugfs(part, "stat " + inner).decode("utf-8", "replace"))
        if fast is not None:
            return fast
        # a slow symlink keeps its target in a data block
        return self.debugfs(part, "cat " + inner, LINK_CAP).decode("utf-8", "replace")

    def read_path(self, path, where, cap, head=False, root=None):
        """The bytes of the regular file at an image path (symlinks followed inside the image; see
        cat for cap and head), or None when there is no file there. A file that is there but
        cannot be read (a FIFO or device, a symlink loop, over its cap, a folder on the way that
        cannot be listed) raises Unread, after it is recorded in image.unread and errors: the rules
        that need it are then undetermined and IMAGE_FILE_UNREAD fails the image. root: read as if
        this partition were the image's root (whose fstab is not read yet)."""
        mounts = None if root is None else [("/", (root, None))]
        try:
            found = self.resolve(path, mounts)
            if found is None:
                return None
            return self.cat(found[0], found[1], found[2], cap, head)
        except ImageError as exc:
            raise self.unread_file(where, path if root is None else "%s of %s" % (path, self.where(root)), str(exc))

    def unread_file(self, where, path, reason):
        """Record a file the check needs and could not read (image.unread and errors); the Unread to raise."""
        self.unread.append({"path": path, "reason": reason})
        self.error(where, "%s: %s" % (path, reason))
        return Unread("%s: %s" % (path, reason))

    # ------------------------------------------------------------------ system
    def os_release(self):
        """The image's os-release as a dict, or None when there is none. /usr/lib/os-release is only
        read when /etc/os-release does not exist, as systemd does. Raises Unread (recorded)."""
        for path in ("/etc/os-release", "/usr/lib/os-release"):
            data = self.read_path(path, "os-release", OS_RELEASE_CAP)
            if data is not None:
                return parse_os_release(data.decode("utf-8", "replace"))
        return None

    def identity(self, os_release):
        """image_identity of the image's records; one that cannot be read is left out (recorded in image.unread)."""
        records = []
        for path, parse in (("/etc/image-id", parse_os_release), ("/etc/cloud/build.info", parse_build_info)):
            try:
                data = self.read_path(path, "identity", OS_RELEASE_CAP)
            except Unread:
                data = None
            records.append(parse(data.decode("utf-8", "replace")) if data is not None else None)
        return image_identity(os_release, records[0], records[1], os.path.basename(self.params["image"]))

    def packages(self):
        """The installed versions of BOOT_PACKAGES from the image's dpkg database, or None when it has
        none (an rpm-based image: its database is not read). Raises Unread (recorded)."""
        data = self.read_path(DPKG_STATUS, "packages", DPKG_STATUS_CAP)
        if data is None:
            return None
        return parse_dpkg_status(data.decode("utf-8", "replace"), BOOT_PACKAGES)

    def identify(self, release, version, os_release):
        """identify() of an image's kernel. Without a readable os-release a kernel that looks like
        an upstream one may be a vendor's (SUSE's is told by os-release alone) that backports fixes:
        its vendor is then unknown and the upstream version alone does not decide (the kernel
        rules are undetermined)."""
        info = identify(release, "Linux version " + version, "", os_release or {})
        if self.os_release_unread and info["vendor"] == "mainline":
            info.update(vendor=None, backports=True)
            info["notes"].append("the image's os-release could not be read: whose kernel this is cannot be told, "
                                 "so its upstream version alone does not decide")
        return info

    def kernels(self, image):
        """Every /boot/vmlinuz-* with its version string; the boot kernel as the kernel facts."""
        try:
            boot = self.resolve("/boot")
        except ImageError as exc:
            self.error("kernel", str(exc))
            boot = None
        if boot is None or not stat.S_ISDIR(boot[2]["mode"]):
            self.error("kernel", "the image has no /boot folder")
            return None
        part, inner = boot[0], boot[1]
        names = [entry["name"] for entry in self.listing(part, inner)]
        for name in sorted(names):
            if not name.startswith("vmlinuz-"):
                continue
            path = "/boot/" + name
            try:
                data = self.read_path(path, "kernel", BZIMAGE_HEAD, head=True)
            except Unread:
                continue
            if data is None:
                continue
            try:
                header = parse_bzimage_version(data)
            except ParseError as exc:
                self.error("kernel", "%s: %s" % (path, exc))
                continue
            release = header["release"]
            initrd = [candidate for candidate in ("initrd.img-" + release, "initramfs-%s.img" % release,
                                                  "initrd-" + release) if candidate in names]
            image["kernels"].append({"release": release, "version": header["version"], "path": path,
                                     "initrd": "/boot/" + initrd[0] if initrd else None,
                                     "file_release_matches": name == "vmlinuz-" + release})
        if not image["kernels"]:
            self.error("kernel", "no readable kernel (vmlinuz-*) in /boot")
            return None
        chosen, why = self.boot_kernel(image["kernels"])
        if chosen is None:
            return None
        image["boot_kernel"] = {"release": chosen["release"], "why": why}
        os_release = image["os_release"] or {}
        info = self.identify(chosen["release"], chosen["version"], os_release)
        info.update({
            "proc_version": "Linux version " + chosen["version"],
            "version_signature": None,
            "os_release": os_release_kept(os_release),
            "page_size": 4096,  # x86, the only kernel format read here
            "source": "image",
        })
        for kernel in image["kernels"]:
            found = self.identify(kernel["release"], kernel["version"], os_release)
            kernel.update(vendor=found["vendor"], upstream=found["upstream"])
        return info

    def boot_kernel(self, kernels):
        by_path = dict((kernel["path"], kernel) for kernel in kernels)
        wanted = self.params["boot_kernel"]
        if wanted:
            for kernel in kernels:
                if kernel["release"] == wanted:
                    return kernel, "chosen (boot_kernel)"
            self.error("kernel", "boot_kernel %r is not in the image (found: %s)"
                       % (wanted, ", ".join(k["release"] for k in kernels)))
            return None, None
        for link in ("/vmlinuz", "/boot/vmlinuz"):
            try:
                found = self.resolve(link)
            except ImageError as exc:
                self.error("kernel", str(exc))
                continue
            if found is not None:
                mountpoint = self.mountpoint_of(found[0])
                path = (mountpoint.rstrip("/") + found[1]) if mountpoint else None
                if path in by_path:
                    return by_path[path], "the target of %s" % link
        for cfg in ("/boot/grub/grub.cfg", "/boot/grub2/grub.cfg"):
            try:
                data = self.read_path(cfg, "kernel", TEXT_CAP)
            except Unread:
                continue
            first = parse_grub_first_kernel((data or b"").decode("utf-8", "replace"))
            if first:
                for kernel in kernels:
                    if kernel["path"].rsplit("/", 1)[1] == first.rsplit("/", 1)[-1]:
                        return kernel, "the first entry of %s" % cfg
        return max(kernels, key=lambda k: release_sort_key(k["release"])), \
            "the highest version (no /vmlinuz link or GRUB entry names one)"

    def mountpoint_of(self, part):
        for mountpoint, (mounted, _unused) in self.mounts:
            if mounted is part:
                return mountpoint
        return None

    def extract_boot_files(self, image):
        """Write the boot kernel and its initrd to boot_files_dir for qemu -kernel/-initrd."""
        release = image["boot_kernel"]["release"]
        kernel = [k for k in image["kernels"] if k["release"] == release][0]
        folder = os.path.abspath(self.params["boot_files_dir"])
        if not plain_image_path(folder) or not os.path.isdir(folder):
            self.error("boot files", "boot_files_dir %r must be an existing folder named in plain characters" % folder)
            return None
        if not kernel["initrd"]:
            self.error("boot files", "kernel %s has no initrd in /boot: cannot boot it here" % release)
            return None
        if not image["root"]["uuid"]:
            self.error("boot files", "the root filesystem has no UUID to boot from")
            return None
        written = {}
        for key, path, name in (("kernel", kernel["path"], "vmlinuz"), ("initrd", kernel["initrd"], "initrd.img")):
            dest = os.path.join(folder, name)
            try:
                found = self.resolve(path)
                if found is None or not stat.S_ISREG(found[2]["mode"]):
                    raise ImageError("%s is not a regular file" % path)
                if found[2]["size"] > BOOT_FILE_CAP:
                    raise ImageError("%s is %d bytes, over the %d-byte cap for a boot file" % (
                        path, found[2]["size"], BOOT_FILE_CAP))
                self.debugfs(found[0], "dump %s %s" % (found[1], dest))
                if not os.path.isfile(dest) or os.path.getsize(dest) != found[2]["size"]:
                    raise ImageError("dump of %s wrote %s bytes, expected %d" % (
                        path, os.path.getsize(dest) if os.path.isfile(dest) else "no", found[2]["size"]))
            except ImageError as exc:
                self.error("boot files", str(exc))
                return None
            written[key] = dest
        written.update(root="UUID=" + image["root"]["uuid"], release=release)
        return written


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
