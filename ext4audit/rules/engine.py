"""Evaluate the rule catalog against one host's facts.

Predicates are three-valued: True (the rule applies), False (it does not) and None (a fact it
needs could not be read, or a kernel version cannot be compared). None never raises a finding;
it becomes an "undetermined" entry that says which facts were missing.
"""

import collections
import functools
import json
import operator
import re
from typing import Any, Container, Dict, Optional, Tuple

from ext4audit import severity_rank
from ext4audit.rules import boot_tools, kernel_records, mount_options, policy
from ext4audit.parsers import kernel_version
from ext4audit.parsers.ext4_parsers.kernel_defaults import default_mb_optimize_scan
from ext4audit.parsers.ext4_parsers.mounts import option_map
from ext4audit.parsers.ext4_parsers.superblock import e2fsprogs_default_journal_blocks, superblock_option_map

_VERSION = re.compile(r"^\d+\.\d+")
_DEFAULT_ON = {"user_xattr", "acl", "block_validity"}  # baked-in defaults not worth mentioning
# The features of mke2fs's ext4 layout (misc/mke2fs.conf.in) that make it faster than ext2/ext3's:
# without them a filesystem keeps block maps, scattered group metadata and linear directories.
# (huge_file, in the same list, only lifts the 2 TiB file size limit: not a performance matter.)
_EXT4_BASE_FEATURES = ("extent", "flex_bg", "dir_index")
# Data directories of common databases: a filesystem mounted at one of these (or below) holds one.
_DATABASE_DIRS = ("/var/lib/mysql", "/var/lib/mariadb", "/var/lib/postgresql", "/var/lib/pgsql",
                  "/var/lib/mongodb", "/var/lib/cassandra", "/var/lib/etcd", "/var/lib/redis",
                  "/var/lib/elasticsearch", "/var/lib/clickhouse", "/var/lib/influxdb")
_BLOCK_NUMBERS_32BIT = 2 ** 32  # without the 64bit feature, block numbers are 32 bits wide


# Where a filesystem's use was read: statvfs on a host (live), the superblock of a disk image
# (exact there: nothing is mounted). A host's superblock counts are not used: the kernel writes
# them back only at unmount, freeze or error, so they can be far from the truth either way.
USE_SOURCES = ("statvfs", "superblock")


def use_counts(fs: dict, facts: dict) -> Tuple[Optional[Dict[str, int]], Optional[str]]:
    """(counts, source): a filesystem's block and inode counts in the shape of its `usage` (statvfs)
    and where they come from (USE_SOURCES), or (None, None) when there are none to trust."""
    usage = fs.get("usage")
    if usage:
        return usage, "statvfs"
    sb = fs.get("superblock")
    if facts.get("image") is None or not sb:
        return None, None
    free, reserved = sb.get("free_blocks"), sb.get("reserved_block_count")
    return {"block_size": sb.get("block_size"), "blocks": sb.get("block_count"), "blocks_free": free,
            "blocks_avail": None if free is None or reserved is None else max(free - reserved, 0),
            "inodes": sb.get("inode_count"), "inodes_free": sb.get("free_inodes")}, "superblock"


def _use_shares(counts: Optional[Dict[str, int]]) -> Tuple[Optional[float], Optional[float]]:
    """(block use, inode use) of use_counts: blocks as df's Use% (used / (used + available to
    users), so 100% is where unprivileged writers get ENOSPC), inodes as df -i's."""
    if not counts:
        return None, None
    block_use = inode_use = None
    blocks, free, avail = counts.get("blocks"), counts.get("blocks_free"), counts.get("blocks_avail")
    if blocks and free is not None and avail is not None and blocks - free + avail > 0:
        block_use = (blocks - free) / float(blocks - free + avail)
    if counts.get("inodes") and counts.get("inodes_free") is not None:
        inode_use = (counts["inodes"] - counts["inodes_free"]) / float(counts["inodes"])
    return block_use, inode_use


