# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Opening an image: its format, a raw copy where qemu-img must make one, the partition table and
the steps of the whole check in order.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import shutil
import stat
import tempfile

from ..disk_formats import FormatError, QEMU_DRIVERS
from ..disk_formats import identify as identify_format
from ..ext4_parsers.common import FACTS_SCHEMA, ParseError
from ..ext4_parsers.disk_image import parse_partition_table
from ..kernel_version import options_kernel
from ..own_folders import claim
from .commands import (
    ImageBase, ImageError, MIB, OutOfTime, STEPS, STEP_BOOT_FILES, STEP_COPY, STEP_FSCK, STEP_ROOT, STEP_SYSTEM,
    STEP_TABLE, TEXT_CAP, Unread, WORK_PREFIX,
)


class ImageOpening(ImageBase):
    """The whole image: collect() runs the check's steps."""

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
                               "os_release": self.os_release_subset(os_release), "page_size": 4096, "source": "image"}
        return facts

    @staticmethod
    def os_release_subset(os_release):
        return dict((k, os_release[k]) for k in ("ID", "ID_LIKE", "VERSION_ID", "PRETTY_NAME") if k in os_release)

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
