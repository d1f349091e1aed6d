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

import msgspec

from ext4audit import severity_rank
from ext4audit.model import contract, safe_yaml
from ext4audit.model import fact_paths
from ext4audit.rules import RULES_DIR, boot_tools, engine, kernel_records, mount_options
from ext4audit.parsers import kernel_version

# A static performance finding must not fail the default gate (high) by itself: only its probe
# confirmation, measured on the host's own kernel, may raise it above this.
PERFORMANCE_CEILING = "medium"
SCHEMA = contract.RULES_SCHEMA
RULE_ID = re.compile(contract.RULE_ID_PATTERN)
# what a field must be, for the message when the contract's model refuses it (a Literal's values
# are listed from the model)
NEEDS = {"id": "upper-case letters, digits and _ (e.g. SITE_DATA_NOATIME)", "tags": "a list of names",
         "overrides": "true or false", "when": "a predicate (a mapping)", "references": "a list",
         "escalate": "a list of entries with exactly %s" % ", ".join(contract.field_names(contract.Escalation)[1]),
         "remediation": "a mapping with steps and cost",
         "confirmation": "a mapping with exactly %s" % ", ".join(contract.field_names(contract.RuleConfirmation)[1]),
         "confirmed_at": "a ratio above 1 (risky cost / safe cost)"}  # any other field: text
OPERATORS = ("eq", "ne", "lt", "lte", "gt", "gte", "in", "contains", "present")
COMPARISONS = ("eq", "ne", "lt", "lte", "gt", "gte")  # the operators that may compare two facts
COMBINATORS = ("all", "any", "not", "kernel_issue", "kernel_records", "fstab_options_refused")


class CatalogError(ValueError):
    """The catalog is not valid; the message names the rule and the field."""


class Catalog:
    def __init__(self, rules, kernel_issues, records=None, site_rules=(), removed_options=None):
        self.rules = rules
        self.site_rules = frozenset(site_rules)  # ids of the rules that come from site rule files
        self.kernel_issues = kernel_issues
        self.records = records  # kernel_records.load()'s result, for {kernel_records: CLASS}
        # mount_options.load()'s result, for {fstab_options_refused: true} (None: the shipped file)
        self.removed_options = removed_options
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
        records = kernel_records.shipped()
    except kernel_records.RecordsError as exc:
        raise CatalogError(str(exc))
    try:
        removed_options = mount_options.shipped()
        boot_tools.shipped()  # read by the engine for the image rules: a broken file fails here
    except (mount_options.MountOptionsError, boot_tools.BootToolsError) as exc:
        raise CatalogError(str(exc))
    rules_path = os.path.join(rules_dir, "catalog.yml")
    rules = _rules_of(rules_path, issues, records["classes"])
    if any("overrides" in rule for rule in rules):
        raise CatalogError("%s: rule %s: overrides is for site rule files only"
                           % (rules_path, next(r["id"] for r in rules if "overrides" in r)))
    position = dict((rule["id"], index) for index, rule in enumerate(rules))
    site_defined = {}  # id -> the site file that defines it
    for path in _site_files(site_dirs):
        for rule in _rules_of(path, issues, records["classes"]):
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
    return Catalog(rules, issues, records, site_defined, removed_options)


def _site_files(site_dirs):
    """The site rule files: every *.yml and *.yaml in each folder, in name order."""
    paths = []
    for folder in site_dirs:
        if not os.path.isdir(folder):
            raise CatalogError("ext4_audit_rules_dirs: %s is not a folder" % folder)
        paths += sorted(glob.glob(os.path.join(glob.escape(folder), "*.yml"))
                        + glob.glob(os.path.join(glob.escape(folder), "*.yaml")))
    return paths


def _rules_of(path, issues, record_classes):
    """A catalog file's rules, each checked; an error names the file, the rule and the field."""
    doc = _read(path)
    try:
        msgspec.convert(doc, contract.RuleFile, strict=True)
    except msgspec.ValidationError as exc:
        raise CatalogError("%s: %s" % (path, _refused(exc, doc)))
    rules, seen = doc["rules"], set()
    for rule in rules:
        try:
            _check_rule(rule, issues, record_classes)
        except CatalogError as exc:
            raise CatalogError("%s: %s" % (path, exc))
        if rule["id"] in seen:
            raise CatalogError("%s: rule %s is defined twice" % (path, rule["id"]))
        seen.add(rule["id"])
    return rules