def filesystem_context(fs: dict, facts: dict, option_maps: Optional[dict] = None,
                       limits: Optional[Dict[str, float]] = None) -> dict:
    """The fact tree a filesystem-scope predicate sees (roots: opt sb queue jbd2 fs kernel derived
    limit). option_maps: option list -> option_map(), shared by one host's filesystems, which mostly
    have the same options (only read afterwards, so sharing is safe). limits: the host's capacity
    limits (policy.capacity_limits; None: policy.CAPACITY_LIMITS)."""
    options = fs.get("options") or []
    if option_maps is None:
        opt = option_map(options)
    else:
        key = tuple(options)
        opt = option_maps.get(key)
        if opt is None:
            opt = option_maps[key] = option_map(options)
    sb = fs.get("superblock")
    kernel = facts.get("kernel") or {}
    derived = {
        "journal_present": None, "journal_ratio": None, "journal_default_bytes": None,
        "mb_optimize_scan": None, "stripe": None, "block_smaller_than_page": None,
        "fstab_drift_count": len(fs.get("fstab_drift") or []),
        "inode_use": None, "reserved_bytes": None, "growth_room_32bit": None, "missing_ext4_features": None,
        "database_volume": _under_any(fs.get("mountpoint"), _DATABASE_DIRS),
        "disk_image": facts.get("image") is not None,
        "boot_filesystem": None, "grub_version": None, "grub_unreadable_features": None,
        "e2fsprogs_version": None, "fsck_unsupported_features": None, "image_build_date": None,
    }
    image = facts.get("image")
    if image is not None:  # a disk image: can its own GRUB and e2fsck read this filesystem?
        # vendor notices name ranges of images by build date (ISO, so gte/lt compare it as a date)
        derived["image_build_date"] = (image.get("identity") or {}).get("build_date")
        derived["boot_filesystem"] = fs.get("mountpoint") == boot_tools.boot_mountpoint(facts.get("filesystems") or [])
        if sb:
            packages = image.get("packages")
            derived["grub_version"], derived["grub_unreadable_features"] = boot_tools.unreadable(
                "grub", sb["features"], packages)
            derived["e2fsprogs_version"], derived["fsck_unsupported_features"] = boot_tools.unreadable(
                "e2fsprogs", sb["features"], packages)
    counts, derived["use_source"] = use_counts(fs, facts)
    derived["block_use"], derived["inode_use"] = _use_shares(counts)
    if sb:
        derived["journal_present"] = "has_journal" in sb["features"]
        default_blocks = e2fsprogs_default_journal_blocks(sb["block_count"] or 0)
        if default_blocks and sb.get("block_size"):
            derived["journal_default_bytes"] = default_blocks * sb["block_size"]
            if sb.get("journal_bytes"):
                derived["journal_ratio"] = sb["journal_bytes"] / float(derived["journal_default_bytes"])
        derived["mb_optimize_scan"] = default_mb_optimize_scan(sb)
        if sb.get("block_size") and kernel.get("page_size"):
            derived["block_smaller_than_page"] = sb["block_size"] < kernel["page_size"]
        if sb.get("block_size") and sb.get("reserved_block_count") is not None:
            derived["reserved_bytes"] = sb["reserved_block_count"] * sb["block_size"]
        if sb.get("block_size") and sb.get("block_count"):
            # How far the volume (the filesystem, or its device if that is larger already) can
            # grow before it reaches what 32-bit block numbers address (16 TiB at 4 KiB blocks).
            volume = max(sb["block_count"] * sb["block_size"], fs.get("device_bytes") or 0)
            derived["growth_room_32bit"] = _BLOCK_NUMBERS_32BIT * sb["block_size"] / float(volume)
        derived["missing_ext4_features"] = [f for f in _EXT4_BASE_FEATURES if f not in sb["features"]]
    elif fs.get("options_source") == "proc":
        derived["journal_present"] = "data" in opt  # ext4 prints data= only with a journal
    if "mb_optimize_scan" in opt:  # printed only when it contradicts the group-count default
        derived["mb_optimize_scan"] = opt["mb_optimize_scan"] == "1"
    if "stripe" in opt:
        derived["stripe"] = _number(opt["stripe"])
    elif sb:
        derived["stripe"] = sb.get("raid_stripe_width") or sb.get("raid_stride") or 0
    return {"opt": opt, "sb": sb, "queue": fs.get("queue"), "jbd2": fs.get("jbd2"), "fs": fs,
            "kernel": kernel, "derived": derived, "limit": limits or policy.CAPACITY_LIMITS,
            "options_complete": options_complete(fs)}


