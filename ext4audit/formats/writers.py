"""Report writers: one per report file of a run folder, registered in FORMATS.

summary.json and hosts/<host>.json are not writers: they are the run's contract and always
written (reports.finish_run, fleet.run_shard). A writer makes one more file, in two steps:

  host(report, digest)           for each host, in the report step's workers: the host's part
                                 of the file as text ("" or None: nothing), or None throughout
                                 for a file made from the fleet summary alone
  shard_end()                    after a shard's last host, in its worker: one more part (for a
                                 writer that gathers what the shard's hosts share), or None
  finish(out, summary, digests, parts)
                                 once, in the parent: write the whole file to `out`, a text
                                 file that gets the writer's name in the run folder when this
                                 returns (reports.atomic_file); parts is the hosts' parts in
                                 run order (Parts), digests every host's reports.digest

A writer is made once per process with the run's Job (fleet.Job: catalog, policy, run folder,
host count...). Adding a format is a module with a Writer class and its line in FORMATS.
"""

import glob
import importlib
import os
import shutil

# name (as ext4_audit_formats and `ext4audit report --formats` take it) -> module of this
# package with its Writer. The files are written in this order, report.html last: it is the
# biggest and test_report_atomic kills the step once it is on disk. Modules are imported when
# a run uses them (prometheus_client is needed by the report step only).
FORMATS = {
    "junit": "junit",
    "markdown": "markdown",
    "sarif": "sarif",
    "prometheus": "prometheus",
    "tap": "tap",
    "html": "html",
}
ALL = "all"
# A shard's first host has an index that is a multiple of this (fleet.report_hosts), so a writer
# may cut its output into blocks of this many hosts that are the same whatever the number of
# workers (report.html's details chunks).
SHARD_ALIGN = 250
BLOCK = 1 << 20  # bytes copied at a time when the parts are joined


class FormatError(ValueError):
    """An unknown format name."""


def names(text):
    """The formats of `text`, a comma-separated list of FORMATS names or `all`, in FORMATS order.
    An unknown name is a FormatError naming it and the known ones."""
    given = [name.strip() for name in text.split(",") if name.strip()]
    unknown = [name for name in given if name != ALL and name not in FORMATS]
    if unknown:
        raise FormatError("unknown report format %s: the formats are %s, or %s (summary.json and hosts/ are always "
                          "written)" % (", ".join(repr(name) for name in unknown), ", ".join(FORMATS), ALL))
    return list(FORMATS) if ALL in given else [name for name in FORMATS if name in given]


def replace_all(text, pairs):
    """text with each (old, new) of pairs replaced, in order: the escaping of the text formats.
    str.replace runs in C; str.translate with a table looks up every character in Python (it
    was most of junit.xml's time on long finding messages)."""
    for old, new in pairs:
        text = text.replace(old, new)
    return text


def writer_class(name):
    return importlib.import_module("." + FORMATS[name], __package__).Writer


class Writer:
    """The base of every writer (see the module's docstring)."""

    file = None  # its file in the run folder
    separator = ""  # between two hosts' parts

    def __init__(self, job):
        self.job = job

    def host(self, report, digest):
        return None

    def shard_end(self):
        return None

    def finish(self, out, summary, digests, parts):
        raise NotImplementedError


class Parts:
    """One writer's host parts as the report step's shards left them: a part file per shard, in
    shard order, parts within a file already separated."""

    def __init__(self, staging, name, separator):
        self.staging, self.name, self.separator = staging, name, separator

    def path(self, shard):
        return os.path.join(self.staging, "%s.%05d" % (self.name, shard))

    def paths(self):
        """The shards' non-empty part files, in shard order."""
        return [path for path in sorted(glob.glob(os.path.join(self.staging, self.name + ".*")))
                if os.path.getsize(path)]

    def copy_to(self, out):
        """Append the parts to the text file `out`, in the kernel where it can (copy_file_range:
        280 MB at 10,000 hosts without a trip through Python's str)."""
        for number, path in enumerate(self.paths()):
            out.write(self.separator if number else "")
            out.flush()  # what `out` buffered goes first; the copy then appends at the file's offset
            with open(path, "rb") as source:
                size = os.fstat(source.fileno()).st_size
                copy = getattr(os, "copy_file_range", None)
                try:
                    while copy is not None and size > 0:
                        copied = copy(source.fileno(), out.fileno(), size)
                        if copied == 0:
                            break
                        size -= copied
                except OSError:  # not on this filesystem or kernel: the offsets stand where it stopped
                    copy = None
                if size > 0 or copy is None:
                    shutil.copyfileobj(source, out.buffer, BLOCK)
                    out.buffer.flush()


class GroupsWriter(Writer):
    """A writer built on the groups: each host goes into self.groups (made by the subclass), a
    shard's part is its groups (dump, one line), and finish merges the parts (merge_parts)."""

    separator = "\n"
    groups = None  # a finding_groups.FindingGroups, made in the subclass's __init__

    def host(self, report: dict, digest: dict) -> None:
        self.groups.add_host(report)
        return None

    def shard_end(self) -> "str | None":
        return self.groups.dump() if self.groups.groups else None
