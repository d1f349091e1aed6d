# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Files inside the image, read with debugfs: listings, symlinks followed as the booted system
would, capped reads, and what could not be read.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import stat

from ..ext4_parsers.disk_image import parse_debugfs_fast_link, parse_debugfs_ls, plain_image_path
from .commands import ImageBase, ImageError, LINK_CAP, LISTING_CAP, SYMLINK_HOPS, Unread, file_kind


class ImageFiles(ImageBase):
    """Paths inside the image, resolved and read."""

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
