# -*- coding: utf-8 -*-
# Copyright: ext4audit contributors
# GNU General Public License v3.0+ (see COPYING or https://www.gnu.org/licenses/gpl-3.0.txt)
"""Work folders a process makes in a shared temporary directory, and the removal of those that a
killed process left behind: `ext4audit run`'s private folder, and ext4_image_facts' folder for the
raw copy of a qcow2 image (as large as the image's virtual disk).

A folder is claimed by a pid file written in it; the sweep removes only folders with the given
prefix that are real folders (not symlinks) of this user, mode 0700, whose pid file names a
process that no longer exists. Everything is looked at relative to a descriptor of the parent, so
a name swapped for a symlink meanwhile is not followed. Python >= 3.8 standard library only.
"""

from __future__ import absolute_import, division, print_function

import errno
import os
import shutil
import stat
from typing import List, Optional

__metaclass__ = type

PID_FILE = "pid"
PID_MAX_BYTES = 32


def claim(path: str) -> None:
    """Write this process's pid into the folder it just made (mkdtemp: mode 0700)."""
    fd = os.open(os.path.join(path, PID_FILE), os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o600)
    try:
        os.write(fd, ("%d\n" % os.getpid()).encode())
    finally:
        os.close(fd)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except OSError as exc:
        return exc.errno == errno.EPERM  # someone else's process: alive
    return True


def _stale_pid(parent_fd: int, name: str) -> Optional[int]:
    """The dead pid that claims the folder parent/name, or None when it is not ours to remove."""
    st = os.lstat(name, dir_fd=parent_fd)
    if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.getuid() or stat.S_IMODE(st.st_mode) != 0o700:
        return None
    folder_fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=parent_fd)
    try:
        fd = os.open(PID_FILE, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK, dir_fd=folder_fd)
        try:
            pid_st = os.fstat(fd)
            if not stat.S_ISREG(pid_st.st_mode) or pid_st.st_uid != os.getuid():
                return None
            pid = int(os.read(fd, PID_MAX_BYTES))
        finally:
            os.close(fd)
    finally:
        os.close(folder_fd)
    return pid if pid > 0 and not _alive(pid) else None


def sweep(parent: str, prefix: str) -> List[str]:
    """Remove the folders under parent named prefix* that killed processes of this user left;
    return their paths. Anything else is left alone, and an error on one folder skips it."""
    removed = []  # type: List[str]
    try:
        parent_fd = os.open(parent, os.O_RDONLY | os.O_DIRECTORY)
    except OSError:
        return removed
    try:
        for name in os.listdir(parent_fd):
            if not name.startswith(prefix):
                continue
            try:
                if _stale_pid(parent_fd, name) is None:
                    continue
            except (OSError, ValueError):
                continue  # not ours, or no readable pid (a folder of an older version): left alone
            path = os.path.join(parent, name)
            # rmtree works on descriptors here (shutil.rmtree.avoids_symlink_attacks on Linux): it
            # checks the folder it opens is the one it looked at, and never follows a symlink in it
            shutil.rmtree(path, ignore_errors=True)
            removed.append(path)
    finally:
        os.close(parent_fd)
    return removed
