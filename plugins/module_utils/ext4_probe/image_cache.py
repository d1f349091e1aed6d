# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Pristine scratch images, built once per setting and kept (checked) in the scratch directory's cache.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import hashlib
import json
import os
import stat
import subprocess
import sys
from typing import TYPE_CHECKING, Any, Dict, List, Optional, Tuple

from .base import DIRECTORY, now
from .layouts import fragment
from .loops import Mounted
from .replica import build_options, content_digest, mkfs_argv, run_tool
from .scratch_dir import remove_tree

if TYPE_CHECKING:
    from .scratch_dir import Scratch


CACHE_FORMAT = 1  # what a cache entry is; raise it when that changes
CACHE_RECORD_MAX = 64 * 1024  # an entry's record is a few hundred bytes


def build_environment() -> dict:
    """What shapes a pristine image besides its own settings: the kernel whose allocator
    fragments it, the mke2fs that makes it, and this code (hole sizes, mkfs arguments)."""
    uname = os.uname()
    # the probe runs as a program of its own on the host: no module there, no run_command
    # pylint: disable-next=ansible-bad-function
    mke2fs = subprocess.run(["mke2fs", "-V"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=30,
                            env=dict(os.environ, LC_ALL="C"), universal_newlines=True, check=False)
    return {"format": CACHE_FORMAT, "kernel": [uname.release, uname.version, uname.machine],
            "mke2fs": mke2fs.stdout.strip()[:200], "probe": code_digest()}


def code_digest() -> str:
    """sha256 of the probe's modules as this process loaded them (from the payload's zip or from a
    checkout: their loader reads either), each under its name within the package."""
    package = __name__.rsplit(".", 1)[0]
    digest = hashlib.sha256()
    for name in sorted(n for n in sys.modules if n == package or n.startswith(package + ".")):
        module = sys.modules[name]
        digest.update(b"%s\n" % name[len(package):].encode())
        digest.update(module.__loader__.get_data(module.__file__))  # type: ignore[union-attr]  # a file loader or a zipimporter: both have get_data
    return digest.hexdigest()


class Images:
    """Pristine images, one per (DiskSize, UsedRatio, FreeSpaceLayout, mkfs settings), in the
    scratch directory's cache/ (kept across runs with keep_cache).

    An entry is named by the digest of everything that shapes it (its settings, the build's
    mount options, build_environment()), and holds the image (NAME.img) and its record
    (NAME.json: those inputs, the image's content digest, its free-space layout). It is used
    only after it checks out, once per run: a regular file of root's with mode 0600 and one
    link, of the size asked for, with the inputs and the content recorded when it was built.
    Anything else there is removed (by descriptor, inside the probe's own directory) and
    rebuilt, and `rejected` says why. The checked image stays open; the runs copy it through
    that descriptor, so what was checked is what they copy."""

    def __init__(self, scratch: "Scratch", mkfs: Dict[str, Any], options: List[str]) -> None:
        self.scratch, self.mkfs, self.options = scratch, mkfs, options
        self.cache_fd = os.open("cache", DIRECTORY, dir_fd=scratch.fd)
        self.environment = build_environment()
        self.held = {}  # type: Dict[str, int]  # entry name -> the checked image's open descriptor
        self.layouts, self.rejected = {}, []  # type: Dict[str, Any], List[str]
        self.built, self.reused, self.seconds = 0, 0, 0.0

    def get(self, disk_size: int, used_ratio: float, layout: int, mkfs: Optional[Dict[str, Any]] = None) -> str:
        mkfs = mkfs or self.mkfs
        options = build_options(self.options)
        inputs = dict(self.environment, disk_size=disk_size, used_ratio=used_ratio, layout=layout, mkfs=mkfs,
                      options=options)
        name = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()[:32]
        if name not in self.held:
            start = now()
            fd, record = self._checked(name, inputs)
            if fd is None:
                fd, record = self._build(name, inputs, disk_size, used_ratio, layout, mkfs, options)
                self.built += 1
            else:
                self.reused += 1
            self.held[name] = fd
            if record["layout"]:
                self.layouts["%d/%g/%d" % (disk_size, used_ratio, layout)] = record["layout"]
            self.seconds += now() - start
        return "/proc/%d/fd/%d" % (os.getpid(), self.held[name])

    def _checked(self, name: str, inputs: Dict[str, Any]) -> Tuple[Optional[int], Any]:
        """(open image, its record) if the entry is there and checks out, else (None, None)."""
        try:
            fd = os.open(name + ".img", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.cache_fd)
        except FileNotFoundError:
            self._remove(name)  # a record without its image
            return None, None
        except OSError as exc:  # ELOOP: a symbolic link
            self._reject(name, "cannot be opened without following a link (%s)" % exc.strerror)
            return None, None
        try:
            record, why = self._record(name), self._foreign(fd, inputs["disk_size"])
            if not why and (record is None or record.get("inputs") != inputs):
                why = "its record is missing or names other build inputs"
            if not why and record.get("digest") != content_digest(fd):
                why = "its content is not what was built (the digest recorded at build time differs)"
        except BaseException:
            os.close(fd)
            raise
        if why:
            os.close(fd)
            self._reject(name, why)
            return None, None
        return fd, record

    @staticmethod
    def _foreign(fd: int, size: Optional[int]) -> Optional[str]:
        """Why an open cache file is not one the probe made, or None."""
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return "not a regular file"
        if st.st_uid != 0 or stat.S_IMODE(st.st_mode) != 0o600 or st.st_nlink != 1:
            return "owned by uid %d with mode %04o and %d links (the probe makes its own as root, 0600, one link)" % (
                st.st_uid, stat.S_IMODE(st.st_mode), st.st_nlink)
        if size is not None and st.st_size != size:
            return "%d bytes, not %d" % (st.st_size, size)
        return None

    def _record(self, name: str) -> Any:
        try:
            fd = os.open(name + ".json", os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, dir_fd=self.cache_fd)
        except OSError:
            return None
        try:
            if self._foreign(fd, None):
                return None
            text = os.read(fd, CACHE_RECORD_MAX + 1)
        finally:
            os.close(fd)
        try:
            record = json.loads(text.decode("utf-8")) if len(text) <= CACHE_RECORD_MAX else None
        except ValueError:
            return None
        return record if isinstance(record, dict) else None

    def _reject(self, name: str, why: str) -> None:
        self.rejected.append("cache/%s.img: %s; rebuilt" % (name, why))
        self._remove(name)

    def _remove(self, name: str) -> None:
        for suffix in (".img", ".json", ".img.new", ".json.new"):
            remove_tree(self.cache_fd, name + suffix)

    def _build(self, name: str, inputs: Dict[str, Any], disk_size: int, used_ratio: float, layout: int,
               mkfs: Dict[str, Any], options: List[str]) -> Tuple[int, Dict[str, Any]]:
        self._remove(name)
        fd = os.open(name + ".img.new", os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600,
                     dir_fd=self.cache_fd)
        try:
            os.fchmod(fd, 0o600)  # whatever the umask
            os.ftruncate(fd, disk_size)
            run_tool(mkfs_argv(mkfs, disk_size, self.scratch.path("cache", name + ".img.new")), "mke2fs")
            record = {"inputs": inputs, "layout": None}  # type: Dict[str, Any]
            if used_ratio or layout != 6:
                with Mounted(self.scratch.path("cache", name + ".img.new"), self.scratch.path("mnt", "build"),
                             options) as mnt:
                    if used_ratio:
                        placeholder = os.open(os.path.join(mnt.target, "placeholder"),
                                              os.O_CREAT | os.O_WRONLY | os.O_CLOEXEC, 0o600)
                        try:
                            os.posix_fallocate(placeholder, 0, int(disk_size * used_ratio) // mkfs["block_size"]
                                               * mkfs["block_size"])
                        finally:
                            os.close(placeholder)
                    if layout != 6:
                        record["layout"] = fragment(mnt.target, layout, mkfs["block_size"])
            record["digest"] = content_digest(fd)
            text = json.dumps(record, sort_keys=True).encode()
            out = os.open(name + ".json.new", os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC,
                          0o600, dir_fd=self.cache_fd)
            try:
                os.fchmod(out, 0o600)
                os.write(out, text)
            finally:
                os.close(out)
            # the record first: an image in place always has one (a killed build leaves .new files)
            os.rename(name + ".json.new", name + ".json", src_dir_fd=self.cache_fd, dst_dir_fd=self.cache_fd)
            os.rename(name + ".img.new", name + ".img", src_dir_fd=self.cache_fd, dst_dir_fd=self.cache_fd)
        except BaseException:
            os.close(fd)
            raise
        self.scratch.check_cap()
        return fd, record

    def prune(self) -> None:
        """Remove the entries this run did not use (other settings, another kernel or code):
        the cache holds what the last run needed, no more."""
        kept = set(name + suffix for name in self.held for suffix in (".img", ".json"))
        for entry in os.listdir(self.cache_fd):
            if entry not in kept:
                remove_tree(self.cache_fd, entry)

    def close(self) -> None:
        for fd in list(self.held.values()) + [self.cache_fd]:
            os.close(fd)
        self.held = {}
