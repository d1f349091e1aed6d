# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The pre-rollout check of a disk image (the ext4_image_facts module's code), read with e2fsprogs
alone and never mounted. Python >= 3.8 standard library only.

- commands: limits, steps, errors, and the commands run on the image (ImageBase)
- opening: the image's format, its raw copy, the partition table, the check's steps (collect)
- filesystems: superblocks, the root and its fstab, e2fsck -fn
- files: paths inside the image, resolved and read with debugfs
- system: os-release, identity, packages, kernels, the boot kernel and its files
- reader: ImageReader, the parts put together
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
