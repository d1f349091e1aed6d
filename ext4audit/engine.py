"""Evaluate the rule catalog against one host's facts.

Predicates are three-valued: True (the rule applies), False (it does not) and None (a fact it
needs could not be read, or a kernel version cannot be compared). None never raises a finding;
it becomes an "undetermined" entry that says which facts were missing.
"""

import operator
import re

import ext4_parsers
import kernel_version

from . import severity_rank

_VERSION = re.compile(r"^\d+\.\d+")
_DEFAULT_ON = {"user_xattr", "acl", "block_validity"}  # baked-in defaults not worth mentioning


def filesystem_context(fs, facts):
    """The fact tree a filesystem-scope predicate sees (roots: opt sb queue jbd2 fs kernel derived)."""
    opt = ext4_parsers.option_map(fs.get("options") or [])
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


class Evaluation:
    """One predicate evaluation: its result plus the facts it looked at (the evidence).
    issue_cache: kernel-issue results of this host's kernel, shared by its evaluations."""

    def __init__(self, context, kernel_issues, issue_cache=None):
        self.context = context
        self.kernel_issues = kernel_issues
        self.issue_cache = {} if issue_cache is None else issue_cache
        self.evidence = {}
        self.missing = []

    def lookup(self, path):
        node = self.context
        for part in path.split("."):
            node = node.get(part) if isinstance(node, dict) else None
            if node is None:
                break
        if node is None and path.startswith("opt.") and self.context.get("options_complete"):
            node = False  # /proc/fs/ext4/<dev>/options lists every option in effect: unlisted is off
        self.evidence[path] = node
        if node is None:
            self.missing.append(path)
        return node

    def test(self, pred):
        if "all" in pred:
            results = [self.test(sub) for sub in pred["all"]]
            return False if False in results else (None if None in results else True)
        if "any" in pred:
            results = [self.test(sub) for sub in pred["any"]]
            return True if True in results else (None if None in results else False)
        if "not" in pred:
            result = self.test(pred["not"])
            return None if result is None else not result
        if "kernel_issue" in pred:
            issue_id = pred["kernel_issue"]
            if issue_id not in self.issue_cache:
                self.issue_cache[issue_id] = kernel_version.in_range(self.context.get("kernel") or {},
                                                                     self.kernel_issues[issue_id]["affected"])
            result = self.issue_cache[issue_id]
            self.evidence["kernel_issue." + issue_id] = result
            if result is None:
                self.missing.append("kernel_issue.%s (kernel %s cannot be compared)"
                                    % (issue_id, (self.context.get("kernel") or {}).get("release")))
            return result
        (op, expected), = [(k, v) for k, v in pred.items() if k != "fact"]
        actual = self.lookup(pred["fact"])
        if op == "present":
            self.missing = [m for m in self.missing if m != pred["fact"]]
            return (actual is not None) == bool(expected)
        if actual is None:
            return None
        return _compare(op, actual, expected)


def _number(value):
    try:
        return float(value) if "." in str(value) else int(value)
    except (TypeError, ValueError):
        return None


def _compare(op, actual, expected):
    if op == "contains":
        return expected in actual
    if op == "in":
        return actual in expected
    if isinstance(actual, str) and isinstance(expected, str) and _VERSION.match(actual) and _VERSION.match(expected):
        order = kernel_version.compare_upstream(actual, expected)
        actual, expected = order, 0
    elif not isinstance(actual, bool) and _number(actual) is not None and _number(expected) is not None:
        actual, expected = _number(actual), _number(expected)
    return _OPERATORS[op](actual, expected)


_OPERATORS = {"eq": operator.eq, "ne": operator.ne, "lt": operator.lt, "lte": operator.le,
              "gt": operator.gt, "gte": operator.ge}


def _format_fields(fs, facts, context):
    """Values a rule message may name; anything unknown prints as '?'."""
    sb = (fs or {}).get("superblock") or {}
    derived = context.get("derived") or {}
    opt = context.get("opt") or {}
    kernel = facts.get("kernel") or {}
    mib = lambda value: "%g" % (value / 1048576.0) if value else "?"
    baked = sorted(name if value is True else ("no" + name if value is False else "%s=%s" % (name, value))
                   for name, value in ext4_parsers.superblock_option_map(sb).items() if name not in _DEFAULT_ON)
    fields = {
        "mountpoint": (fs or {}).get("mountpoint"), "device": (fs or {}).get("device"),
        "fstype": (fs or {}).get("fstype"), "source": (fs or {}).get("source"),
        "release": kernel.get("release"), "upstream": kernel.get("upstream") or "unknown",
        "page_size": kernel.get("page_size"), "block_size": sb.get("block_size"),
        "journal_mib": mib(sb.get("journal_bytes")),
        "default_journal_mib": mib(derived.get("journal_default_bytes")),
        "inode_size": sb.get("inode_size"), "commit": opt.get("commit"),
        "stripe": derived.get("stripe"),
        "write_cache": ((fs or {}).get("queue") or {}).get("write_cache") or "unknown",
        "fstab_line": ((fs or {}).get("fstab") or {}).get("line"),
        "drift": ", ".join("%s (in effect: %s)" % (d["option"], "absent" if d["effective"] is None else d["effective"])
                           for d in (fs or {}).get("fstab_drift") or []),
        "baked": (", set in the superblock: " + " ".join(baked)) if baked else "",
    }
    return dict((key, "?" if value is None else value) for key, value in fields.items())


def evaluate_host(facts, catalog):
    """Return (findings, undetermined, passed) for one host's facts."""
    findings, undetermined, passed = [], [], []
    targets = {
        "host": [(None, host_context(facts))],
        "filesystem": [(fs, filesystem_context(fs, facts)) for fs in facts.get("filesystems") or []],
        "netfs": [(fs, {"fs": fs, "kernel": facts.get("kernel") or {}}) for fs in facts.get("netfs") or []],
    }
    # Per host, computed once: each target's location and message fields, its kernel's issues.
    wheres = dict((id(fs), {"mountpoint": (fs or {}).get("mountpoint"),
                            "device": (fs or {}).get("device") or (fs or {}).get("source")})
                  for scope in targets.values() for fs, _ in scope)
    fields_of, issues = {}, {}
    for rule in catalog.rules:
        for fs, context in targets[rule["scope"]]:
            check = Evaluation(context, catalog.kernel_issues, issues)
            result = check.test(rule["when"])
            where = wheres[id(fs)]
            if result is None:
                undetermined.append(dict(where, rule=rule["id"], missing=sorted(set(check.missing))))
                continue
            if not result:
                passed.append(dict(where, rule=rule["id"]))
                continue
            if id(fs) not in fields_of:
                fields_of[id(fs)] = _format_fields(fs, facts, context)
            fields = fields_of[id(fs)]
            severity, because = rule["severity"], None
            for step in rule.get("escalate") or []:
                if Evaluation(context, catalog.kernel_issues, issues).test(step["when"]) and \
                        severity_rank(step["severity"]) > severity_rank(severity):
                    severity, because = step["severity"], step["because"].format(**fields).strip()
                    break
            findings.append(dict(
                where,
                rule=rule["id"], title=rule["title"], severity=severity,
                base_severity=rule["severity"], escalated_because=because,
                message=" ".join(rule["message"].format(**fields).split()),
                evidence=check.evidence,
                remediation=rule["remediation"], references=rule["references"],
                seed=rule.get("seed"), tags=rule["tags"], waived=False, waiver=None,
            ))
    return findings, undetermined, passed
