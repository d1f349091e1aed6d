# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The probe as it travels to a host: one zip file that Python runs as a program
(`python3 -I -S -B ext4_probe.pyz run JOB.json OUT.json`), holding the probe's package and the
parsers it imports, both read from this folder. Built on the controller by the ext4_probe_run
action; the same bytes for the same sources (fixed dates and modes), so a payload says by its
digest which code it is. Python >= 3.8 standard library only.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import io
import os
import zipfile

HERE = os.path.dirname(os.path.abspath(__file__))
PACKAGE = "module_utils"  # the payload's top package: the probe's relative imports reach the parsers in it
PACKAGES = ("ext4_probe", "ext4_parsers")
NAME = "ext4_probe.pyz"  # what ext4_probe_run writes it as
# -I puts the zip itself (not its folder) first on sys.path: the packages are found inside it.
MAIN = "import sys\nfrom %s.ext4_probe.job import main\nraise SystemExit(main(sys.argv[1:]))\n" % PACKAGE


def build(source: str = HERE) -> bytes:
    """The payload's bytes: its __main__, then every .py file of PACKAGES under `source`."""
    files = [("__main__.py", MAIN.encode("utf-8")), (PACKAGE + "/__init__.py", b"")]
    for package in PACKAGES:
        for name in sorted(os.listdir(os.path.join(source, package))):
            if name.endswith(".py"):
                with open(os.path.join(source, package, name), "rb") as handle:
                    files.append(("%s/%s/%s" % (PACKAGE, package, name), handle.read()))
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as archive:
        for name, data in files:
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.external_attr = 0o644 << 16
            info.compress_type = zipfile.ZIP_DEFLATED
            archive.writestr(info, data)
    return out.getvalue()


def write(folder: str) -> str:
    """The payload written as NAME into folder (tests and benchmarks run it so); returns its path."""
    path = os.path.join(folder, NAME)
    with open(path, "wb") as handle:
        handle.write(build())
    return path
