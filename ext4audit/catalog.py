"""Load and validate the rule catalog and the known-kernel-issues table (rules/*.yml)."""

import os
import re

import yaml

from . import SEVERITIES

RULES_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "rules")  # a link to ../rules in the repository
SCOPES = ("filesystem", "netfs", "host")
REQUIRED = ("id", "title", "scope", "severity", "when", "message", "rationale", "remediation",
            "references", "tags")
OPERATORS = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "contains", "present")
PROBE_ID = re.compile(r"^[a-z0-9_]+$")  # a rule's confirmation probe id (shown as code in reports)


class CatalogError(ValueError):
    """The catalog is not valid; the message names the rule and the field."""


class Catalog:
    def __init__(self, rules, kernel_issues):
        self.rules = rules
        self.kernel_issues = kernel_issues
        self.by_id = dict((rule["id"], rule) for rule in rules)


def load(rules_dir=RULES_DIR):
    rules_doc = _read(os.path.join(rules_dir, "catalog.yml"))
    issues_doc = _read(os.path.join(rules_dir, "kernel_issues.yml"))
    issues = {}
    for issue in issues_doc.get("issues") or []:
        if not issue.get("id") or not issue.get("affected"):
            raise CatalogError("kernel issue without id or affected ranges: %r" % issue)
        issues[issue["id"]] = issue
    rules, seen = rules_doc.get("rules") or [], set()
    for rule in rules:
        _check_rule(rule, issues)
        if rule["id"] in seen:
            raise CatalogError("rule %s is defined twice" % rule["id"])
        seen.add(rule["id"])
    return Catalog(rules, issues)


def _read(path):
    try:
        with open(path) as handle:
            doc = yaml.safe_load(handle)
    except (OSError, yaml.YAMLError) as exc:
        raise CatalogError("cannot read %s: %s" % (path, exc))
    if not isinstance(doc, dict):
        raise CatalogError("%s is not a mapping" % path)
    return doc


def _check_rule(rule, issues):
    rid = rule.get("id", "<no id>")
    for field in REQUIRED:
        if field not in rule:
            raise CatalogError("rule %s has no %s" % (rid, field))
    if rule["scope"] not in SCOPES:
        raise CatalogError("rule %s: scope %r is not one of %s" % (rid, rule["scope"], SCOPES))
    for entry in [rule] + list(rule.get("escalate") or []):
        if entry["severity"] not in SEVERITIES:
            raise CatalogError("rule %s: severity %r is not one of %s" % (rid, entry["severity"], SEVERITIES))
        _check_predicate(rid, entry["when"], issues)
    if not {"steps", "cost"} <= set(rule["remediation"]):
        raise CatalogError("rule %s: remediation needs steps and cost" % rid)
    if "confirmation" in rule:
        _check_confirmation(rid, rule["confirmation"])


def _check_confirmation(rid, spec):
    """{probe: <the probe's confirmation id>, confirmed_at: <ratio>, escalate_to: <severity>}"""
    if not isinstance(spec, dict) or set(spec) != {"probe", "confirmed_at", "escalate_to"}:
        raise CatalogError("rule %s: confirmation needs exactly probe, confirmed_at and escalate_to" % rid)
    if not isinstance(spec["probe"], str) or not PROBE_ID.match(spec["probe"]):
        raise CatalogError("rule %s: confirmation probe %r is not a probe id" % (rid, spec["probe"]))
    ratio = spec["confirmed_at"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 1:
        raise CatalogError("rule %s: confirmed_at %r must be a ratio above 1 (risky cost / safe cost)" % (rid, ratio))
    if spec["escalate_to"] not in SEVERITIES:
        raise CatalogError("rule %s: escalate_to %r is not one of %s" % (rid, spec["escalate_to"], SEVERITIES))


def _check_predicate(rid, pred, issues):
    if not isinstance(pred, dict) or len(pred) == 0:
        raise CatalogError("rule %s: predicate %r is not a mapping" % (rid, pred))
    if "all" in pred or "any" in pred:
        for sub in pred.get("all", pred.get("any")):
            _check_predicate(rid, sub, issues)
    elif "not" in pred:
        _check_predicate(rid, pred["not"], issues)
    elif "kernel_issue" in pred:
        if pred["kernel_issue"] not in issues:
            raise CatalogError("rule %s: unknown kernel issue %s" % (rid, pred["kernel_issue"]))
    elif "fact" in pred:
        ops = [key for key in pred if key != "fact"]
        if len(ops) != 1 or ops[0] not in OPERATORS:
            raise CatalogError("rule %s: fact predicate %r needs exactly one of %s" % (rid, pred, OPERATORS))
    else:
        raise CatalogError("rule %s: unknown predicate %r" % (rid, pred))
