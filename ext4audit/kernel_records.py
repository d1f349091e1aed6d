"""Which ext4 and jbd2 fixes a host's kernel still lacks, by the kernel CNA's own records.

The data is rules/kernel_cna_records.json, made by tools/kernel_records.py from the CNA's
`vulns` repository (its header says which fields mean what). A host's kernel is judged by its
upstream version (module_utils/kernel_version.identify): exactly for kernels that carry an
upstream stable version (mainline, Debian, Amazon, Ubuntu with /proc/version_signature), and as
an advisory for kernels that do not (RHEL, Alibaba and SUSE backport fixes under their own
release numbers; Ubuntu without version_signature): these are judged by their upstream base and
every item says why it is only advisory.
"""

import json
import os
import re
from typing import Callable, Optional

from . import contract
from .parsers import ext4_parsers, kernel_version

DATA_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rules", "kernel_cna_records.json")
MAX_DATA_BYTES = 16 << 20  # 157 records take some 110 KiB
SINCE_THE_START = "since the start"
LINK = "https://nvd.nist.gov/vuln/detail/%s"
_LEAD = re.compile(r"^(\d+)\.(\d+)")


class RecordsError(ValueError):
    """The data file cannot be used; the message names the file and the field."""


def load(path=DATA_FILE):
    """The data file as a dict, decoded through contract.KernelRecords, then checked: every
    release the matching compares must parse and sit in its branch."""
    try:
        with open(path, "rb") as handle:
            data = handle.read(MAX_DATA_BYTES + 1)
    except OSError as exc:
        raise RecordsError("cannot read %s: %s" % (path, exc))
    if len(data) > MAX_DATA_BYTES:
        raise RecordsError("%s: larger than %d bytes" % (path, MAX_DATA_BYTES))
    try:
        doc = json.loads(data.decode("utf-8"))
        contract.check(doc, contract.KernelRecords, path)
    except contract.ContractError as exc:
        raise RecordsError(str(exc))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordsError("%s: not JSON: %s" % (path, exc))
    for index, record in enumerate(doc["records"]):
        _check(record, "%s: records[%d]" % (path, index), doc["classes"])
    return doc


def _check(record, where, classes):
    if record["class"] not in classes:
        raise RecordsError("%s.class %r is not one of %s" % (where, record["class"], classes))
    if record["needs"] is not None and record["needs"] not in RELEVANCE:
        raise RecordsError("%s.needs %r is not one of %s" % (where, record["needs"], ", ".join(sorted(RELEVANCE))))
    releases = [("introduced", record["introduced"]), ("fixed_mainline", record["fixed_mainline"])]
    for field in ("backported_into", "fixed"):
        for branch, release in record[field].items():
            if _series(release) != branch:
                raise RecordsError("%s.%s[%s]: %r is not in that branch" % (where, field, branch, release))
            releases.append(("%s[%s]" % (field, branch), release))
    for field, release in releases:
        if release is not None and not (field == "introduced" and release == SINCE_THE_START):
            try:
                kernel_version.compare_upstream(release, "0")
            except ValueError as exc:
                raise RecordsError("%s.%s: %s" % (where, field, exc))
    if record["introduced"] is None and not record["backported_into"]:
        raise RecordsError("%s: neither introduced nor backported_into says where the bug is" % where)


def _series(version):
    """"6.1" of "6.1.75", "6.1", "6.1.0-rc3"; None for anything else."""
    match = _LEAD.match(version) if isinstance(version, str) else None
    return "%s.%s" % match.groups() if match else None


def _before(a, b):
    return kernel_version.compare_upstream(a, b) < 0


def judge(record, version):
    """Does a kernel of this upstream version lack the record's fix?

    Returns None (not affected) or (fixed_in, reason, rc_note): the first fixed release of the
    kernel's stable branch (None when the branch has no fix), why, and a note when the kernel is
    a release candidate of the release that brought or fixed the bug (the CNA records releases,
    not rcs, so such a kernel may or may not have it).
    """
    branch = _series(version)
    is_rc = "-rc" in version
    introduced = record["backported_into"].get(branch) or record["introduced"]
    if introduced is None:
        return None  # no mainline release carried it, nor a release of this branch
    if introduced != SINCE_THE_START and _before(version, introduced):
        if is_rc and introduced == branch:  # a mainline x.y, not a stable x.y.z
            return (None, "introduced in %s; host runs %s" % (introduced, version),
                    "the bug came in during the %s release candidates; which rc is not recorded"
                    % branch)
        return None
    fixed_in, mainline = record["fixed"].get(branch), record["fixed_mainline"]
    if fixed_in is not None:
        return None if not _before(version, fixed_in) else (
            fixed_in, "fixed in %s; host runs %s" % (fixed_in, version), None)
    if mainline is not None and not _before(version, mainline):
        return None
    rc_note = None
    if is_rc and mainline == branch:
        rc_note = "the fix landed during the %s release candidates; which rc is not recorded" % branch
    mainline_text = "; fixed in %s" % mainline if mainline else ""
    return None, "no fix in this branch (%s)%s; host runs %s" % (branch, mainline_text, version), rc_note


def _judged_version(kernel):
    """(upstream version to judge, advisory reason or None), or None when nothing can be said."""
    upstream = kernel.get("upstream")
    vendor = kernel.get("vendor") or "unknown"
    if upstream and not kernel.get("backports"):
        return upstream, None
    if upstream:
        return upstream, ("%s kernel %s backports fixes under its own release numbers; judged"
                          " by its upstream base %s" % (vendor, kernel.get("release"), upstream))
    series = _series(kernel.get("release"))
    if series is None:
        return None
    return series + ".0", ("upstream version of %s kernel %s unknown (%s); judged by the %s"
                           " series' first release" % (vendor, kernel.get("release"),
                                                       "; ".join(kernel.get("notes") or []) or "no note",
                                                       series))