def options_complete(fs):
    """Does the option list name every option in effect, so that an unlisted one is off? The kernel's
    does; an inferred one too once the superblock was read (it then sets every option a rule reads,
    and a missing data= means no journal, as in the kernel's: test_inference_differential.py)."""
    return fs.get("options_source") == "proc" or (fs.get("options_source") == "inferred"
                                                  and bool(fs.get("superblock")))


def _under_any(path, directories):
    """Is path one of directories or below one? None when the path is unknown."""
    if not path:
        return None
    return any(path == d or path.startswith(d + "/") for d in directories)


def host_context(facts):
    image = facts.get("image")  # a disk image's record (ext4_image_facts): unknowns are None there
    unresolved = (image or {}).get("fstab_unresolved")
    unread = (image or {}).get("unread")
    return {"kernel": facts.get("kernel") or {}, "filesystems": facts.get("filesystems") or [],
            "host": {"ext4_count": len(facts.get("filesystems") or []),
                     "netfs_count": len(facts.get("netfs") or []),
                     "disk_image": image is not None,
                     "fstab_unresolved_count": None if unresolved is None else len(unresolved),
                     "image_unread_count": None if unread is None else len(unread)}}


class _Plan:
    """The catalog made ready for evaluate_host, once per catalog object and kept on it (a
    loaded catalog is not changed afterwards): the rules with their predicates compiled into
    closures, so a host only pays for lookups and comparisons; and the kernel-issue results of
    each kernel seen so far (and its open kernel CNA records), as they depend only on the kernel
    facts and the catalog."""

    def __init__(self, catalog):
        self.source = catalog.rules
        self.rules = [(rule, _compile(rule["when"], catalog),
                       [(step, _compile(step["when"], catalog)) for step in rule.get("escalate") or []])
                      for rule in catalog.rules]
        self.issues_by_kernel = {}

    @classmethod
    def of(cls, catalog):
        plan = getattr(catalog, "_evaluation_plan", None)
        if plan is None or plan.source is not catalog.rules:
            plan = catalog._evaluation_plan = cls(catalog)
        return plan

    def issues_of(self, kernel):
        """The kernel-issue results (issue id -> True/False/None) shared by hosts whose kernel
        facts are the same."""
        try:
            key = json.dumps(kernel, sort_keys=True)
        except (TypeError, ValueError):  # not JSON (a direct caller's facts): this host's own
            return {}
        return self.issues_by_kernel.setdefault(key, {})


def _compile(pred, catalog):
    """A predicate -> test(context, evidence, missing, issues) -> True/False/None.

    test records each fact it reads in evidence (path -> value, in reading order) and each fact
    it could not read in missing. issues: the kernel-issue results of the host's kernel."""
    if "all" in pred or "any" in pred:
        # Three-valued: all is False if any part is False, any is True if any part is True; else
        # None if a part is None (a fact missing), else the other value.
        decisive = "any" in pred
        subs = [_compile(sub, catalog) for sub in pred["any" if decisive else "all"]]

        def test_combined(context, evidence, missing, issues):
            result = not decisive
            for sub in subs:  # no short cut: the evidence names every fact
                value = sub(context, evidence, missing, issues)
                if value is decisive:
                    result = decisive
                elif value is None and result is not decisive:
                    result = None
            return result
        return test_combined
    if "not" in pred:
        inner = _compile(pred["not"], catalog)

        def test_not(context, evidence, missing, issues):
            result = inner(context, evidence, missing, issues)
            return None if result is None else not result
        return test_not
    if "kernel_issue" in pred:
        return _compile_kernel_issue(pred["kernel_issue"], catalog.kernel_issues)
    if "kernel_records" in pred:
        return _compile_kernel_records(pred["kernel_records"], catalog.records)
    if "fstab_options_refused" in pred:
        return _compile_fstab_options_refused(catalog.removed_options)
    return _compile_fact(pred)


def _compile_kernel_issue(issue_id, kernel_issues):
    key = "kernel_issue." + issue_id

    def test_issue(context, evidence, missing, issues):
        if issue_id not in issues:
            issues[issue_id] = kernel_version.in_range(context.get("kernel") or {}, kernel_issues[issue_id]["affected"])
        result = issues[issue_id]
        evidence[key] = result
        if result is None:
            missing.append("%s (kernel %s cannot be compared)" % (key, (context.get("kernel") or {}).get("release")))
        return result
    return test_issue


