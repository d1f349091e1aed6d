"""Load and validate the rule catalog and the known-kernel-issues table (rules/*.yml), and the
site's own rule files (ext4_audit_rules_dirs: every *.yml in each folder, same schema).

A site rule whose id is a shipped rule's replaces it only when it says `overrides: true`;
otherwise the clash is an error, as is `overrides: true` on a rule that replaces nothing (a
misspelt id would otherwise add a second rule and leave the shipped one running).

Every rule is checked here, before any host is contacted (the playbooks run `python -m ext4audit
check` in their preflight): a misspelt fact path, message placeholder, probe id or field would
otherwise be read as "unknown" on every host, or fail only on the host where the rule fires."""

import glob
import os
import re
import string

from . import SEVERITIES, contract, engine, fact_paths, kernel_records, safe_yaml, severity_rank
from .parsers import kernel_version

HERE = os.path.dirname(os.path.abspath(__file__))
RULES_DIR = os.path.join(HERE, "rules")  # a link to ../rules in the repository
SCOPES = contract.RULE_SCOPES
KINDS = contract.RULE_KINDS
# A static performance finding must not fail the default gate (high) by itself: only its probe
# confirmation, measured on the host's own kernel, may raise it above this.
PERFORMANCE_CEILING = "medium"
REQUIRED = ("id", "title", "scope", "kind", "severity", "when", "message", "rationale", "remediation",
            "references", "tags")
OPTIONAL = ("seed", "escalate", "confirmation", "overrides")  # overrides: site rules only
SCHEMA = contract.RULES_SCHEMA
RULE_ID = re.compile(contract.RULE_ID_PATTERN)
ESCALATE_FIELDS = ("when", "severity", "because")
OPERATORS = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "contains", "present")
COMBINATORS = ("all", "any", "not", "kernel_issue", "kernel_records")
PROBE_ID = re.compile(r"^[a-z0-9_]+$")  # a rule's confirmation probe id (shown as code in reports)


class CatalogError(ValueError):
    """The catalog is not valid; the message names the rule and the field."""


class Catalog:
    def __init__(self, rules, kernel_issues, records=None, site_rules=()):
        self.rules = rules
        self.site_rules = frozenset(site_rules)  # ids of the rules that come from site rule files
        self.kernel_issues = kernel_issues
        self.records = records  # kernel_records.load()'s result, for {kernel_records: CLASS}
        self.by_id = dict((rule["id"], rule) for rule in rules)


def load(rules_dir=RULES_DIR, site_dirs=()):
    """The shipped catalog in rules_dir, with the rules of every *.yml file in each of site_dirs."""
    issues_path = os.path.join(rules_dir, "kernel_issues.yml")
    issues_doc = _read(issues_path)
    issues = {}
    for index, issue in enumerate(_list(issues_doc, "issues", issues_path), 1):
        _check_issue(issue, index, issues_path)
        issues[issue["id"]] = issue
    try:
        records = kernel_records.load()
    except kernel_records.RecordsError as exc:
        raise CatalogError(str(exc))
    rules_path = os.path.join(rules_dir, "catalog.yml")
    probes = probe_ids()
    rules = _rules_of(rules_path, issues, probes, records["classes"])
    if any("overrides" in rule for rule in rules):
        raise CatalogError("%s: rule %s: overrides is for site rule files only"
                           % (rules_path, next(r["id"] for r in rules if "overrides" in r)))
    position = dict((rule["id"], index) for index, rule in enumerate(rules))
    site_defined = {}  # id -> the site file that defines it
    for path in _site_files(site_dirs):
        for rule in _rules_of(path, issues, probes, records["classes"]):
            rid = rule["id"]
            if rid in site_defined:
                raise CatalogError("%s: rule %s is defined in %s too" % (path, rid, site_defined[rid]))
            site_defined[rid] = path
            if rid in position and rule.get("overrides") is not True:
                raise CatalogError("%s: rule %s: a shipped rule has this id; rename the rule, or set overrides: true "
                                   "to replace the shipped one" % (path, rid))
            if rid not in position and rule.get("overrides") is True:
                raise CatalogError("%s: rule %s: overrides is set but no shipped rule has this id" % (path, rid))
            if rid in position:
                rules[position[rid]] = rule
            else:
                rules.append(rule)
    return Catalog(rules, issues, records, site_defined)


def _site_files(site_dirs):
    """The site rule files: every *.yml and *.yaml in each folder, in name order."""
    paths = []
    for folder in site_dirs:
        if not os.path.isdir(folder):
            raise CatalogError("ext4_audit_rules_dirs: %s is not a folder" % folder)
        paths += sorted(glob.glob(os.path.join(glob.escape(folder), "*.yml"))
                        + glob.glob(os.path.join(glob.escape(folder), "*.yaml")))
    return paths


