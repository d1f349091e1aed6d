"""Evaluate the rule catalog against one host's facts.

Predicates are three-valued: True (the rule applies), False (it does not) and None (a fact it
needs could not be read, or a kernel version cannot be compared). None never raises a finding;
it becomes an "undetermined" entry that says which facts were missing.
"""

import json
import operator
import re

from . import severity_rank
from .parsers import ext4_parsers, kernel_version

_VERSION = re.compile(r"^\d+\.\d+")
_DEFAULT_ON = {"user_xattr", "acl", "block_validity"}  # baked-in defaults not worth mentioning


def filesystem_context(fs, facts, option_maps=None):
    """The fact tree a filesystem-scope predicate sees (roots: opt sb queue jbd2 fs kernel derived).
    option_maps: option list -> option_map(), shared by one host's filesystems, which mostly
    have the same options (only read afterwards, so sharing is safe)."""
    options = fs.get("options") or []
    if option_maps is None:
        opt = ext4_parsers.option_map(options)
    else:
        key = tuple(options)
        opt = option_maps.get(key)
        if opt is None:
            opt = option_maps[key] = ext4_parsers.option_map(options)
    sb = fs.get("superblock")
    kernel = facts.get("kernel") or {}
    derived = {
        "journal_present": None, "journal_ratio": None, "journal_default_bytes": None,
        "mb_optimize_scan": None, "stripe": None, "block_smaller_than_page": None,
        "fstab_drift_count": len(fs.get("fstab_drift") or []),
    }
    if sb:
        derived["journal_present"] = "has_journal" in sb["features"]
        default_blocks = ext4_parsers.e2fsprogs_default_journal_blocks(sb["block_count"] or 0)
        if default_blocks and sb.get("block_size"):
            derived["journal_default_bytes"] = default_blocks * sb["block_size"]
            if sb.get("journal_bytes"):
                derived["journal_ratio"] = sb["journal_bytes"] / float(derived["journal_default_bytes"])
        if sb.get("block_count") and sb.get("blocks_per_group"):
            groups = -(-sb["block_count"] // sb["blocks_per_group"])
            derived["mb_optimize_scan"] = groups >= 16  # MB_DEFAULT_LINEAR_SCAN_THRESHOLD
        if sb.get("block_size") and kernel.get("page_size"):
            derived["block_smaller_than_page"] = sb["block_size"] < kernel["page_size"]
    elif fs.get("options_source") == "proc":
        derived["journal_present"] = "data" in opt  # ext4 prints data= only with a journal
    if "mb_optimize_scan" in opt:  # printed only when it contradicts the group-count default
        derived["mb_optimize_scan"] = opt["mb_optimize_scan"] == "1"
    if "stripe" in opt:
        derived["stripe"] = _number(opt["stripe"])
    elif sb:
        derived["stripe"] = sb.get("raid_stripe_width") or sb.get("raid_stride") or 0
    return {"opt": opt, "sb": sb, "queue": fs.get("queue"), "jbd2": fs.get("jbd2"), "fs": fs,
            "kernel": kernel, "derived": derived, "options_complete": fs.get("options_source") == "proc"}


def host_context(facts):
    return {"kernel": facts.get("kernel") or {},
            "host": {"ext4_count": len(facts.get("filesystems") or []),
                     "netfs_count": len(facts.get("netfs") or [])}}


class _Plan:
    """The catalog made ready for evaluate_host, once per catalog object and kept on it (a
    loaded catalog is not changed afterwards): the rules with their predicates compiled into
    closures, so a host only pays for lookups and comparisons; and the kernel-issue results of
    each kernel seen so far, as in_range depends only on the kernel facts and the catalog."""

    def __init__(self, catalog):
        self.source = catalog.rules
        self.rules = [(rule, _compile(rule["when"], catalog.kernel_issues),
                       [(step, _compile(step["when"], catalog.kernel_issues)) for step in rule.get("escalate") or []])
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


def _compile(pred, kernel_issues):
    """A predicate -> test(context, evidence, missing, issues) -> True/False/None.

    test records each fact it reads in evidence (path -> value, in reading order) and each fact
    it could not read in missing. issues: the kernel-issue results of the host's kernel."""
    if "all" in pred or "any" in pred:
        # Three-valued: all is False if any part is False, any is True if any part is True; else
        # None if a part is None (a fact missing), else the other value.
        decisive = "any" in pred
        subs = [_compile(sub, kernel_issues) for sub in pred["any" if decisive else "all"]]

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
        inner = _compile(pred["not"], kernel_issues)

        def test_not(context, evidence, missing, issues):
            result = inner(context, evidence, missing, issues)
            return None if result is None else not result
        return test_not
    if "kernel_issue" in pred:
        return _compile_kernel_issue(pred["kernel_issue"], kernel_issues)
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


def _compile_fact(pred):
    """{fact: a.b, <op>: expected}. A fact that cannot be read is None: missing, and the
    predicate is None too, except for present, which is about exactly that."""
    path = pred["fact"]
    first, *rest = path.split(".")
    unlisted_is_off = path.startswith("opt.")  # see options_complete in filesystem_context
    (op, expected), = [(k, v) for k, v in pred.items() if k != "fact"]
    present = op == "present"
    compare = None if present else _comparison(op, expected)

    def test_fact(context, evidence, missing, issues):
        node = context.get(first)  # a context is always a dict
        for part in rest:
            node = node.get(part) if isinstance(node, dict) else None
        if node is None and unlisted_is_off and context.get("options_complete"):
            node = False  # /proc/fs/ext4/<dev>/options lists every option in effect: unlisted is off
        evidence[path] = node
        if present:
            if path in missing:  # read and missing elsewhere in this predicate: present settles it
                missing[:] = [m for m in missing if m != path]
            return (node is not None) == bool(expected)
        if node is None:
            missing.append(path)
            return None
        return compare(node)
    return test_fact


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

    def __missing__(self, name):
        value = _FIELDS[name](self)  # an unknown name is a KeyError, as str.format(**fields) gave
        if value is None:
            value = "?"
        self[name] = value
        return value


def _mib(value):
    return "%g" % (value / 1048576.0) if value else "?"


def _baked(fields):
    baked = sorted(name if value is True else ("no" + name if value is False else "%s=%s" % (name, value))
                   for name, value in ext4_parsers.superblock_option_map(fields.sb).items() if name not in _DEFAULT_ON)
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
}


def evaluate_host(facts, catalog):
    """Return (findings, undetermined, passed) for one host's facts."""
    findings, undetermined, passed = [], [], []
    option_maps = {}
    targets = {
        "host": [(None, host_context(facts))],
        "filesystem": [(fs, filesystem_context(fs, facts, option_maps)) for fs in facts.get("filesystems") or []],
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
        for fs, context, where in targets[rule["scope"]]:
            evidence, missing = {}, []
            result = test(context, evidence, missing, issues)
            if result is None:
                undetermined.append(dict(where, rule=rule_id, missing=sorted(set(missing))))
                continue
            if not result:
                passed.append(dict(where, rule=rule_id))
                continue
            if id(fs) not in fields_of:
                fields_of[id(fs)] = _Fields(fs, facts, context)
            fields = fields_of[id(fs)]
            severity, because = rule["severity"], None
            for step, step_test in escalations:
                if step_test(context, {}, [], issues) and severity_rank(step["severity"]) > severity_rank(severity):
                    severity, because = step["severity"], step["because"].format_map(fields).strip()
                    break
            findings.append(dict(
                where,
                rule=rule_id, title=rule["title"], severity=severity,
                base_severity=rule["severity"], escalated_because=because,
                message=" ".join(rule["message"].format_map(fields).split()),
                evidence=evidence,
                remediation=rule["remediation"], references=rule["references"],
                seed=rule.get("seed"), tags=rule["tags"], waived=False, waiver=None,
            ))
    return findings, undetermined, passed