def _compile_kernel_records(action, records):
    """{kernel_records: ACTION} (host scope): the host's kernel lacks fixes that ACTION
    (kernel_records.ACTIONS) closes and that matter on its ext4 filesystems. Evidence:
    kernel_records (the exact records, which the message sums up and a waiver may name),
    kernel_action (the action and the kernel, for the message), kernel_records_set_aside (not
    relevant, and why). A kernel that cannot be judged at all makes the result None."""
    def test_records(context, evidence, missing, issues):
        kernel = context.get("kernel") or {}
        if "kernel_records" not in issues:
            issues["kernel_records"] = kernel_records.open_records(records, kernel)
        items, filesystems = issues["kernel_records"], context.get("filesystems") or []
        if items is None:
            evidence["kernel_records"] = None
            missing.append("kernel_records (kernel %s cannot be judged)" % kernel.get("release"))
            return None
        # What follows depends only on the kernel's records and on which of the features they need
        # the host uses: worked out once per kernel and feature use, kept with the kernel's issues.
        in_use = kernel_records.FeaturesInUse(filesystems)
        needed = issues.get(("kernel_records needs", action))
        if needed is None:
            needed = issues[("kernel_records needs", action)] = sorted(set(
                item["needs"] for item in items if item["action"] == action and item["needs"]))
        key = ("kernel_records", action, bool(filesystems), tuple(in_use[feature] for feature in needed))
        if key not in issues:
            issues[key] = _judge_records(items, action, kernel, filesystems, in_use)
        result, found = issues[key]
        evidence.update(found)  # (lists shared by the hosts of the key: read only, as a waiver replaces them)
        return result
    return test_records


_RECORD_FIELDS = ("id", "title", "class", "fixed_in", "fixed_mainline", "link")
_KERNEL_FIELDS = ("release", "upstream", "vendor", "backports", "notes")  # what kernel_records.action_text reads


def _judge_records(items, action, kernel, filesystems, in_use):
    """(result, evidence) of a {kernel_records: ACTION} predicate (see _compile_kernel_records)."""
    found, aside = [], []
    for item in items:
        if item["action"] != action or not filesystems:
            continue
        why = kernel_records.set_aside(item, in_use)
        if why:
            aside.append("%s: %s" % (item["id"], why))
        else:
            found.append(item)
    # an advisory record's reason ("judged as 5.14.0") would mislead for a kernel far ahead of its base
    fields = _RECORD_FIELDS if action != "advisory" else ("id", "title", "class", "fixed_mainline", "link")
    evidence = {"kernel_records": [dict((k, item[k]) for k in fields) for item in found],
                "kernel_action": {"action": action, "kernel": dict((k, kernel.get(k)) for k in _KERNEL_FIELDS)}}
    if aside:
        evidence["kernel_records_set_aside"] = aside
    return bool(found), evidence


def _compile_fstab_options_refused(removed_options):
    """{fstab_options_refused: true} (filesystem rules): the filesystem's fstab entry names an option
    that the kernel refuses (rules/removed_mount_options.yml), so its next mount fails. Evidence:
    fstab_options_refused (each option, the release that removed it and the commit) and
    fstab_options_unknown (options a backporting vendor's kernel may refuse: with none refused,
    the result is None and the reason is in missing). No fstab entry: False."""
    def test_refused(context, evidence, missing, issues):
        fstab = (context.get("fs") or {}).get("fstab") or {}
        refused, unknown = mount_options.refused(fstab.get("options"), context.get("kernel"), removed_options)
        evidence["fstab_options_refused"] = refused
        if unknown:
            evidence["fstab_options_unknown"] = ["%s: %s" % (item["option"], item["why"]) for item in unknown]
            if not refused:
                missing.extend("fstab_options_refused %s (%s)" % (item["option"], item["why"]) for item in unknown)
                return None
        return bool(refused)
    return test_refused


def _compile_fact(pred):
    """{fact: a.b, <op>: expected}. A fact that cannot be read is None: missing, and the
    predicate is None too, except for present, which is about exactly that."""
    path = pred["fact"]
    (op, expected), = [(k, v) for k, v in pred.items() if k != "fact"]
    read = _reader(path)
    if isinstance(expected, dict):  # {fact: PATH}: compared with another fact (a limit of the host's policy)
        return _compile_fact_against(path, read, op, expected["fact"])

    if op == "present":
        def test_present(context, evidence, missing, issues):
            node = evidence[path] = read(context)
            if path in missing:  # read and missing elsewhere in this predicate: present settles it
                missing[:] = [m for m in missing if m != path]
            return (node is not None) == bool(expected)
        return test_present
    compare = _comparison(op, expected)

    def test_fact(context, evidence, missing, issues):
        node = evidence[path] = read(context)
        if node is None:
            missing.append(path)
            return None
        return compare(node)
    return test_fact


