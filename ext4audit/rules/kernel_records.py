"""Which ext4 and jbd2 fixes a host's kernel still lacks, by the kernel CNA's own records, and
what the host's owner can do about each.

The data is rules/kernel_cna_records.json, made by tools/kernel_records.py from the CNA's
`vulns` repository (its header says which fields mean what), and rules/kernel_branches.yml, a
reviewed table of the upstream branches that ended and of the vendors' advisory pages. A host's
kernel is judged by its upstream version (module_utils/kernel_version.identify): exactly for
kernels that carry an upstream stable version (mainline, Debian, Amazon, Ubuntu with
/proc/version_signature), and as an advisory for kernels that do not (RHEL, Alibaba and SUSE
backport fixes under their own release numbers; Ubuntu without version_signature).

Each open record gets one of three ACTIONS, what fixes it:
- upgrade: a later release of the host's own stable branch has the fix;
- no_fix_in_branch: the branch has no fix (a newer branch has);
- advisory: the version cannot tell (a vendor that backports under its own numbers, a vendor
  kernel on a branch upstream ended, a release candidate at a boundary): the vendor's advisories can.
"""

import functools
import json
import os
import re
from typing import Callable, Dict, List, Optional, Tuple

from ext4audit import severity_rank
from ext4audit.model import contract, safe_yaml
from ext4audit.rules import RULES_DIR
from ext4audit.parsers import kernel_version
from ext4audit.parsers.ext4_parsers.kernel_defaults import default_mb_optimize_scan
from ext4audit.parsers.ext4_parsers.mounts import option_map

DATA_FILE = os.path.join(RULES_DIR, "kernel_cna_records.json")
BRANCHES_FILE = os.path.join(os.path.dirname(DATA_FILE), "kernel_branches.yml")
ACTIONS = ("upgrade", "no_fix_in_branch", "advisory")
# The severity a record's class stands for (the worst one decides an action's severity): data
# written wrong or lost is high; a crash, an oops from a memory-safety bug, medium (availability and
# what was not yet committed); a hang (visible, needs a narrow interleaving) or a leak, low; the rest
# (wrong error codes, warnings without a known effect) info.
CLASS_SEVERITY = {"data corruption": "high", "crash/BUG": "medium", "memory safety": "medium",
                  "hang/deadlock": "low", "leak": "low", "other": "info"}
MAX_DATA_BYTES = 16 << 20  # 157 records take some 110 KiB
SINCE_THE_START = "since the start"
LINK = "https://nvd.nist.gov/vuln/detail/%s"
_LEAD = re.compile(r"^(\d+)\.(\d+)")


class RecordsError(ValueError):
    """The data file cannot be used; the message names the file and the field."""


def load(path: str = DATA_FILE, branches_path: str = BRANCHES_FILE) -> dict:
    """The data file as a dict, decoded through contract.KernelRecords, then checked: every
    release the matching compares must parse and sit in its branch. Its "branches" key holds
    load_branches(branches_path)'s result."""
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
    unknown = sorted(set(doc["classes"]) - set(CLASS_SEVERITY))
    if unknown:
        raise RecordsError("%s: classes %s have no severity in kernel_records.CLASS_SEVERITY" % (path, unknown))
    doc["branches"] = load_branches(branches_path)
    doc["last_seen"] = _last_seen(doc["records"])
    return doc


def _last_seen(records: List[dict]) -> Dict[str, str]:
    """{branch: the newest release any record names in it}: how far the data follows each branch."""
    newest = {}
    for record in records:
        for branch, release in list(record["fixed"].items()) + list(record["backported_into"].items()):
            if branch not in newest or _before(newest[branch], release):
                newest[branch] = release
    return newest


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


