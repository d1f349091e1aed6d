# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""python -m ...ext4_probe: the probe's command line (job.py), as its payload's own __main__ runs it."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import sys

from .job import main

if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