def _reader(path):
    """read(context) -> the fact at path, or None."""
    first, *rest = path.split(".")
    unlisted_is_off = path.startswith("opt.")  # see options_complete in filesystem_context
    if len(rest) == 1 and not unlisted_is_off:  # most facts (sb.x, derived.x, ...): read without the loop
        second = rest[0]

        def read(context):
            node = context.get(first)  # a context is always a dict
            return node.get(second) if isinstance(node, dict) else None
        return read

    def read_path(context):
        node = context.get(first)
        for part in rest:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None and unlisted_is_off and context.get("options_complete"):
            node = False  # /proc/fs/ext4/<dev>/options lists every option in effect: unlisted is off
        return node
    return read_path


def _compile_fact_against(path, read, op, other):
    """{fact: A, OP: {fact: B}}: A compared with B, both read per target (B: a limit, which each
    host's policy may set); both go into the evidence."""
    read_other = _reader(other)

    def test_against(context, evidence, missing, issues):
        node = evidence[path] = read(context)
        limit = evidence[other] = read_other(context)
        missing.extend(p for p, value in ((path, node), (other, limit)) if value is None)
        if node is None or limit is None:
            return None
        return _comparison(op, limit)(node)
    return test_against


def _number(value):
    try:
        return float(value) if "." in str(value) else int(value)
    except (TypeError, ValueError):
        return None


def _comparison(op, expected):
    """compare(actual) for one operator; the expected side's version and number forms are
    worked out here, once. Kernel versions compare as versions, numbers (or numeric strings) as
    numbers, anything else as it is; booleans never as numbers."""
    if op == "contains":
        return lambda actual: expected in actual
    if op == "in":
        return lambda actual: actual in expected
    function = _OPERATORS[op]
    expected_is_version = isinstance(expected, str) and _VERSION.match(expected) is not None
    expected_number = _number(expected)
    if expected_number is None and not expected_is_version:  # (a word: every branch below compares as is)
        return lambda actual: function(actual, expected)

    def compare(actual):
        if expected_is_version and isinstance(actual, str) and _VERSION.match(actual):
            return function(kernel_version.compare_upstream(actual, expected), 0)
        if isinstance(actual, bool) or (expected_number is None and isinstance(actual, str)):
            return function(actual, expected)  # (_number of a string cannot raise, so skipping it changes nothing)
        actual_number = _number(actual)
        if actual_number is not None and expected_number is not None:
            return function(actual_number, expected_number)
        return function(actual, expected)
    return compare


_OPERATORS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "lte": operator.le,
              "gt": operator.gt, "gte": operator.ge}


class _Fields(dict):
    """Values a rule message may name, for one target (fs None: the host). Each is worked out
    the first time a message names it: most messages name only the mountpoint, and the
    baked-in options cost more than all the rest. Anything unknown prints as '?'."""

    def __init__(self, fs, facts, context):
        dict.__init__(self)
        self.fs = fs or {}
        self.sb = self.fs.get("superblock") or {}
        self.derived = context.get("derived") or {}
        self.opt = context.get("opt") or {}
        self.kernel = facts.get("kernel") or {}
        self.image = facts.get("image") or {}
        self.limit = context.get("limit") or {}
        self.facts = facts

    @property
    def counts(self):
        return use_counts(self.fs, self.facts)[0] or {}

    def gib(self, blocks):
        """A block count of counts, in GiB."""
        value, size = self.counts.get(blocks), self.counts.get("block_size")
        return None if value is None or not size else "%.1f" % (value * size / 2.0 ** 30)

    def __missing__(self, name):
        value = _FIELDS[name](self)  # the catalog loader admits only MESSAGE_FIELDS
        if value is None:
            value = "?"
        self[name] = value
        return value


def _mib(value):
    return "%g" % (value / 1048576.0) if value else "?"


def _percent(ratio):
    return None if ratio is None else "%.1f" % (ratio * 100)


