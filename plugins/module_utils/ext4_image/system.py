# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The system in the image: os-release, identity, boot packages, its kernels, the one it boots and
its boot files.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import os
import stat

from ..ext4_parsers.common import ParseError
from ..ext4_parsers.disk_image import parse_bzimage_version, plain_image_path
from ..ext4_parsers.os_files import (
    image_identity, parse_build_info, parse_dpkg_status, parse_grub_first_kernel, parse_os_release,
    release_sort_key,
)
from ..kernel_version import identify
from .commands import (
    BOOT_FILE_CAP, BOOT_PACKAGES, BZIMAGE_HEAD, DPKG_STATUS, DPKG_STATUS_CAP, ImageBase, ImageError, OS_RELEASE_CAP,
    TEXT_CAP, Unread,
)


class ImageSystem(ImageBase):
    """What the image's system is and which kernel it boots."""

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
            "os_release": self.os_release_subset(os_release),
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