def _rules_of(path, issues, probes, record_classes):
    """A catalog file's rules, each checked; an error names the file, the rule and the field."""
    doc = _read(path)
    if doc.get("schema", SCHEMA) != SCHEMA or set(doc) - {"schema", "rules"}:
        raise CatalogError("%s: a rule file is a mapping with rules (and schema: %s)" % (path, SCHEMA))
    rules, seen = _list(doc, "rules", path), set()
    for rule in rules:
        try:
            _check_rule(rule, issues, probes, record_classes)
        except CatalogError as exc:
            raise CatalogError("%s: %s" % (path, exc))
        if rule["id"] in seen:
            raise CatalogError("%s: rule %s is defined twice" % (path, rule["id"]))
        seen.add(rule["id"])
    return rules


def probe_ids():
    """The probe's confirmation ids (the probe's Confirmations.PROBES is this very tuple)."""
    return frozenset(contract.PROBES)


def _read(path):
    try:
        doc = safe_yaml.load(path)
    except (OSError, safe_yaml.Error, ValueError, RecursionError) as exc:
        raise CatalogError("cannot read %s: %s" % (path, exc))
    if not isinstance(doc, dict):
        raise CatalogError("%s is not a mapping" % path)
    return doc


def _list(doc, key, path):
    items = doc.get(key) or []
    if not isinstance(items, list) or not all(isinstance(item, dict) for item in items):
        raise CatalogError("%s: %s must be a list of mappings" % (path, key))
    return items


def _check_issue(issue, index, path):
    iid = issue.get("id")
    if not isinstance(iid, str) or not iid or not isinstance(issue.get("affected"), list) or not issue["affected"]:
        raise CatalogError("%s: kernel issue #%d (%s) needs an id and affected ranges" % (path, index, iid))
    for rng in issue["affected"]:
        vendor = rng.get("vendor", "upstream") if isinstance(rng, dict) else None
        if vendor != "upstream" and vendor not in kernel_version.VENDORS:
            raise CatalogError("%s: kernel issue %s: vendor %r is not upstream or one of %s"
                               % (path, iid, vendor, ", ".join(kernel_version.VENDORS)))
        compare = kernel_version.compare_upstream if vendor == "upstream" else kernel_version.compare_evr
        for bound in ("min", "max"):
            try:
                if rng.get(bound) is not None:
                    compare(rng[bound], rng[bound])
            except ValueError as exc:
                raise CatalogError("%s: kernel issue %s: %s %r is not a %s version (%s)"
                                   % (path, iid, bound, rng[bound], vendor, exc))


def _check_rule(rule, issues, probes, record_classes):
    rid = rule.get("id", "<no id>")
    for field in REQUIRED:
        if field not in rule:
            raise CatalogError("rule %s has no %s" % (rid, field))
    unknown = sorted(set(rule) - set(REQUIRED) - set(OPTIONAL), key=str)
    if unknown:
        raise CatalogError("rule %s: unknown field %s (fields: %s)" % (rid, unknown[0], ", ".join(REQUIRED + OPTIONAL)))
    if not isinstance(rid, str) or not RULE_ID.match(rid):
        raise CatalogError("rule %r: id must be upper-case letters, digits and _ (e.g. SITE_DATA_NOATIME)" % (rid,))
    if not isinstance(rule["tags"], list) or not all(isinstance(t, str) and t for t in rule["tags"]):
        raise CatalogError("rule %s: tags must be a list of names, got %r" % (rid, rule["tags"]))
    if "overrides" in rule and not isinstance(rule["overrides"], bool):
        raise CatalogError("rule %s: overrides must be true or false, got %r" % (rid, rule["overrides"]))
    if rule["scope"] not in SCOPES:
        raise CatalogError("rule %s: scope %r is not one of %s" % (rid, rule["scope"], SCOPES))
    if rule["kind"] not in KINDS:
        raise CatalogError("rule %s: kind %r is not one of %s" % (rid, rule["kind"], KINDS))
    escalate = rule.get("escalate") or []
    if not isinstance(escalate, list) or not all(isinstance(e, dict) and set(e) == set(ESCALATE_FIELDS)
                                                 for e in escalate):
        raise CatalogError("rule %s: escalate must be a list of entries with exactly %s"
                           % (rid, ", ".join(ESCALATE_FIELDS)))
    for entry in [rule] + escalate:
        if entry["severity"] not in SEVERITIES:
            raise CatalogError("rule %s: severity %r is not one of %s" % (rid, entry["severity"], SEVERITIES))
        if rule["kind"] == "performance" and severity_rank(entry["severity"]) > severity_rank(PERFORMANCE_CEILING):
            raise CatalogError("rule %s: severity %s is above %s, the most a static performance finding may "
                               "have (a confirmation may raise it)" % (rid, entry["severity"], PERFORMANCE_CEILING))
        _check_predicate(rid, rule["scope"], entry["when"], issues, record_classes)
    _check_text(rid, "message", rule["message"])
    for entry in escalate:
        _check_text(rid, "because", entry["because"])
    if not isinstance(rule["remediation"], dict) or not {"steps", "cost"} <= set(rule["remediation"]):
        raise CatalogError("rule %s: remediation needs steps and cost" % rid)
    if "confirmation" in rule:
        _check_confirmation(rid, rule["confirmation"], probes)


