# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Parsers for the places where a host keeps the truth about its ext4 filesystems.

Stdlib only, Python >= 3.8: shipped to targets inside the modules (and with the probe), imported
by the controller and the tests as-is. Every parser takes text and returns plain data; anything
it cannot read is raised as ``ParseError`` with the line that broke it, never a bare traceback.

- common: schema ids, the probe's confirmation names, filesystem type lists, ParseError
- mounts: mountinfo, /proc/fs/ext4/<dev>/options, option tokens as the kernel reads them
- fstab: /etc/fstab entries, their sources and their drift from the options in effect
- superblock: dumpe2fs -h, jbd2 statistics, superblock options, the volume under a filesystem
- kernel_defaults: the options the kernel infers where the options file cannot be read
- disk_image: MBR/GPT partition tables, bzImage versions, debugfs listings
- os_files: os-release, image identity, dpkg status, grub.cfg, kernel release order
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
