# -*- coding: utf-8 -*-
"""The run folder on the controller: how it is claimed and opened, how its records are named, and
how much one host may send. Stdlib only, Python >= 3.8: the run folder's action
(plugins/action/ext4_audit_run_folder.py) imports it from the collection and the report step
(ext4audit/) through ext4audit/parsers, so both sides follow the same rules.

Folders: a reports folder, and every folder above it, belongs to root or to the user running the
audit; the folders above may be writable by others only when sticky (/tmp), the reports folder and
its run folders not at all: another user who can rename or replace what they hold could swap a run
folder (or its summary.json) for one of their own, or plant a symbolic link that makes the run
write elsewhere. Every folder is opened from / one component at a time without following a
symbolic link, and checked as it is opened; the run folder is made with mkdir (never one that
exists: two runs with the same id cannot share it).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import errno
import hashlib
import json
import math
import os
import re
import stat
from typing import Any, List, NoReturn, Optional, Tuple

DIRECTORY = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
SUBFOLDERS = ("facts", "probe")
FOLDER_MODE = 0o755
PLAY_HOSTS = "play-hosts.json"  # the hosts of the facts play: each must end in the summary

# What one host may send: past any of these its answer is not recorded, and the host is failed
# with the bound it broke (docs/reports.md, "Bounds"). A real host sends a few KiB per filesystem.
ANSWER_MAX_BYTES = 16 * 1024 * 1024  # a facts record as written (JSON)
ANSWER_MAX_ITEMS = 4096  # in any one list or mapping (filesystems, options, errors...)
ANSWER_MAX_STRING = 64 * 1024  # characters in any one string (a key or a value)
ANSWER_MAX_DEPTH = 16  # levels of nesting (a facts answer has 5)
ANSWER_MAX_VALUES = 1000000  # values in all

# A run id is one folder name: no path, nothing hidden, not the `latest` link.
RUN_ID = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9._+@:=-]{0,127}$")
# A record's file name: the host name where it is plain, cut short, and a hash of the whole name.
_PLAIN = re.compile(r"[^A-Za-z0-9._-]")
NAME_KEPT = 64


class FolderError(Exception):
    """A folder the run must not use; the message names it and says why."""


def record_name(host: str) -> str:
    """facts/<name>.json (and probe/) for a host: its name with other characters as _, at most 64
    of them, never starting with a dot, then a hash of the whole name. Any host name, of any length
    or shape, gives a plain file name; the record holds the exact name."""
    plain = _PLAIN.sub("_", host)[:NAME_KEPT]
    if plain.startswith("."):
        plain = "_" + plain[1:]
    digest = hashlib.sha1(host.encode("utf-8", "surrogatepass")).hexdigest()[:8]
    return "%s-%s.json" % (plain, digest)


def answer_problem(value: Any) -> Optional[str]:
    """Why a host's answer (decoded JSON) breaks a bound, or None. Stops at the first bound broken,
    without walking the rest: a list of 100,000 filesystems costs nothing to refuse."""
    values = 0
    stack = [(value, 1)]  # type: List[Tuple[Any, int]]
    while stack:
        item, depth = stack.pop()
        values += 1
        if values > ANSWER_MAX_VALUES:
            return "more than %d values in all" % ANSWER_MAX_VALUES
        if isinstance(item, str):
            if len(item) > ANSWER_MAX_STRING:
                return "a string of %d characters (at most %d)" % (len(item), ANSWER_MAX_STRING)
            try:
                item.encode("utf-8")
            except UnicodeEncodeError:
                return "text that is not Unicode (a lone surrogate such as \\udc80)"
        elif isinstance(item, float) and not math.isfinite(item):
            return "a number that is not finite (%r)" % item
        elif isinstance(item, (list, tuple, dict)):
            if depth > ANSWER_MAX_DEPTH:
                return "nesting deeper than %d levels" % ANSWER_MAX_DEPTH
            if len(item) > ANSWER_MAX_ITEMS:
                return "a %s of %d items (at most %d)" % ("mapping" if isinstance(item, dict) else "list",
                                                          len(item), ANSWER_MAX_ITEMS)
            children = list(item.keys()) + list(item.values()) if isinstance(item, dict) else item
            stack.extend((child, depth + 1) for child in children)
    return None


# Where a JSON text can hold a lone surrogate at all: only as a \\uD800-\\uDFFF escape (raw bytes
# that are not UTF-8 fail to decode). An escaped backslash before "uD8.." matches too: that only
# sends the text the slow way.
_SURROGATE_ESCAPE = re.compile(rb"\\u[dD][89a-fA-F]")


def _not_finite(text: str) -> NoReturn:
    raise ValueError("a number that is not finite (%r)" % float(text))  # answer_problem's words


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):  # 1e999 reads as inf
        _not_finite(text)
    return number


def decode_answer(data: bytes) -> Tuple[Any, Optional[str]]:
    """A facts record file's bytes decoded, and why it breaks a bound (or None): the same answer as
    answer_problem on json.loads(data), about ten times faster on a typical record. What a text
    cannot hold, given its size and its escapes, is not checked value by value: a string over
    ANSWER_MAX_STRING characters needs that many bytes, a lone surrogate a \\uD8xx escape, and
    ANSWER_MAX_VALUES values twice as many bytes; only the containers' lengths and depth are always
    walked. ValueError (or RecursionError) when data is not JSON."""
    try:
        value = json.loads(data, parse_constant=_not_finite, parse_float=_finite_float)
    except ValueError as exc:
        if str(exc).startswith("a number that is not finite"):
            return None, str(exc)
        raise
    if len(data) > min(ANSWER_MAX_STRING, 2 * ANSWER_MAX_VALUES) or _SURROGATE_ESCAPE.search(data):
        return value, answer_problem(value)
    stack = [(value, 1)] if isinstance(value, (dict, list)) else []  # type: List[Tuple[Any, int]]
    while stack:
        item, depth = stack.pop()
        if depth > ANSWER_MAX_DEPTH:
            return value, "nesting deeper than %d levels" % ANSWER_MAX_DEPTH
        if len(item) > ANSWER_MAX_ITEMS:
            return value, "a %s of %d items (at most %d)" % ("mapping" if isinstance(item, dict) else "list",
                                                             len(item), ANSWER_MAX_ITEMS)
        for child in (item.values() if isinstance(item, dict) else item):
            if isinstance(child, (dict, list)):
                stack.append((child, depth + 1))
    return value, None


def record_text(record: Any) -> Optional[str]:
    """A facts record as its file holds it (indented JSON, keys sorted), and None when it is over
    ANSWER_MAX_BYTES."""
    text = json.dumps(record, indent=2, sort_keys=True, ensure_ascii=False, allow_nan=False) + "\n"
    return text if len(text.encode("utf-8")) <= ANSWER_MAX_BYTES else None


def _check(st: os.stat_result, path: str, private: bool) -> None:
    """A folder on the way to a run folder: root's or this user's; writable by nobody else
    (private), or only with the sticky bit (then nobody else can rename what is in it)."""
    if st.st_uid not in (0, os.geteuid()):
        raise FolderError("%s belongs to uid %d, not to root or this user (uid %d): that user could swap "
                          "what it holds" % (path, st.st_uid, os.geteuid()))
    if st.st_mode & 0o022 and (private or not st.st_mode & stat.S_ISVTX):
        raise FolderError("%s can be written by other users (mode %04o)%s: they could swap the run's files "
                          "for their own" % (path, stat.S_IMODE(st.st_mode), "" if private else " and is not sticky"))


def _open_in(dir_fd: int, name: str, path: str) -> int:
    try:
        return os.open(name, DIRECTORY, dir_fd=dir_fd)
    except NotADirectoryError:
        pass
    st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    if stat.S_ISLNK(st.st_mode):
        raise FolderError("%s is a symbolic link (to %s): a run folder's path never goes through one"
                          % (path, os.readlink(name, dir_fd=dir_fd)))
    raise FolderError("%s is not a folder" % path)


def open_folder(path: str, private: int = 1, create: bool = False) -> int:
    """path opened as a folder from / one component at a time, never following a symbolic link,
    each folder checked (_check): the last `private` ones may be written by no other user.
    create: make the missing folders (mode 0755). Returns the descriptor; FolderError or OSError."""
    if not os.path.isabs(path):
        path = os.path.abspath(path)
    parts = [p for p in path.split("/") if p]
    if ".." in parts or "." in parts:
        raise FolderError("%s: a folder's path may not hold . or .. (give it plainly)" % path)
    fd, where = os.open("/", DIRECTORY), "/"
    try:
        _check(os.fstat(fd), where, private > len(parts))
        for number, name in enumerate(parts):
            where = os.path.join(where, name)
            try:
                inner = _open_in(fd, name, where)
            except FileNotFoundError:
                if not create:
                    raise
                try:
                    os.mkdir(name, FOLDER_MODE, dir_fd=fd)
                except FileExistsError:
                    pass
                inner = _open_in(fd, name, where)
            os.close(fd)
            fd = inner
            _check(os.fstat(fd), where, number >= len(parts) - private)
        return fd
    except BaseException:
        os.close(fd)
        raise


def claim(reports_dir: str, run_id: Any) -> str:
    """Make the run folder reports_dir/run_id with facts/ and probe/ and return its path: the
    reports folder is opened and checked (open_folder, made if missing), the run folder made with
    mkdir, never taken when it exists (FolderError)."""
    if not isinstance(run_id, str) or not RUN_ID.match(run_id) or run_id == "latest":
        raise FolderError("run id %r is not a plain folder name: letters, digits and _ . + @ : = -, at most 128, "
                          "not starting with a dot or a dash, not `latest`" % (run_id,))
    fd = open_folder(reports_dir, create=True)
    path = os.path.join(reports_dir, run_id)
    try:
        try:
            os.mkdir(run_id, FOLDER_MODE, dir_fd=fd)
        except FileExistsError:
            raise FolderError("%s exists already; pick another run id (reports are never overwritten, and two "
                              "runs never share a folder)" % path)
        run_fd = _open_in(fd, run_id, path)
        try:
            os.fchmod(run_fd, FOLDER_MODE)  # not the umask's: another user must never write here
            for sub in SUBFOLDERS:
                os.mkdir(sub, FOLDER_MODE, dir_fd=run_fd)
        finally:
            os.close(run_fd)
    finally:
        os.close(fd)
    return path


def write_file(dir_fd: int, name: str, text: str, mode: int = 0o644) -> None:
    """dir_fd/name written under a temporary name, flushed and renamed into place; nothing is
    followed (O_NOFOLLOW, O_EXCL) and a killed run never leaves half a file."""
    tmp = ".tmp-%s-%s" % (os.urandom(6).hex(), name)
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode, dir_fd=dir_fd)
    try:
        try:
            os.fchmod(fd, mode)
            data = text.encode("utf-8")
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, name, src_dir_fd=dir_fd, dst_dir_fd=dir_fd)
    except BaseException:
        try:
            os.unlink(tmp, dir_fd=dir_fd)
        except OSError as exc:
            if exc.errno != errno.ENOENT:
                raise
        raise
