# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""ImageReader: the image check's parts (one per file of this package) put together."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from .files import ImageFiles
from .filesystems import ImageFilesystems
from .opening import ImageOpening
from .system import ImageSystem


class ImageReader(ImageOpening, ImageFilesystems, ImageFiles, ImageSystem):
    """Reads one image (collect()); every failure is recorded in self.errors instead of raised."""
