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
  - Reads a raw or qcow2 disk image (a machine image before rollout) and returns the same facts as
    M(ext4audit.fleet.ext4_facts) does for a running host, so the same rules apply to it.
  - Reads the MBR or GPT partition table (or a bare filesystem), C(dumpe2fs -h) of every ext2/3/4
    filesystem, the root filesystem's C(/etc/fstab) (sources matched by UUID=, LABEL=, PARTUUID=,
    PARTLABEL=, device name or partition number), C(/etc/os-release) and the kernels in C(/boot)
    (a separate C(/boot) partition or a folder of root). Each kernel's release and version string
    come from its bzImage setup header, so the kernel rules work offline.
  - The effective mount options are inferred from the kernel defaults, the superblock and the fstab
    options (C(options_source=inferred)), as M(ext4audit.fleet.ext4_facts) does on kernels without
    C(/proc/fs/ext4/<dev>/options).
  - Nothing is mounted and no loop device is attached, so the image never reaches the controller
    kernel's ext4 code; C(dumpe2fs) and C(debugfs) (read-only) open the file at each partition's
    offset (C(file?offset=N)). In-image paths, symlink targets included, are followed inside the
    image only and refused unless they are plain characters (they go into debugfs requests).
  - A qcow2 image is converted to a temporary raw copy with C(qemu-img) (removed afterwards); one
    with a backing or external data file is refused, since it would read other files.
  - Never fails on a bad image; what cannot be read becomes an entry in C(errors).