def load_branches(path: str = BRANCHES_FILE) -> dict:
    """rules/kernel_branches.yml decoded through contract.KernelBranches and checked (a branch is
    x.y, its last release sits in it, a vendor is one kernel_version knows), as
    {"ended": {branch: last release}, "longterm": [maintained longterm branches, oldest first],
    "vendors": {vendor: {name, advisories, keeps_ended_branches}}}."""
    try:
        doc = safe_yaml.load(path)
        contract.check(doc, contract.KernelBranches, path)
    except OSError as exc:
        raise RecordsError("cannot read %s: %s" % (path, exc))
    except (safe_yaml.Error, ValueError, RecursionError) as exc:  # (ContractError is a ValueError)
        raise RecordsError("%s: %s" % (path, exc))
    ended, longterm = {}, []
    for index, entry in enumerate(doc["branches"]):
        where = "%s: branches[%d]" % (path, index)
        branch = entry["branch"]
        if not re.match(r"^\d+\.\d+$", branch) or branch in ended or branch in longterm:
            raise RecordsError("%s.branch %r is not a branch like 6.1, or is listed twice" % (where, branch))
        if entry.get("ended") is not None:
            if _series(entry["ended"]) != branch:
                raise RecordsError("%s.ended %r is not a release of %s" % (where, entry["ended"], branch))
            ended[branch] = entry["ended"]
        elif entry.get("longterm"):
            longterm.append(branch)
    for vendor in doc["vendors"]:
        if vendor not in kernel_version.VENDORS:
            raise RecordsError("%s: vendors.%s is not one of %s" % (path, vendor, ", ".join(kernel_version.VENDORS)))
    longterm.sort(key=_branch_key)
    return {"ended": ended, "longterm": longterm, "vendors": doc["vendors"]}


def _branch_key(branch: str) -> Tuple[int, int]:
    major, minor = branch.split(".")
    return int(major), int(minor)


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


def ended_branch(doc: dict, kernel: dict) -> Optional[str]:
    """Why a branch-less record is only advisory on this kernel, or None: the kernel's upstream
    branch ended, and its vendor keeps maintaining kernels on it (rules/kernel_branches.yml)."""
    branch = _series(kernel.get("upstream"))
    last = doc["branches"]["ended"].get(branch)
    vendor = doc["branches"]["vendors"].get(kernel.get("vendor")) or {}
    if last is None or not vendor.get("keeps_ended_branches"):
        return None
    return "upstream %s.y ended at %s; %s backports fixes to its %s kernels" % (branch, last, vendor["name"], branch)


def open_records(doc, kernel):
    """The records whose fix has not reached this kernel, in the data file's order.

    doc: load()'s result; kernel: identify()'s result. Each item: id, title, class, fixed_in
    (first fixed release of the kernel's branch, or None), fixed_mainline, reason, action (one
    of ACTIONS), advisory (action == "advisory": the kernel's upstream version is not exact, the
    vendor keeps an ended branch, or an rc at a boundary), link, needs (RELEVANCE's feature).
    None when the kernel's version cannot be told at all (unrecognised release string).
    """
    judged = _judged_version(kernel or {})
    if judged is None:
        return None
    version, advisory = judged
    ended = None if advisory else ended_branch(doc, kernel or {})
    items = []
    for record in doc["records"]:
        verdict = judge(record, version)
        if verdict is None:
            continue
        fixed_in, reason, rc_note = verdict
        notes = [note for note in (advisory, rc_note) if note]
        if not notes and fixed_in is None and ended:
            notes = [ended]
        if notes:
            reason = "advisory (%s): %s" % ("; ".join(notes), reason.replace("host runs", "judged as"))
            action = "advisory"
        else:
            action = "upgrade" if fixed_in else "no_fix_in_branch"
        items.append({
            "id": record["id"], "title": record["title"], "class": record["class"],
            "fixed_in": fixed_in, "fixed_mainline": record["fixed_mainline"], "reason": reason,
            "action": action, "advisory": action == "advisory", "link": LINK % record["id"],
            "needs": needed_feature(record),
        })
    return items


def worst_class(items: List[dict]) -> Optional[str]:
    """The class of items whose CLASS_SEVERITY is highest (the first such in CLASS_SEVERITY's order)."""
    classes = set(item["class"] for item in items)
    return max((c for c in CLASS_SEVERITY if c in classes), key=lambda c: severity_rank(CLASS_SEVERITY[c]),
               default=None)