def _refused(exc, doc):
    """The model's refusal as "rule ID: field ..." (the rule, the field and what it holds)."""
    failed = contract.failure(exc, contract.RuleFile)
    if len(failed.steps) < 2:
        return "a rule file is a mapping with rules (and schema: %s): %s" % (
            SCHEMA, contract.explain(exc, contract.RuleFile))
    rule = doc["rules"][failed.steps[1]]
    if not isinstance(rule, dict):
        return "rules[%d] is not a mapping" % failed.steps[1]
    rid = rule.get("id")
    name = rid if isinstance(rid, str) and RULE_ID.match(rid) else "<no id>" if rid is None else repr(rid)
    inside, value = failed.steps[2:], rule
    while failed.field is None and inside and isinstance(inside[-1], int):  # a list's item: the message shows the list
        inside.pop()
    for step in inside:
        value = value[step]
    field = "".join("[%d]" % step if isinstance(step, int) else "." + step for step in inside)[1:]
    at = ": " + field if field else ""
    if failed.field in failed.fields:  # a field the model has: it is missing
        return "rule %s%s has no %s" % (name, at, failed.field)
    if failed.field is not None:
        return "rule %s%s: unknown field %s (fields: %s)" % (name, at, failed.field, ", ".join(failed.fields))
    if failed.choices:
        return "rule %s: %s %r is not one of %s" % (name, field, value, ", ".join(failed.choices))
    return "rule %s: %s must be %s%s, got %r" % (name, field, NEEDS.get(inside[-1], "text"), failed.hint, value)


def _read(path):
    try:
        doc = safe_yaml.load(path)
    except (OSError, safe_yaml.Error, ValueError, RecursionError) as exc:
        raise CatalogError("cannot read %s: %s" % (path, exc))
    if not isinstance(doc, dict):
        raise CatalogError("%s is not a mapping" % path)
    return doc


def _list(doc, key, path):
    """The kernel issues (not a contract model: the catalog's own table)."""
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


def _check_rule(rule, issues, record_classes):
    """What the model (contract.Rule) cannot say: a performance rule's severity ceiling, the
    predicates and the message templates."""
    rid = rule["id"]
    escalate = rule.get("escalate") or []
    for entry in [rule] + escalate:
        if rule["kind"] == "performance" and severity_rank(entry["severity"]) > severity_rank(PERFORMANCE_CEILING):
            raise CatalogError("rule %s: severity %s is above %s, the most a static performance finding may "
                               "have (a confirmation may raise it)" % (rid, entry["severity"], PERFORMANCE_CEILING))
        _check_predicate(rid, rule["scope"], entry["when"], issues, record_classes)
    _check_text(rid, "message", rule["message"])
    for entry in escalate:
        _check_text(rid, "because", entry["because"])


def _check_text(rid, field, text):
    """A message (or escalate because) names only the fields the engine fills in, by plain name:
    str.format would otherwise look up attributes and items ({mountpoint.__class__}) or fail
    with a KeyError on the one host where the rule fires."""
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
            if scope != "host" or value not in kernel_records.ACTIONS:
                raise CatalogError("rule %s: kernel_records %r needs a host rule and one of the actions %s"
                                   % (rid, value, ", ".join(kernel_records.ACTIONS)))
        elif kind == "fstab_options_refused":
            if scope != "filesystem" or value is not True:
                raise CatalogError("rule %s: fstab_options_refused needs a filesystem rule and the value true, got %r"
                                   % (rid, value))
        elif value not in issues:
            raise CatalogError("rule %s: unknown kernel issue %s" % (rid, value))
        return
    ops = [key for key in pred if key != "fact"]
    if len(ops) != 1 or ops[0] not in OPERATORS:
        raise CatalogError("rule %s: fact predicate %r needs exactly one of %s" % (rid, pred, OPERATORS))
    _check_fact(rid, scope, pred["fact"])
    value = pred[ops[0]]
    if isinstance(value, dict):  # {fact: A, gte: {fact: B}}: compared with another fact
        if set(value) != {"fact"} or ops[0] not in COMPARISONS:
            raise CatalogError("rule %s: fact predicate %r: a fact is compared with another only by %s, written "
                               "{fact: PATH}" % (rid, pred, ", ".join(COMPARISONS)))
        _check_fact(rid, scope, value["fact"])


def _check_fact(rid, scope, path):
    if not isinstance(path, str) or not fact_paths.known(scope, path):
        raise CatalogError("rule %s: fact %r is not a fact a %s rule can read (roots: %s; see ext4audit/model/fact_paths.py)"
                           % (rid, path, scope, ", ".join(fact_paths.roots(scope))))
