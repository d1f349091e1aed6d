"""A host's policy: which rules run on it, the severities its site sets, and what fails it.

The role's variables, as each host sees them (ordinary group_vars and host_vars, so one group
can be stricter than the rest), are saved with the host's facts record
(roles/ext4_audit/tasks/facts.yml), checked against the catalog before any host is contacted
(`ext4audit check --policies`) and applied in the report step:

    ext4_audit_rules_select: [data-safety, SITE_DATA_NOATIME]  # only these run; [] = every rule
    ext4_audit_rules_skip: [EXT4_AUTO_DA_ALLOC_RENAME]        # never run; listed as skipped in the reports
    ext4_audit_severity_overrides:                            # this site's severity, with its reason
      EXT4_INODE_128: {severity: high, reason: "our backups need 256-byte inodes"}
    ext4_audit_fail_on: medium                                # lowest unwaived severity that fails the host
    ext4_audit_capacity_limits: {block_use_high: 0.99}        # the use at which a filesystem is nearly full
    ext4_audit_kernel_no_fix_counts: true                     # records with no fix in the branch count at their class

A rule is named by its id, its kind (data-safety, performance, operability) or one of its tags.
A name that is none of these is an error: a typo would otherwise select or skip nothing.
"""

from typing import Any, Dict, Optional, Tuple

from ext4audit import SEVERITIES
from ext4audit.rules import kernel_records

FIELDS = ("fail_on", "rules_select", "rules_skip", "severity_overrides", "kernel_no_fix_counts", "capacity_limits")
OVERRIDE_FIELDS = ("severity", "reason")
# The share of blocks (df's Use%: used / (used + available to users)) and of inodes in use at which
# EXT4_FS_NEARLY_FULL and EXT4_INODES_NEARLY_EXHAUSTED raise a medium finding, and a high one (which
# fails the default gate). 0.90: Zabbix's Linux template calls a filesystem critical from 90% space
# used ({$VFS.FS.PUSED.MAX.CRIT}) or under 10% inodes free ({$VFS.FS.INODE.PFREE.MIN.CRIT}); 0.97:
# node_exporter's mixin pages (NodeFilesystemAlmostOutOfSpace, NodeFilesystemAlmostOutOfFiles,
# critical) under 3% left. docs/variables.md has the sources; a site sets its own per host, any subset.
CAPACITY_LIMITS = {"block_use_medium": 0.90, "block_use_high": 0.97, "inode_use_medium": 0.90, "inode_use_high": 0.97}


class PolicyError(ValueError):
    """A host's policy is not valid; the message names the host and the variable."""


def names_of(rule):
    """What ext4_audit_rules_select and ext4_audit_rules_skip may call a rule by."""
    return {rule["id"], rule["kind"]} | set(rule["tags"])


def make(doc: Optional[dict], catalog: Any, where: str, default_fail_on: str) -> Tuple[dict, Dict[str, str]]:
    """One host's checked policy and its skipped rules (rule id -> why, in catalog order).

    doc: the policy saved in its facts record; None (a record written before policies were
    saved) means the defaults, with default_fail_on. where: the host, for error messages."""
    doc = {} if doc is None else doc
    if not isinstance(doc, dict) or set(doc) - set(FIELDS):
        raise PolicyError("%s: the policy is a mapping of %s, got %r" % (where, ", ".join(FIELDS), doc))
    fail_on = doc.get("fail_on", default_fail_on)
    if fail_on not in SEVERITIES:
        raise PolicyError("%s: ext4_audit_fail_on %r is not one of %s" % (where, fail_on, ", ".join(SEVERITIES)))
    by_rule = _names_by_rule(catalog)
    known = set().union(*by_rule.values())
    select = _names(doc, "rules_select", where, known)
    skip = _names(doc, "rules_skip", where, known)
    overrides = doc.get("severity_overrides") or {}
    if not isinstance(overrides, dict):
        raise PolicyError("%s: ext4_audit_severity_overrides must map rule ids to {severity, reason}, got %r"
                          % (where, overrides))
    checked = {}
    for rid, entry in overrides.items():
        name = "%s: ext4_audit_severity_overrides.%s" % (where, rid)
        if rid not in catalog.by_id:
            raise PolicyError("%s: %r is not a rule id" % (name, rid))
        if not isinstance(entry, dict) or set(entry) != set(OVERRIDE_FIELDS):
            raise PolicyError("%s needs exactly severity and reason, got %r" % (name, entry))
        if entry["severity"] not in SEVERITIES:
            raise PolicyError("%s: severity %r is not one of %s" % (name, entry["severity"], ", ".join(SEVERITIES)))
        if not isinstance(entry["reason"], str) or not entry["reason"].strip():
            raise PolicyError("%s: reason is required (text: why this site rates the rule so; it is shown in "
                              "every report)" % name)
        checked[rid] = {"severity": entry["severity"], "reason": entry["reason"].strip()}
    limits = capacity_limits(doc.get("capacity_limits"), where)
    no_fix_counts = doc.get("kernel_no_fix_counts", False)
    if not isinstance(no_fix_counts, bool):
        raise PolicyError("%s: ext4_audit_kernel_no_fix_counts must be true or false, got %r" % (where, no_fix_counts))
    skipped = {}
    for rule in catalog.rules:
        names = by_rule[rule["id"]]
        if select and not names & set(select):
            skipped[rule["id"]] = "not selected by ext4_audit_rules_select"
        elif names & set(skip):
            skipped[rule["id"]] = "ext4_audit_rules_skip: %s" % ", ".join(sorted(names & set(skip)))
    return {"fail_on": fail_on, "rules_select": select, "rules_skip": skip, "severity_overrides": checked,
            "kernel_no_fix_counts": no_fix_counts, "capacity_limits": limits}, skipped