def class_severity(items: List[dict], floor: str) -> Tuple[str, Optional[str]]:
    """(severity, why) of a finding whose severity comes from its records: the worst record's
    class's CLASS_SEVERITY, never below floor (the rule's own severity); why is None at the floor."""
    worst = worst_class(items)
    severity = CLASS_SEVERITY[worst] if worst else floor
    if severity_rank(severity) <= severity_rank(floor):
        return floor, None
    return severity, "its records include %s fixes (%s)" % (worst, severity)


def _count(items: List[dict], what: str = "records") -> str:
    """"12 records (2 of them data corruption)", "3 records (all crash/BUG)", "1 record (leak)";
    what: the words after the number ("records fixed upstream")."""
    worst = worst_class(items)
    of_worst = sum(item["class"] == worst for item in items)
    if len(items) == 1:
        return "1 %s (%s)" % (what.replace("records", "record", 1), worst)
    return "%d %s (%s %s)" % (len(items), what, "all" if of_worst == len(items) else "%d of them" % of_worst, worst)


def _release_key(release: str):
    return kernel_version._upstream_key(release)


def nearest_branch(doc: dict, branch: Optional[str], items: List[dict]) -> Optional[Tuple[str, str]]:
    """(branch, release) of the oldest maintained branch at or after `branch` whose newest release
    the data knows has the fix of every item: a longterm branch that has not ended, or else the
    newest stable series the records name. None when none has them all yet."""
    last_seen = doc["last_seen"]
    newest = max(last_seen, key=_branch_key) if last_seen else None
    candidates = [b for b in doc["branches"]["longterm"] if b in last_seen]
    if newest and newest not in candidates:
        candidates.append(newest)
    if branch and re.match(r"^\d+\.\d+$", branch):
        candidates = [b for b in candidates if _branch_key(b) >= _branch_key(branch) and b != branch]
    by_id = dict((record["id"], record) for record in doc["records"])
    for candidate in candidates:
        release = last_seen[candidate]
        if all(item["id"] in by_id and judge(by_id[item["id"]], release) is None for item in items):
            return candidate, release
    return None


def action_text(doc: dict, kernel: dict, action: str, items: List[dict]) -> str:
    """What the host's owner reads for one action over its open records (items, open_records'
    items of that action): the one sentence of the finding's message after the kernel's name."""
    if not items:
        return "no open record"
    if action == "upgrade":
        target = max((item["fixed_in"] for item in items), key=_release_key)
        return "upgrade to a kernel based on %s or later: closes %s" % (target, _count(items))
    branch = _series(kernel.get("upstream")) or _series(kernel.get("release"))
    if action == "no_fix_in_branch":
        last = doc["branches"]["ended"].get(branch)
        ended = " (the branch ended at %s)" % last if last else ""
        nearest = nearest_branch(doc, branch, items)
        if nearest:
            where = "the nearest maintained branch with every fix is %s (%s or later)" % nearest
        else:
            mainline = [item["fixed_mainline"] for item in items if item["fixed_mainline"]]
            where = ("no maintained branch has every fix yet; mainline has them from %s"
                     % max(mainline, key=_release_key) if mainline else "no upstream fix yet")
        return "no upstream fix in the %s branch%s for %s; %s" % (branch, ended, _count(items), where)
    vendor = doc["branches"]["vendors"].get(kernel.get("vendor")) or {}
    why = ended_branch(doc, kernel) if not kernel.get("backports") and kernel.get("upstream") else None
    if why is None:
        why = "%s kernels backport fixes under their own release numbers" % (vendor.get("name") or kernel.get("vendor") or "its vendor's")
        if not kernel.get("upstream"):
            why = "its upstream version is unknown (%s)" % ("; ".join(kernel.get("notes") or []) or "no note")
    source = ("; check them in %s's advisories: %s" % (vendor["name"], vendor["advisories"])
              if vendor.get("advisories") else "")
    return "%s: %s cannot be judged from the version%s" % (why, _count(items, "records fixed upstream"), source)