options:
  image:
    description: The image file, raw or qcow2.
    type: path
    required: true
  format:
    description: The image format; C(auto) tells raw and qcow2 apart by the qcow2 magic number.
    type: str
    choices: [auto, raw, qcow2]
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
    description: Folder for the temporary raw copy of a qcow2 image (default, the system's).
    type: path
attributes:
  check_mode:
    support: full
    description: Runs under check mode and returns the same result.
  diff_mode:
    support: none
    description: Changes nothing, so there is no diff.
notes:
  - Needs e2fsprogs (and qemu-utils for qcow2) on the host that runs it, usually the controller.
  - Partition tables are read with 512-byte sectors (and 4096 for GPT); LVM and md sources in fstab
    are not followed and are listed in C(errors).
  - Only x86 bzImage kernels are read; the page size is taken as 4096 (x86).
author:
  - ext4 fleet audit maintainers (@ext4audit)
"""

EXAMPLES = r"""
- name: Inspect an image offline
  ext4_image_facts:
    image: /var/lib/images/web-2026-11.qcow2
  register: image

- name: Inspect and extract its kernel and initrd to boot it
  ext4_image_facts:
    image: /var/lib/images/web-2026-11.raw
    boot_files_dir: /var/tmp/precheck
"""

RETURN = r"""
ext4_image_facts:
  description: The facts (schema ext4-fleet-audit/facts/v1, as ext4_facts) plus C(image).
  returned: always
  type: dict
  contains:
    kernel:
      description: The boot kernel as ext4_facts describes a running one (null when none was found).
      type: dict
    filesystems:
      description: The ext2/3/4 filesystems the image mounts (root and its fstab entries), with uuid, label and partition.
      type: list
    netfs:
      description: Network filesystems in the image's fstab.
      type: list
    errors:
      description: What could not be read, with the reason (where, reason).
      type: list
    image:
      description: path, format, size, partition_table, disk_id, partitions, root, os_release, kernels,
        boot_kernel (release and why), boot_files (kernel, initrd, root, release; null unless extracted).
      type: dict
"""

import os
import re
import shutil
import stat
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers import (
    EXT4_DRIVER_TYPES, NETFS_TYPES, ParseError, ext_fstype, fstab_drift, fstab_mount_tokens, fstab_spec_target,
    has_ext_magic, infer_options, option_map, parse_bzimage_version, parse_debugfs_fast_link, parse_debugfs_ls,
    parse_dumpe2fs, parse_dumpe2fs_identity, parse_fstab, parse_grub_first_kernel, parse_os_release,
    parse_partition_table, plain_image_path, release_sort_key,
)
from ansible_collections.ext4audit.fleet.plugins.module_utils.kernel_version import identify

QCOW2_MAGIC = b"QFI\xfb"
ENV = {"LC_ALL": "C", "LANG": "C"}
BANNER = re.compile(r"^(debugfs|dumpe2fs) \d+\.\d+")
BZIMAGE_HEAD = 64 * 1024  # the setup header and the version string it points at sit in the first sectors


class ImageError(Exception):
    """The image (or a part of it) cannot be read; the message says why."""


class ImageReader:
    """Reads one image; every failure is recorded in self.errors instead of raised."""

    def __init__(self, module):
        self.module = module
        self.params = module.params
        self.errors = []
        self.raw = None
        self.listings = {}
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

    # ---------------------------------------------------------------- e2fsprogs
    def e2fs(self, name, args, part, binary=False):
        """Run dumpe2fs or debugfs on the filesystem at a partition's offset. e2fsprogs' unix I/O
        manager reads 'file?offset=N'; debugfs opens read-only without -w and exits 0 on failed
        requests, so anything on stderr but its banner is the error."""
        target = self.raw if not part["start"] else "%s?offset=%d" % (self.raw, part["start"])
        # expand_user_and_vars=False: a '$' or '~' in a path or request is data, never expanded
        rc, out, err = self.module.run_command([self.tool(name)] + args + [target], environ_update=ENV,
                                               encoding=None if binary else "utf-8",
                                               errors="surrogate_then_replace", expand_user_and_vars=False)
        if isinstance(err, bytes):
            err = err.decode("utf-8", "replace")
        problems = [line for line in err.splitlines() if line.strip() and not BANNER.match(line)]
        if rc != 0 or problems:
            raise ImageError("%s failed (rc=%d): %s" % (name, rc, " ".join(problems)[:300] or "no message"))
        return out

    def debugfs(self, part, request, binary=False):
        return self.e2fs("debugfs", ["-R", request], part, binary)

    # ------------------------------------------------------------ the whole image
    def collect(self):
        facts = {"schema": "ext4-fleet-audit/facts/v1", "kernel": None, "filesystems": [], "netfs": [],
                 "errors": self.errors,
                 "image": {"path": self.params["image"], "format": None, "size": None, "partition_table": None,
                           "disk_id": None, "partitions": [], "root": None, "os_release": None, "kernels": [],
                           "boot_kernel": None, "boot_files": None}}
        workdir = None
        try:
            path = os.path.abspath(self.params["image"])
            facts["image"]["format"] = self.check_image(path)
            if facts["image"]["format"] == "qcow2":
                workdir = tempfile.mkdtemp(prefix="ext4-image-", dir=self.params["tmp_dir"])
                self.raw = self.qcow2_to_raw(path, workdir)
            else:
                self.raw = path
            if "?" in self.raw:
                raise ImageError("path %r holds '?', which e2fsprogs reads as the start of I/O options" % self.raw)
            self.read_image(facts)
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
                               "backports": False, "notes": ["no kernel could be read from the image"],
                               "proc_version": None, "version_signature": None,
                               "os_release": self.os_release_subset(os_release), "page_size": 4096, "source": "image"}
        return facts

    @staticmethod
    def os_release_subset(os_release):
        return dict((k, os_release[k]) for k in ("ID", "ID_LIKE", "VERSION_ID", "PRETTY_NAME") if k in os_release)

    def check_image(self, path):
        """The format, after refusing what is not a readable regular image file."""
        try:
            st = os.stat(path)
            if not stat.S_ISREG(st.st_mode):
                raise ImageError("%s is not a regular file" % path)
            with open(path, "rb") as handle:
                magic = handle.read(4)
        except (IOError, OSError) as exc:
            raise ImageError("cannot read %s: %s" % (path, exc.strerror or exc))
        if st.st_size == 0:
            raise ImageError("%s is empty" % path)
        found = "qcow2" if magic == QCOW2_MAGIC else "raw"
        wanted = self.params["format"]
        if wanted != "auto" and wanted != found:
            raise ImageError("%s was given as %s but is %s (qcow2 magic %s)" % (path, wanted, found,
                             "present" if found == "qcow2" else "absent"))
        return found

    def qcow2_to_raw(self, path, workdir):
        """A sparse raw copy of a qcow2 image, after checking it reads no other file."""
        qemu_img = self.tool("qemu-img")
        rc, out, err = self.module.run_command([qemu_img, "info", "-f", "qcow2", "--output=json", path],
                                               environ_update=ENV, expand_user_and_vars=False)
        if rc != 0:
            raise ImageError("qemu-img info failed (rc=%d): %s" % (rc, err.strip()[:300]))
        try:
            info = self.module.from_json(out)
        except ValueError:
            raise ImageError("qemu-img info printed no JSON: %r" % out[:200])
        data_file = ((info.get("format-specific") or {}).get("data") or {}).get("data-file")
        if info.get("backing-filename") or info.get("full-backing-filename") or data_file:
            raise ImageError("qcow2 image refers to another file (%s): refused, it would be read too; "
                             "convert it to a standalone image first (qemu-img convert)"
                             % (info.get("backing-filename") or data_file))
        vfs = os.statvfs(workdir)
        needed = int(info.get("actual-size") or 0)
        if vfs.f_bavail * vfs.f_frsize < needed:
            raise ImageError("%s has %d MiB free, the raw copy of this image needs about %d MiB"
                             % (workdir, vfs.f_bavail * vfs.f_frsize // 1048576, needed // 1048576))
        raw = os.path.join(workdir, "image.raw")
        rc, out, err = self.module.run_command([qemu_img, "convert", "-f", "qcow2", "-O", "raw", path, raw],
                                               environ_update=ENV, expand_user_and_vars=False)
        if rc != 0:
            raise ImageError("qemu-img convert failed (rc=%d): %s" % (rc, err.strip()[:300]))
        return raw

    def read(self, offset, length):
        with open(self.raw, "rb") as handle:
            handle.seek(offset)
            return handle.read(length)

    def read_image(self, facts):
        image = facts["image"]
        image["size"] = os.path.getsize(self.raw)
        try:
            table = parse_partition_table(self.read, image["size"])
        except ParseError as exc:
            raise ImageError(str(exc))
        image.update(partition_table=table["table"], disk_id=table["disk_id"], partitions=table["partitions"])
        for part in table["partitions"]:
            part["fs"] = self.superblock(part)
        root = self.find_root(table["partitions"])
        if root is None:
            return
        image["root"] = {"partition": root["number"], "uuid": root["fs"]["uuid"], "label": root["fs"]["label"]}
        mounts = self.fstab(root, table, facts)
        self.mounts = sorted(mounts.items(), key=lambda item: -len(item[0]))  # longest mount point first
        for mountpoint, (part, entry) in sorted(mounts.items()):
            facts["filesystems"].append(self.filesystem(mountpoint, part, entry))
        image["os_release"] = self.os_release()
        try:
            facts["kernel"] = self.kernels(image)
        except ImageError as exc:
            self.error("kernel", str(exc))
        if self.params["boot_files_dir"] and image["boot_kernel"]:
            image["boot_files"] = self.extract_boot_files(image)

    # ------------------------------------------------------------- filesystems
    def superblock(self, part):
        where = self.where(part)
        if not has_ext_magic(self.read(part["start"], 2048)):
            return None
        try:
            text = self.e2fs("dumpe2fs", ["-h"], part)
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
        """The ext filesystem holding /etc/fstab whose fstab mounts it at / (else the first that has one)."""
        candidates = []
        for part in partitions:
            if part["fs"] is None:
                continue
            try:
                names = [entry["name"] for entry in self.listing(part, "/etc")]
            except ImageError:
                names = []
            if "fstab" in names:
                candidates.append(part)
        for part in candidates:
            text = self.cat(part, "/etc/fstab")
            entries, _ = parse_fstab(text or "")
            for entry in entries:
                if entry["mountpoint"] == "/" and self.match(entry["spec"], [part], None) is part:
                    return part
        if candidates:
            return candidates[0]
        ext = [part for part in partitions if part["fs"] is not None]
        if len(ext) == 1:
            self.error(self.where(ext[0]), "no /etc/fstab: taken as the root filesystem, the only ext2/3/4 one")
            return ext[0]
        self.error("image", "no root filesystem: none of the %d ext2/3/4 filesystem(s) has /etc/fstab" % len(ext)
                   if ext else "no ext2/3/4 filesystem in the image (partitions: %s)"
                   % (", ".join("%s %s" % (p["number"], p["type_name"] or p["type"]) for p in partitions) or "none"))
        return None

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

    def fstab(self, root, table, facts):
        """Mount points -> (partition, fstab entry) for the ext filesystems the image mounts."""
        mounts = {"/": (root, None)}
        text = self.cat(root, "/etc/fstab", where="fstab")
        if text is None:
            return mounts
        entries, problems = parse_fstab(text)
        for problem in problems:
            self.error("fstab", problem)
        for entry in entries:
            if entry["fstype"] in NETFS_TYPES:
                facts["netfs"].append({"mountpoint": entry["mountpoint"], "fstype": entry["fstype"],
                                       "source": entry["spec"], "options": entry["options"]})
                continue
            if entry["fstype"] not in EXT4_DRIVER_TYPES + ("auto",):
                continue
            part = self.match(entry["spec"], table["partitions"], root)
            if part is None or part["fs"] is None:
                self.error("fstab", "line %d: %s (%s) matches no ext2/3/4 filesystem in the image"
                           % (entry["line"], entry["spec"], entry["mountpoint"]))
                continue
            mounts[entry["mountpoint"]] = (part, entry)
        return mounts

    def filesystem(self, mountpoint, part, entry):
        fs = part["fs"]
        options = entry["options"] if entry else []
        tokens = fstab_mount_tokens(options)
        device = entry["spec"] if entry else ("UUID=" + fs["uuid"] if fs["uuid"] else None)
        result = {
            "device": device, "kernel_name": None, "major": None, "minor": None,
            "mountpoint": mountpoint,
            "fstype": entry["fstype"] if entry and entry["fstype"] in EXT4_DRIVER_TYPES else fs["fstype"],
            "bind_mounts": [], "mount_options": [], "super_options": tokens,
            "superblock": fs["superblock"], "jbd2": None, "queue": None,
            "options": infer_options(fs["superblock"], tokens), "options_source": "inferred",
            "fstab": None, "fstab_drift": [],
            "uuid": fs["uuid"], "label": fs["label"], "partition": part["number"],
        }
        if entry:
            result["fstab"] = {"spec": entry["spec"], "fstype": entry["fstype"], "options": entry["options"],
                               "line": entry["line"]}
            # the VFS flags fstab asks for are applied at mount time: only ext4's own options can drift
            result["fstab_drift"] = fstab_drift(options, option_map(result["options"]), set(options) | set(tokens))
        return result

    # ------------------------------------------------- files inside the image
    def listing(self, part, directory):
        key = (part["start"], directory)
        if key not in self.listings:
            if not plain_image_path(directory):
                raise ImageError("refused in-image path %r: not plain characters" % directory)
            self.listings[key] = parse_debugfs_ls(self.debugfs(part, "ls -p " + directory))
        return self.listings[key]

    def cat(self, part, inner, binary=False, where="image"):
        """A file's content (inner: a resolved path in that filesystem), or None with an error."""
        try:
            if not plain_image_path(inner):
                raise ImageError("refused in-image path %r: not plain characters" % inner)
            return self.debugfs(part, "cat " + inner, binary)
        except ImageError as exc:
            self.error(where, "%s: %s" % (inner, exc))
            return None

    def mount_for(self, path):
        for mountpoint, (part, _) in self.mounts:
            if path == mountpoint or path.startswith(mountpoint.rstrip("/") + "/"):
                return part, "/" + path[len(mountpoint):].lstrip("/")
        raise ImageError("no filesystem for %s" % path)

    def lookup(self, path):
        """The directory entry at an image path (its parent already resolved), or None."""
        part, inner = self.mount_for(path)
        if inner == "/":
            return part, inner, {"mode": stat.S_IFDIR}
        parent, name = inner.rsplit("/", 1)
        for entry in self.listing(part, parent or "/"):
            if entry["name"] == name:
                return part, inner, entry
        return part, inner, None

    def resolve(self, path):
        """Follow symlinks component by component inside the image: absolute targets start at the
        image's root and '..' stops there. Returns (partition, path in it, entry) or None when
        something on the way is missing. Raises ImageError on a refused or looping path."""
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
            part, inner, entry = self.lookup(candidate)
            if entry is None:
                return None
            if stat.S_ISLNK(entry["mode"]):
                hops += 1
                if hops > 40:
                    raise ImageError("too many symlinks resolving %s" % path)
                target = self.readlink(part, inner)
                if not target or not plain_image_path("/" + target.lstrip("/")):
                    raise ImageError("refused symlink %s -> %r: the target is not plain characters" % (candidate, target))
                todo = [p for p in target.split("/") if p] + todo
                if target.startswith("/"):
                    done = "/"
                continue
            done = candidate
        part, inner, entry = self.lookup(done)
        return part, inner, entry

    def readlink(self, part, inner):
        fast = parse_debugfs_fast_link(self.debugfs(part, "stat " + inner))
        if fast is not None:
            return fast
        return self.debugfs(part, "cat " + inner)  # a slow symlink keeps its target in a data block

    def read_path(self, path, where, binary=False):
        """The content of a regular file at an image path (symlinks followed), or None with an error."""
        try:
            found = self.resolve(path)
        except ImageError as exc:
            self.error(where, str(exc))
            return None
        if found is None or not stat.S_ISREG(found[2]["mode"]):
            return None
        return self.cat(found[0], found[1], binary, where)

    # ------------------------------------------------------------------ system
    def os_release(self):
        for path in ("/etc/os-release", "/usr/lib/os-release"):
            text = self.read_path(path, "os-release")
            if text is not None:
                return parse_os_release(text)
        return None

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
            data = self.read_path(path, "kernel", binary=True)
            if data is None:
                continue
            try:
                header = parse_bzimage_version(data[:BZIMAGE_HEAD])
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
        proc_version = "Linux version " + chosen["version"]
        info = identify(chosen["release"], proc_version, "", os_release)
        info.update({
            "proc_version": proc_version,
            "version_signature": None,
            "os_release": self.os_release_subset(os_release),
            "page_size": 4096,  # x86, the only kernel format read here
            "source": "image",
        })
        for kernel in image["kernels"]:
            kernel.update(dict((k, v) for k, v in identify(kernel["release"], "Linux version " + kernel["version"],
                                                           "", os_release).items() if k in ("vendor", "upstream")))
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
            text = self.read_path(cfg, "kernel")
            first = parse_grub_first_kernel(text or "")
            if first:
                for kernel in kernels:
                    if kernel["path"].rsplit("/", 1)[1] == first.rsplit("/", 1)[-1]:
                        return kernel, "the first entry of %s" % cfg
        return max(kernels, key=lambda k: release_sort_key(k["release"])), \
            "the highest version (no /vmlinuz link or GRUB entry names one)"

    def mountpoint_of(self, part):
        for mountpoint, (mounted, _) in self.mounts:
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
            format=dict(type="str", default="auto", choices=["auto", "raw", "qcow2"]),
            boot_kernel=dict(type="str", default=""),
            boot_files_dir=dict(type="path"),
            tmp_dir=dict(type="path"),
        ),
        supports_check_mode=True,
    )
    module.exit_json(changed=False, ext4_image_facts=ImageReader(module).collect())


if __name__ == "__main__":
    main()