def _gib(value):
    return "%.1f" % (value / 2.0 ** 30) if value else None


def _tib(value):
    return "%.2f" % (value / 2.0 ** 40) if value else None


def _baked(fields):
    baked = sorted(name if value is True else ("no" + name if value is False else "%s=%s" % (name, value))
                   for name, value in superblock_option_map(fields.sb).items() if name not in _DEFAULT_ON)
    return (", set in the superblock: " + " ".join(baked)) if baked else ""


_FIELDS = {
    "mountpoint": lambda f: f.fs.get("mountpoint"), "device": lambda f: f.fs.get("device"),
    "fstype": lambda f: f.fs.get("fstype"), "source": lambda f: f.fs.get("source"),
    "release": lambda f: f.kernel.get("release"), "upstream": lambda f: f.kernel.get("upstream") or "unknown",
    "page_size": lambda f: f.kernel.get("page_size"), "block_size": lambda f: f.sb.get("block_size"),
    "journal_mib": lambda f: _mib(f.sb.get("journal_bytes")),
    "default_journal_mib": lambda f: _mib(f.derived.get("journal_default_bytes")),
    "inode_size": lambda f: f.sb.get("inode_size"), "commit": lambda f: f.opt.get("commit"),
    "stripe": lambda f: f.derived.get("stripe"),
    "write_cache": lambda f: (f.fs.get("queue") or {}).get("write_cache") or "unknown",
    "fstab_line": lambda f: (f.fs.get("fstab") or {}).get("line"),
    "drift": lambda f: ", ".join("%s (in effect: %s)" % (d["option"], "absent" if d["effective"] is None
                                                          else d["effective"]) for d in f.fs.get("fstab_drift") or []),
    "baked": _baked,
    "fsck_problems": lambda f: "; ".join((f.fs.get("fsck") or {}).get("problems") or []),
    "fstab_unresolved": lambda f: "; ".join("line %s: %s (%s)" % (e["line"], e["spec"], e["mountpoint"])
                                            for e in f.image.get("fstab_unresolved") or []),
    "kernel_notes": lambda f: "; ".join(f.kernel.get("notes") or []),
    "image_unread": lambda f: "; ".join("%s (%s)" % (e["path"], e["reason"]) for e in f.image.get("unread") or []),
    "state": lambda f: f.sb.get("state"), "error_count": lambda f: f.sb.get("error_count"),
    "inode_count": lambda f: f.counts.get("inodes"),
    "inodes_free": lambda f: f.counts.get("inodes_free"),
    "inode_use_pct": lambda f: _percent(f.derived.get("inode_use")),
    "block_use_pct": lambda f: _percent(f.derived.get("block_use")),
    "avail_gib": lambda f: f.gib("blocks_avail"), "size_gib": lambda f: f.gib("blocks"),
    "use_source": lambda f: _USE_SOURCE_TEXT.get(f.derived.get("use_source")),
    "block_use_medium_pct": lambda f: _percent(f.limit.get("block_use_medium")),
    "block_use_high_pct": lambda f: _percent(f.limit.get("block_use_high")),
    "inode_use_medium_pct": lambda f: _percent(f.limit.get("inode_use_medium")),
    "inode_use_high_pct": lambda f: _percent(f.limit.get("inode_use_high")),
    "missing_features": lambda f: " ".join(f.derived.get("missing_ext4_features") or []),
    "grub_version": lambda f: f.derived.get("grub_version"),
    "image_build_date": lambda f: f.derived.get("image_build_date"),
    "image_build_date_source": lambda f: (f.image.get("identity") or {}).get("build_date_source"),
    "grub_unreadable": lambda f: " ".join(f.derived.get("grub_unreadable_features") or []),
    "e2fsprogs_version": lambda f: f.derived.get("e2fsprogs_version"),
    "fsck_unsupported": lambda f: " ".join(f.derived.get("fsck_unsupported_features") or []),
    "reserved_gib": lambda f: _gib(f.derived.get("reserved_bytes")),
    "size_tib": lambda f: _tib((f.sb.get("block_count") or 0) * (f.sb.get("block_size") or 0)),
    "device_tib": lambda f: _tib(f.fs.get("device_bytes")),
    "limit_tib": lambda f: _tib(_BLOCK_NUMBERS_32BIT * (f.sb.get("block_size") or 0)),
    "disk_kind": lambda f: (f.fs.get("queue") or {}).get("kind"),
    "disk": lambda f: (f.fs.get("queue") or {}).get("device"),
}
_USE_SOURCE_TEXT = {"statvfs": "live counts, statvfs", "superblock": "the image's superblock"}
# Fields that depend on the rule, from its evidence: {kernel_action} says what closes the open
# records, {fstab_options_refused} the fstab options the kernel refuses.
_EVIDENCE_FIELDS = {"kernel_action": kernel_records.describe,
                    "fstab_options_refused": lambda evidence: mount_options.describe(
                        evidence.get("fstab_options_refused") or [])}