# The features a record may need (its `needs`, reviewed record by record in
# rules/kernel_record_classes.yml): feature -> in_use(fs, options), whether one ext4 filesystem
# (its facts: the superblock as dumpe2fs prints it, features by the names dumpe2fs gives them; and
# its mount options in effect, as ext4_parsers.mounts.option_map) uses it. Only called for a filesystem
# whose superblock was read.
_QUOTA_OPTIONS = ("quota", "usrquota", "grpquota", "prjquota", "usrjquota", "grpjquota")
_DAX_ON = (True, "always", "inode")  # dax (the old spelling of dax=always), dax=always, dax=inode


def _has(feature: str) -> Callable[[dict, dict], bool]:
    return lambda fs, options: feature in (fs["superblock"].get("features") or ())


def _quota_in_use(fs: dict, options: dict) -> bool:
    features = set(fs["superblock"].get("features") or ())
    return bool({"quota", "project"} & features) or any(options.get(name) for name in _QUOTA_OPTIONS)


def _encrypt_in_use(fs: dict, options: dict) -> bool:
    # inlinecrypt alone reaches fscrypt's I/O path (CVE-2022-50277 needs no encrypt feature).
    return _has("encrypt")(fs, options) or bool(options.get("inlinecrypt")) or "test_dummy_encryption" in options


def _dax_in_use(fs: dict, options: dict) -> bool:
    # Without a dax option, files with the DAX attribute use DAX on a DAX-capable (pmem) device.
    dax = options.get("dax")
    if dax is None:
        disk = (fs.get("queue") or {}).get("device") or os.path.basename(fs.get("device") or "")
        return disk.startswith("pmem")
    return dax in _DAX_ON


def _mb_optimize_scan_in_use(fs: dict, options: dict) -> bool:
    # The kernel prints mb_optimize_scan only when it differs from its group-count default.
    option = options.get("mb_optimize_scan")
    if option is not None:
        return option == "1"
    return default_mb_optimize_scan(fs["superblock"]) is not False


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
        self.options = None  # each filesystem's option_map, made when a feature is first asked

    def __missing__(self, feature):
        in_use = RELEVANCE[feature]
        if self.options is None:
            self.options = [option_map(fs.get("options") or ()) for fs in self.filesystems]
        self[feature] = used = any(not fs.get("superblock") or in_use(fs, options)
                                   for fs, options in zip(self.filesystems, self.options))
        return used


def set_aside(item, in_use):
    """Why a record (an open_records item) does not matter on a host (in_use: its FeaturesInUse),
    or None when it does."""
    feature = item["needs"]
    if feature is None or in_use[feature]:
        return None
    return "%s is not enabled on any ext4 filesystem of the host" % feature


def describe(evidence: dict) -> str:
    """The {kernel_action} of a finding's message, from its evidence: kernel_action (the action,
    the kernel) and kernel_records (the records still open, after any waiver)."""
    action = evidence.get("kernel_action") or {}
    kernel = action.get("kernel") or {}
    items = tuple((item["id"], item["class"], item.get("fixed_in"), item.get("fixed_mainline"))
                  for item in evidence.get("kernel_records") or [])
    return _described(action.get("action"), tuple((k, tuple(v) if isinstance(v, list) else v)
                                                  for k, v in sorted(kernel.items())), items)


@functools.lru_cache(maxsize=4096)  # the hosts of a fleet share a few kernels: one sentence each
def _described(action, kernel, items):
    kernel = dict((k, list(v) if isinstance(v, tuple) else v) for k, v in kernel)
    return action_text(shipped(), kernel, action, [dict(zip(("id", "class", "fixed_in", "fixed_mainline"), item))
                                                   for item in items])


@functools.lru_cache(maxsize=1)
def shipped() -> dict:
    """load() of the shipped data files, once per process (what catalog.load() judges by)."""
    return load()
