"""Load and validate the rule catalog and the known-kernel-issues table (rules/*.yml).

Every rule is checked here, before any host is contacted (the playbooks run `python -m ext4audit
check` in their preflight): a misspelt fact path, message placeholder, probe id or field would
otherwise be read as "unknown" on every host, or fail only on the host where the rule fires."""

import ast
import os
import re
import string

from . import SEVERITIES, engine, fact_paths, kernel_records, safe_yaml, severity_rank
from .parsers import kernel_version

HERE = os.path.dirname(os.path.abspath(__file__))
RULES_DIR = os.path.join(HERE, "rules")  # a link to ../rules in the repository
# The confirmation probes exist where the probe defines them (Confirmations.PROBES); a link to
# ../roles/chopper_probe/files in the repository.
PROBE_SCRIPT = os.path.join(HERE, "probe_files", "ext4_probe.py")
SCOPES = tuple(fact_paths.BY_SCOPE)
KINDS = ("data-safety", "performance", "operability")  # what a rule's finding puts at risk
# A static performance finding must not fail the default gate (high) by itself: only its probe
# confirmation, measured on the host's own kernel, may raise it above this.
PERFORMANCE_CEILING = "medium"
REQUIRED = ("id", "title", "scope", "kind", "severity", "when", "message", "rationale", "remediation",
            "references", "tags")
OPTIONAL = ("seed", "escalate", "confirmation")
ESCALATE_FIELDS = ("when", "severity", "because")
OPERATORS = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "contains", "present")
COMBINATORS = ("all", "any", "not", "kernel_issue", "kernel_records")
PROBE_ID = re.compile(r"^[a-z0-9_]+$")  # a rule's confirmation probe id (shown as code in reports)


class CatalogError(ValueError):
    """The catalog is not valid; the message names the rule and the field."""


class Catalog:
    def __init__(self, rules, kernel_issues, records=None):
        self.rules = rules
        self.kernel_issues = kernel_issues
        self.records = records  # kernel_records.load()'s result, for {kernel_records: CLASS}
        self.by_id = dict((rule["id"], rule) for rule in rules)


def load(rules_dir=RULES_DIR):
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
    rules, seen, probes = _list(_read(rules_path), "rules", rules_path), set(), probe_ids()
    for rule in rules:
        _check_rule(rule, issues, probes, records["classes"])
        if rule["id"] in seen:
            raise CatalogError("rule %s is defined twice" % rule["id"])
        seen.add(rule["id"])
    return Catalog(rules, issues, records)


def probe_ids():
    """The probe's confirmation ids, read from its source without running target code here."""
    try:
        with open(PROBE_SCRIPT, "rb") as handle:
            tree = ast.parse(handle.read(), PROBE_SCRIPT)
    except (OSError, SyntaxError) as exc:
        raise CatalogError("cannot read the probe's confirmation ids from %s: %s" % (PROBE_SCRIPT, exc))
    for node in ast.walk(tree):
        if isinstance(node, ast.Assign) and [getattr(t, "id", None) for t in node.targets] == ["PROBES"]:
            return frozenset(ast.literal_eval(node.value))
    raise CatalogError("%s defines no PROBES (the confirmation probe ids)" % PROBE_SCRIPT)


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