MESSAGE_FIELDS = frozenset(_FIELDS) | frozenset(_EVIDENCE_FIELDS)  # the placeholders a message may name (checked at catalog load)


def message(template, fields, evidence):
    """A rule's message for one target: the target's fields and the rule's evidence fields."""
    names = _evidence_fields_of(template)
    if not names:
        return " ".join(template.format_map(fields).split())
    by_evidence = dict((name, _EVIDENCE_FIELDS[name](evidence)) for name in names)
    return " ".join(template.format_map(collections.ChainMap(by_evidence, fields)).split())


@functools.lru_cache(maxsize=None)  # a catalog has a few dozen templates; each is looked at once
def _evidence_fields_of(template):
    """The _EVIDENCE_FIELDS a message template names."""
    return tuple(name for name in _EVIDENCE_FIELDS if name in template)


def evaluate_host(facts: dict, catalog: Any, skip: Container[str] = (),
                  limits: Optional[Dict[str, float]] = None) -> Tuple[list, list, list]:
    """Return (findings, undetermined, passed) for one host's facts. skip: rule ids not to
    evaluate (the host's policy lists them as skipped); limits: its capacity limits
    (policy.capacity_limits; None: the defaults)."""
    findings, undetermined, passed = [], [], []
    option_maps = {}
    targets = {
        "host": [(None, host_context(facts))],
        "filesystem": [(fs, filesystem_context(fs, facts, option_maps, limits)) for fs in facts.get("filesystems") or []],
        "netfs": [(fs, {"fs": fs, "kernel": facts.get("kernel") or {}}) for fs in facts.get("netfs") or []],
    }
    # Computed once per host: each target's location and message fields; per kernel (kept in
    # the plan): its issues.
    for scope, entries in targets.items():
        targets[scope] = [(fs, context, {"mountpoint": (fs or {}).get("mountpoint"),
                                         "device": (fs or {}).get("device") or (fs or {}).get("source")})
                          for fs, context in entries]
    plan = _Plan.of(catalog)
    fields_of, issues = {}, plan.issues_of(facts.get("kernel") or {})
    for rule, test, escalations in plan.rules:
        rule_id = rule["id"]
        if rule_id in skip:
            continue
        for fs, context, where in targets[rule["scope"]]:
            evidence, missing = {}, []
            result = test(context, evidence, missing, issues)
            if result is None:
                undetermined.append(dict(where, rule=rule_id, missing=sorted(set(missing))))
                continue
            if not result:  # most (~150 a host): a literal, faster than dict(where, rule=...), the same keys in order
                passed.append({"mountpoint": where["mountpoint"], "device": where["device"], "rule": rule_id})
                continue
            if id(fs) not in fields_of:
                fields_of[id(fs)] = _Fields(fs, facts, context)
            fields = fields_of[id(fs)]
            severity, because = rule["severity"], None
            for step, step_test in escalations:
                if step_test(context, {}, [], issues) and severity_rank(step["severity"]) > severity_rank(severity):
                    severity, because = step["severity"], step["because"].format_map(fields).strip()
                    break
            if rule.get("severity_by_records"):
                severity, because = kernel_records.class_severity(evidence["kernel_records"], rule["severity"])
                evidence["kernel_action"] = dict(evidence["kernel_action"], by_class=True)  # (a waiver recounts)
            findings.append(dict(
                where,
                rule=rule_id, title=rule["title"], severity=severity,
                base_severity=rule["severity"], escalated_because=because,
                message=message(rule["message"], fields, evidence),
                evidence=evidence,
                remediation=rule["remediation"], references=rule["references"],
                seed=rule.get("seed"), tags=rule["tags"], waived=False, waiver=None,
            ))
    return findings, undetermined, passed