def capacity_limits(value: Any, where: str) -> Dict[str, float]:
    """CAPACITY_LIMITS with a host's own (ext4_audit_capacity_limits: any of its keys, each a share
    above 0 and at most 1, a medium limit not above its high one)."""
    name = "%s: ext4_audit_capacity_limits" % where
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise PolicyError("%s must map %s to shares of 1 (0.9 for 90%%), got %r" % (name, ", ".join(CAPACITY_LIMITS), value))
    limits = dict(CAPACITY_LIMITS)
    for key, share in value.items():
        if key not in CAPACITY_LIMITS:
            raise PolicyError("%s: %r is not one of %s" % (name, key, ", ".join(CAPACITY_LIMITS)))
        if isinstance(share, bool) or not isinstance(share, (int, float)) or not 0 < share <= 1:
            raise PolicyError("%s.%s must be a share above 0 and at most 1 (0.9 for 90%%), got %r" % (name, key, share))
        limits[key] = share
    for use in ("block_use", "inode_use"):
        if limits[use + "_medium"] > limits[use + "_high"]:
            raise PolicyError("%s: %s_medium (%s) is above %s_high (%s)" % (name, use, limits[use + "_medium"], use,
                                                                         limits[use + "_high"]))
    return limits


def _names_by_rule(catalog):
    """{rule id: names_of(rule)} of the catalog, made once and kept on it (make runs for every host
    of a run; a loaded catalog is not changed afterwards)."""
    cached = getattr(catalog, "_policy_names", None)
    if cached is None or cached[0] is not catalog.rules:
        cached = catalog._policy_names = (catalog.rules, dict((rule["id"], names_of(rule)) for rule in catalog.rules))
    return cached[1]


def _names(doc, field, where, known):
    value = doc.get(field) or []
    if not isinstance(value, list) or not all(isinstance(name, str) for name in value):
        raise PolicyError("%s: ext4_audit_%s must be a list of rule ids, kinds or tags, got %r" % (where, field, value))
    for name in value:
        if name not in known:
            raise PolicyError("%s: ext4_audit_%s: %r is not a rule id, kind or tag of the catalog" % (where, field, name))
    return value


NO_FIX_COUNTS_REASON = "ext4_audit_kernel_no_fix_counts: records with no fix in the branch count at their class"


def override(findings: list, overrides: dict, kernel_no_fix_counts: bool = False) -> None:
    """Give findings of overridden rules the site's severity, keeping the catalog's and the reason.
    kernel_no_fix_counts: a {kernel_records: no_fix_in_branch} finding takes its records' class
    severity (kernel_records.class_severity) first; a site override still has the last word."""
    for finding in findings:
        action = (finding.get("evidence") or {}).get("kernel_action") or {}
        if kernel_no_fix_counts and action.get("action") == "no_fix_in_branch":
            severity, _ = kernel_records.class_severity(finding["evidence"]["kernel_records"], finding["severity"])
            if severity != finding["severity"]:
                finding["severity_override"] = {"from": finding["severity"], "reason": NO_FIX_COUNTS_REASON}
                finding["severity"] = severity
        entry = overrides.get(finding["rule"])
        if entry:
            finding["severity_override"] = {"from": finding["severity"], "reason": entry["reason"]}
            finding["severity"] = entry["severity"]


def describe(report):
    """The host's policy in short lines of text (summary.md and report.html show them)."""
    policy = report.get("policy")
    if not policy:
        return []
    lines = ["fails at %s or above (ext4_audit_fail_on)" % policy["fail_on"]]
    if policy.get("kernel_no_fix_counts"):
        lines.append("kernel records with no fix in the branch count at their class (ext4_audit_kernel_no_fix_counts)")
    by_reason = {}
    for item in report.get("skipped") or []:
        by_reason.setdefault(item["reason"], []).append(item["rule"])
    lines += ["skipped (%s): %s" % (reason, ", ".join(rules)) for reason, rules in by_reason.items()]
    lines += ["severity of %s set to %s: %s" % (rid, entry["severity"], entry["reason"])
              for rid, entry in sorted(policy["severity_overrides"].items())]
    return lines
