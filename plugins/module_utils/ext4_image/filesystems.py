# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The image's filesystems: superblocks, the root and its fstab, the mounts it makes, e2fsck -fn.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

from ..ext4_parsers.common import EXT4_DRIVER_TYPES, NETFS_TYPES, ParseError
from ..ext4_parsers.disk_image import has_ext_magic
from ..ext4_parsers.fstab import (
    fstab_drift, fstab_long_line, fstab_mount_tokens, fstab_not_audited, fstab_spec_target, parse_fstab,
)
from ..ext4_parsers.kernel_defaults import infer_options
from ..ext4_parsers.mounts import option_map
from ..ext4_parsers.superblock import ext_fstype, parse_dumpe2fs, parse_dumpe2fs_identity
from .commands import (
    BANNER, FSCK_EXIT_BITS, FSCK_KEPT, FSCK_PROGRESS, FSTAB_CAP, FSTAB_LINE_CAP, ImageBase, ImageError, TEXT_CAP,
    Unread,
)


class ImageFilesystems(ImageBase):
    """The filesystems of the image and how its fstab mounts them."""

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