def _check_text(rid, field, text):
    """A message (or escalate because) names only the fields the engine fills in, by plain name:
    str.format would otherwise look up attributes and items ({mountpoint.__class__}) or fail
    with a KeyError on the one host where the rule fires."""
    if not isinstance(text, str):
        raise CatalogError("rule %s: %s %r is not text" % (rid, field, text))
    try:
        parts = list(string.Formatter().parse(text))
    except ValueError as exc:
        raise CatalogError("rule %s: %s %r is not a valid template (%s)" % (rid, field, text, exc))
    for _, name, spec, conversion in parts:
        if name is None:
            continue
        if name not in engine.MESSAGE_FIELDS or spec or conversion:
            shown = "{%s%s%s}" % (name, "!" + conversion if conversion else "", ":" + spec if spec else "")
            raise CatalogError("rule %s: %s placeholder %s is not one of the plain fields {%s}"
                               % (rid, field, shown, "}, {".join(sorted(engine.MESSAGE_FIELDS))))


def _check_confirmation(rid, spec, probes):
    """{probe: <the probe's confirmation id>, confirmed_at: <ratio>, escalate_to: <severity>}"""
    if not isinstance(spec, dict) or set(spec) != {"probe", "confirmed_at", "escalate_to"}:
        raise CatalogError("rule %s: confirmation needs exactly probe, confirmed_at and escalate_to" % rid)
    if not isinstance(spec["probe"], str) or not PROBE_ID.match(spec["probe"]):
        raise CatalogError("rule %s: confirmation probe %r is not a probe id" % (rid, spec["probe"]))
    if spec["probe"] not in probes:
        raise CatalogError("rule %s: confirmation probe %r is not one of the probe's confirmations: %s"
                           % (rid, spec["probe"], ", ".join(sorted(probes))))
    ratio = spec["confirmed_at"]
    if isinstance(ratio, bool) or not isinstance(ratio, (int, float)) or ratio <= 1:
        raise CatalogError("rule %s: confirmed_at %r must be a ratio above 1 (risky cost / safe cost)" % (rid, ratio))
    if spec["escalate_to"] not in SEVERITIES:
        raise CatalogError("rule %s: escalate_to %r is not one of %s" % (rid, spec["escalate_to"], SEVERITIES))


def _check_predicate(rid, scope, pred, issues, record_classes):
    if not isinstance(pred, dict) or len(pred) == 0:
        raise CatalogError("rule %s: predicate %r is not a mapping" % (rid, pred))
    if "fact" not in pred:
        if len(pred) != 1 or next(iter(pred)) not in COMBINATORS:
            raise CatalogError("rule %s: predicate %r needs exactly one of %s, or fact" % (rid, pred, COMBINATORS))
        (kind, value), = pred.items()
        if kind in ("all", "any"):
            if not isinstance(value, list) or not value:
                raise CatalogError("rule %s: %s needs a list of predicates, got %r" % (rid, kind, value))
            for sub in value:
                _check_predicate(rid, scope, sub, issues, record_classes)
        elif kind == "not":
            _check_predicate(rid, scope, value, issues, record_classes)
        elif kind == "kernel_records":
            if scope != "host" or value not in record_classes:
                raise CatalogError("rule %s: kernel_records %r needs a host rule and one of the classes %s (%s)"
                                   % (rid, value, record_classes, kernel_records.DATA_FILE))
        elif value not in issues:
            raise CatalogError("rule %s: unknown kernel issue %s" % (rid, value))
        return
    ops = [key for key in pred if key != "fact"]
    if len(ops) != 1 or ops[0] not in OPERATORS:
        raise CatalogError("rule %s: fact predicate %r needs exactly one of %s" % (rid, pred, OPERATORS))
    if not isinstance(pred["fact"], str) or not fact_paths.known(scope, pred["fact"]):
        raise CatalogError("rule %s: fact %r is not a fact a %s rule can read (roots: %s; see ext4audit/fact_paths.py)"
                           % (rid, pred["fact"], scope, ", ".join(fact_paths.roots(scope))))
