"""The one YAML loader for every file the controller reads from users (waivers, the rule catalog,
the kernel-issue table, the probe's level sets): PyYAML's safe loader without aliases.

An alias (*name) makes one node stand for a copy of another, so a few hundred bytes of nested
aliases (the "billion laughs" shape) expand into more values than memory holds as soon as
anything walks or prints them. None of these files needs one, so an alias is refused where it
is written, with the file and the line: the document is never built.

A file is read by libyaml's C parser (ten times the pure-Python one's speed: the catalog in 15 ms
instead of 150) once a pass over its events has found no alias and no deep nesting. Any other
file, and any file the C loader fails on, is read by the pure-Python Loader below, which refuses
what it must and words the error (with the offending line's text, which C marks lack).
"""

import os
import stat

import yaml

Error = yaml.YAMLError
# The C composer recurses without a limit (it crashes the process at about 100,000 levels); the
# files read here nest a few levels, and the pure-Python loader stops deep nesting with RecursionError.
MAX_FAST_DEPTH = 64


class Loader(yaml.SafeLoader):
    def compose_node(self, parent, index):
        if self.check_event(yaml.AliasEvent):
            event = self.peek_event()
            raise yaml.composer.ComposerError(
                None, None, "found the alias *%s: aliases (and << merges) are not allowed in this file"
                % event.anchor, event.start_mark)
        return super().compose_node(parent, index)


def _plain(handle):
    """Whether the stream parses (C parser) with no alias and nesting at most MAX_FAST_DEPTH deep.
    Events come one at a time, so a refused stream is not read further."""
    depth = 0
    try:
        for event in yaml.parse(handle, Loader=yaml.CSafeLoader):
            if isinstance(event, yaml.CollectionStartEvent):
                depth += 1
                if depth > MAX_FAST_DEPTH:
                    return False
            elif isinstance(event, yaml.CollectionEndEvent):
                depth -= 1
            elif isinstance(event, yaml.AliasEvent):
                return False
    except yaml.YAMLError:
        return False
    return True


def _regular_only(path, flags):
    """An opener: refused (OSError naming the file) unless it is a regular file: a FIFO would block
    the read until someone writes to it, a device never end. O_NONBLOCK: the open itself does not
    wait for a FIFO's writer."""
    fd = os.open(path, flags | os.O_NONBLOCK)
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise OSError("%s: not a regular file (a FIFO, a device or a folder is refused)" % path)
        os.set_blocking(fd, True)
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_regular(path):
    """The file at path opened for reading (its name in every error mark), if a regular file."""
    return open(path, "rb", opener=_regular_only)  # pylint: disable=consider-using-with  # the caller's with


def _read(path, read):
    """read(stream, Loader=...) (yaml.load or yaml.compose) of the file at path, bytes in (PyYAML
    checks the encoding); the stream's name puts the file into every error's mark."""
    with open_regular(path) as handle:
        if _plain(handle):
            handle.seek(0)
            try:
                return read(handle, Loader=yaml.CSafeLoader)
            except yaml.YAMLError:  # the pure-Python loader raises it again, worded as always
                pass
        handle.seek(0)
        return read(handle, Loader=Loader)


def load(path):
    """The document in the file at path. Raises OSError, Error, and ValueError/RecursionError for
    a timestamp that is no date or absurd nesting."""
    return _read(path, yaml.load)


def compose(path):
    """The file's node tree (line numbers of its entries), with the same refusals as load."""
    return _read(path, yaml.compose)