def open_records(doc, kernel):
    """The records whose fix has not reached this kernel, in the data file's order.

    doc: load()'s result; kernel: identify()'s result. Each item: id, title, class, fixed_in
    (first fixed release of the kernel's branch, or None), fixed_mainline, reason, advisory
    (True when the kernel's upstream version is not exact, or for an rc at a boundary), link.
    None when the kernel's version cannot be told at all (unrecognised release string).
    """
    judged = _judged_version(kernel or {})
    if judged is None:
        return None
    version, advisory = judged
    items = []
    for record in doc["records"]:
        verdict = judge(record, version)
        if verdict is None:
            continue
        fixed_in, reason, rc_note = verdict
        notes = [note for note in (advisory, rc_note) if note]
        if notes:
            reason = "advisory (%s): %s" % ("; ".join(notes), reason.replace("host runs", "judged as"))
        items.append({
            "id": record["id"], "title": record["title"], "class": record["class"],
            "fixed_in": fixed_in, "fixed_mainline": record["fixed_mainline"], "reason": reason,
            "advisory": bool(notes), "link": LINK % record["id"], "needs": needed_feature(record),
        })
    return items


# The features a record may need (its `needs`, reviewed record by record in
# rules/kernel_record_classes.yml): feature -> in_use(fs), whether one ext4 filesystem (its facts:
# the superblock as dumpe2fs prints it, features by the names dumpe2fs gives them, and the mount
# options in effect) uses it. Only called for a filesystem whose superblock was read.
_QUOTA_OPTIONS = ("quota", "usrquota", "grpquota", "prjquota", "usrjquota", "grpjquota")
_DAX_ON = (True, "always", "inode")  # dax (the old spelling of dax=always), dax=always, dax=inode


def _has(feature: str) -> Callable[[dict], bool]:
    return lambda fs: feature in (fs["superblock"].get("features") or ())


def _options(fs: dict) -> dict:
    return ext4_parsers.option_map(fs.get("options") or ())


def _quota_in_use(fs: dict) -> bool:
    features = set(fs["superblock"].get("features") or ())
    return bool({"quota", "project"} & features) or any(_options(fs).get(name) for name in _QUOTA_OPTIONS)


def _encrypt_in_use(fs: dict) -> bool:
    # inlinecrypt alone reaches fscrypt's I/O path (CVE-2022-50277 needs no encrypt feature).
    options = _options(fs)
    return _has("encrypt")(fs) or bool(options.get("inlinecrypt")) or "test_dummy_encryption" in options


def _dax_in_use(fs: dict) -> bool:
    # Without a dax option, files with the DAX attribute use DAX on a DAX-capable (pmem) device.
    dax = _options(fs).get("dax")
    if dax is None:
        disk = (fs.get("queue") or {}).get("device") or os.path.basename(fs.get("device") or "")
        return disk.startswith("pmem")
    return dax in _DAX_ON


def _mb_optimize_scan_in_use(fs: dict) -> bool:
    # The kernel prints mb_optimize_scan only when it differs from its group-count default.
    option = _options(fs).get("mb_optimize_scan")
    if option is not None:
        return option == "1"
    return ext4_parsers.default_mb_optimize_scan(fs["superblock"]) is not False


RELEVANCE = {
    "fast_commit": _has("fast_commit"), "inline_data": _has("inline_data"), "quota": _quota_in_use,
    "encrypt": _encrypt_in_use, "casefold": _has("casefold"), "verity": _has("verity"),
    "bigalloc": _has("bigalloc"), "ea_inode": _has("ea_inode"), "mmp": _has("mmp"),
    "orphan_file": _has("orphan_file"), "dax": _dax_in_use, "mb_optimize_scan": _mb_optimize_scan_in_use,
}


def needed_feature(record: dict) -> Optional[str]:
    """The feature (RELEVANCE) a record matters with, as reviewed, or None: every ext4 filesystem
    (also for a record built without the field, as the kernel gate's tests do)."""
    return record.get("needs")


class FeaturesInUse(dict):
    """{feature: whether an ext4 filesystem of the host uses it} for RELEVANCE's features, each
    looked at when first asked. A filesystem whose superblock was not read might use any."""

    def __init__(self, filesystems):
        dict.__init__(self)
        self.filesystems = filesystems

    def __missing__(self, feature):
        in_use = RELEVANCE[feature]
        self[feature] = used = any(not fs.get("superblock") or in_use(fs) for fs in self.filesystems)
        return used


def set_aside(item, in_use):
    """Why a record (an open_records item) does not matter on a host (in_use: its FeaturesInUse),
    or None when it does."""
    feature = item["needs"]
    if feature is None or in_use[feature]:
        return None
    return "%s is not enabled on any ext4 filesystem of the host" % feature


def describe(items):
    """One line for a finding's message: each record's id and where its fix is. Its title and
    link are in the finding's evidence (kernel_records), not here: with them, a finding's message
    was some 1 KiB, written again in every format of every host."""
    return "; ".join("%s (%s)" % (item["id"], _fixed_text(item)) for item in items)


def _fixed_text(item):
    if item["fixed_in"]:
        return "first fixed in %s" % item["fixed_in"]
    return "no fix in this branch" + (", mainline %s" % item["fixed_mainline"] if item["fixed_mainline"] else "")
