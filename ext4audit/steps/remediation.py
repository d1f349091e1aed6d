"""The remediation's data (rules/remediation.yml) and its two controller steps for
playbooks/remediate.yml: which fixes a host's findings get (plan), and what became of each after
the re-audit (outcome). The findings come from a run folder's host report or from a night of the
results store (read_store_report, in the same shape): one selection for both. The target side is plugins/modules/ext4_fstab_edit.py and ext4_tune.py.

A finding is planned when it is not waived, its rule has a fix here, and it is selected: named in
the selection (rule id or tag), or, with an empty selection, at or above the minimum severity and
not opt-in. Tailoring and per-host policy are already in the host report's findings (a skipped
rule raised none), so they are respected by reading them."""

import os
from typing import Any, Dict, List, Optional, Sequence

from ext4audit import SEVERITIES, severity_rank
from ext4audit.model import safe_yaml
from ext4audit.report import reports
from ext4audit.rules import catalog
from ext4audit import store as store_pkg
from ext4audit.store import history, schema
from ext4audit.parsers.ext4_parsers.superblock import e2fsprogs_default_journal_blocks

PATH = os.path.join(catalog.RULES_DIR, "remediation.yml")
SCHEMA = "ext4-fleet-audit/remediation/v1"
CLASSES = ("live", "next_mount", "offline", "rebuild")
# what each class needs on a choice, besides name and class
CLASS_FIELDS = {"live": ("fstab", "commands"), "next_mount": ("fstab",), "offline": ("commands",),
                "rebuild": ("plan",)}
CHOICE_FIELDS = {"name", "class", "fstab", "effective", "commands", "when_sb", "plan"}
PLACEHOLDERS = ("{device}", "{journal_mib}")
PENDING_REASONS = {
    "next_mount": "takes effect at the next mount or reboot",
    "offline": "needs the filesystem unmounted and ext4_remediate_offline: true",
    "rebuild": "only mkfs fixes it: see the plan",
}


class RemediationError(ValueError):
    """The remediation data or a selection is not valid; the message names the file and field."""


def load(path: str = PATH, known_rules: Optional[Sequence[str]] = None) -> Dict[str, Any]:
    """The fixes of rules/remediation.yml, checked: {rule id: {opt_in, tradeoff, choices}}."""
    try:
        doc = safe_yaml.load(path)
    except (OSError, safe_yaml.Error, ValueError, RecursionError) as exc:
        raise RemediationError("cannot read %s: %s" % (path, exc))
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise RemediationError("%s: schema must be %s" % (path, SCHEMA))
    fixes = doc.get("fixes")
    if not isinstance(fixes, dict):
        raise RemediationError("%s: fixes must be a mapping of rule id to fix" % path)
    not_covered = doc.get("not_covered") or {}
    for rule_id, fix in fixes.items():
        where = "%s: fixes.%s" % (path, rule_id)
        if known_rules is not None and rule_id not in known_rules:
            raise RemediationError("%s: no such rule in the catalog" % where)
        if not isinstance(fix, dict) or not isinstance(fix.get("tradeoff"), str) or not fix["tradeoff"].strip():
            raise RemediationError("%s.tradeoff: every fix states what it costs (a text)" % where)
        if not isinstance(fix.get("opt_in", False), bool):
            raise RemediationError("%s.opt_in: true or false" % where)
        choices = fix.get("choices")
        if not isinstance(choices, list) or not choices:
            raise RemediationError("%s.choices: a list of at least one fix" % where)
        for index, choice in enumerate(choices):
            _check_choice(choice, "%s.choices[%d]" % (where, index))
    for rule_id in not_covered:
        if rule_id in fixes:
            raise RemediationError("%s: not_covered.%s also has a fix" % (path, rule_id))
    return {"fixes": fixes, "not_covered": not_covered}


def _check_choice(choice: Any, where: str) -> None:
    if not isinstance(choice, dict) or not isinstance(choice.get("name"), str):
        raise RemediationError("%s.name: every choice has a name" % where)
    unknown = set(choice) - CHOICE_FIELDS
    if unknown:
        raise RemediationError("%s: unknown field(s) %s" % (where, ", ".join(sorted(unknown))))
    kind = choice.get("class")
    if kind not in CLASSES:
        raise RemediationError("%s.class: one of %s (got %r)" % (where, ", ".join(CLASSES), kind))
    if not any(field in choice for field in CLASS_FIELDS[kind]):
        raise RemediationError("%s: a %s fix needs %s" % (where, kind, " or ".join(CLASS_FIELDS[kind])))
    fstab = choice.get("fstab")
    if fstab is not None and (not isinstance(fstab, dict) or set(fstab) - {"add", "drop"}
                              or not all(isinstance(fstab.get(k, []), list) for k in ("add", "drop"))):
        raise RemediationError("%s.fstab: a mapping with the lists add and drop" % where)
    if fstab is not None and not choice.get("effective"):
        raise RemediationError("%s.effective: an fstab fix says which options show it in effect" % where)
    for command in choice.get("commands") or []:
        if not isinstance(command, list) or not all(isinstance(arg, str) for arg in command) or not command:
            raise RemediationError("%s.commands: each command is a list of strings" % where)


def journal_mib(superblock: Dict[str, Any]) -> Optional[int]:
    """The journal mke2fs >= 1.43.2 makes for this filesystem's size, in MiB."""
    blocks = e2fsprogs_default_journal_blocks(superblock.get("block_count") or 0)
    if not blocks or not superblock.get("block_size"):
        return None
    return blocks * superblock["block_size"] // (1024 * 1024)


def _applies(choice: Dict[str, Any], superblock: Optional[Dict[str, Any]]) -> bool:
    absent = (choice.get("when_sb") or {}).get("features_absent") or []
    if not absent:
        return True
    return superblock is not None and not any(f in superblock.get("features", []) for f in absent)


def selected(finding: Dict[str, Any], fix: Dict[str, Any], rules: Sequence[str], min_severity: str) -> bool:
    """Whether a finding is picked: never a waived one; named by rule id or tag; or, with no
    selection, at or above min_severity and not opt-in."""
    if finding.get("waived"):
        return False
    if rules:
        return finding["rule"] in rules or bool(set(finding.get("tags") or []) & set(rules))
    return not fix.get("opt_in") and severity_rank(finding["severity"]) >= severity_rank(min_severity)


def plan_host(report: Dict[str, Any], data: Dict[str, Any], rules: Sequence[str] = (),
              min_severity: str = "medium", choices: Optional[Dict[str, str]] = None) -> List[Dict[str, Any]]:
    """The fixes for one host report: one item per selected finding with a fix."""
    if min_severity not in SEVERITIES:
        raise RemediationError("ext4_remediate_min_severity: one of %s (got %r)" % (", ".join(SEVERITIES), min_severity))
    choices = choices or {}
    filesystems = dict((fs.get("mountpoint"), fs) for fs in report.get("filesystems") or [])
    items = []
    # in one order whatever the source (a run folder's report, the store's rows): the same night, the same plan
    for finding in sorted(report.get("findings") or [], key=lambda f: (f.get("mountpoint") or "", f["rule"],
                                                                       f.get("device") or "")):
        fix = data["fixes"].get(finding["rule"])
        if fix is None or not selected(finding, fix, rules, min_severity):
            continue
        fs = filesystems.get(finding.get("mountpoint")) or {}
        superblock = fs.get("superblock")
        wanted = choices.get(finding["rule"])
        options = [c for c in fix["choices"] if c["name"] == wanted] if wanted else \
            [c for c in fix["choices"] if _applies(c, superblock)]
        if not options:
            raise RemediationError("ext4_remediate_choices.%s: no choice %r (the choices: %s)" % (
                finding["rule"], wanted, ", ".join(c["name"] for c in fix["choices"])))
        choice = options[0]
        fill = {"{device}": finding.get("device") or fs.get("device") or "",
                "{journal_mib}": str(journal_mib(superblock) or "") if superblock else ""}
        commands = [[_fill(arg, fill) for arg in command] for command in choice.get("commands") or []]
        items.append({
            "rule": finding["rule"], "severity": finding["severity"], "mountpoint": finding.get("mountpoint"),
            "device": fill["{device}"], "choice": choice["name"], "class": choice["class"],
            "tradeoff": " ".join(fix["tradeoff"].split()),
            "fstab": choice.get("fstab"), "effective": choice.get("effective") or {},
            "commands": commands, "plan": " ".join((choice.get("plan") or "").split()) or None,
        })
    return items


def _fill(arg: str, fill: Dict[str, str]) -> str:
    for key, value in fill.items():
        if key in arg:
            if not value:
                raise RemediationError("cannot fill %s in %r: the host report lacks it" % (key, arg))
            arg = arg.replace(key, value)
    return arg


def read_host_report(run_dir: str, host: str) -> Dict[str, Any]:
    """hosts/<host>.json of a run folder (the audit's own file name for the host)."""
    path = reports.host_report_path(run_dir, host)
    return reports.read_json(path, "host report")


def _open_store(location: str) -> Any:
    """The results store to read a night from; a path that is no file is an error, never a new empty store."""
    if not store_pkg.is_url(location) and not os.path.isfile(location):
        raise RemediationError("ext4_remediate_store: %s is not a file (the SQLite store, e.g. reports/%s, or a "
                               "postgresql:// URL)" % (location, store_pkg.DEFAULT_NAME))
    try:
        return schema.open_store(location)
    except store_pkg.StoreError as exc:
        raise RemediationError("ext4_remediate_store: %s" % exc)


def store_night(location: str, run_id: str = "") -> str:
    """The night of the store the remediation reads: run_id, checked complete; empty: the latest complete night."""
    with _open_store(location) as store:
        if not run_id:
            latest = history.nights(store, 1)
            if not latest:
                raise RemediationError("ext4_remediate_store: %s has no complete night" % store.name)
            return latest[0][0]
        row = store.one("SELECT complete FROM runs WHERE run_id = ?", (run_id,))
    if row is None or not row[0]:
        raise RemediationError("ext4_remediate_store_run: %s %s in %s (a complete night is needed: its findings "
                               "are sure)" % (run_id, "is incomplete" if row else "is no run", store_pkg.display(location)))
    return run_id


def read_store_report(location: str, run_id: str, host: str) -> Dict[str, Any]:
    """One host's night (run_id, checked complete; empty: the latest complete one) from the store,
    in the host report's shape plan_host reads; the findings' tags are the catalog's, as the audit gave them."""
    run_id = store_night(location, run_id)
    with _open_store(location) as store:
        report = history.host_night(store, run_id, host)
    if report is None:
        raise RemediationError("%s, night %s: no host %s" % (store_pkg.display(location), run_id, host))
    rules = catalog.load().by_id
    for finding in report["findings"]:
        finding["tags"] = list((rules.get(finding["rule"]) or {}).get("tags") or [])
    return report


def outcome(items: List[Dict[str, Any]], applied: List[Dict[str, Any]], after: Dict[str, Any]) -> List[Dict[str, Any]]:
    """Per planned finding: fixed (the re-audit no longer raises it on a filesystem it saw),
    pending (with the class and why) or failed (with the reason). applied: the registered results
    of applying them ({item, failed, msg, pending}), matched by rule and mount point."""
    still = set((f["rule"], f.get("mountpoint")) for f in after.get("findings") or [])
    seen = set(fs.get("mountpoint") for fs in after.get("filesystems") or [])
    results = []
    for item in items:
        key = (item["rule"], item["mountpoint"])
        done = [a for a in applied if not a.get("skipped")
                and (a.get("item", {}).get("rule"), a.get("item", {}).get("mountpoint")) == key]
        errors = [a.get("msg") or "failed" for a in done if a.get("failed")]
        pending = [a["pending"] for a in done if a.get("pending")]
        entry = {"rule": item["rule"], "mountpoint": item["mountpoint"], "class": item["class"]}
        if errors:
            entry.update(status="failed", reason="; ".join(errors))
        elif key not in still and item["mountpoint"] in seen:
            entry.update(status="fixed", reason=None)
        elif pending:
            entry.update(status="pending", reason=pending[0])
        elif item["class"] in PENDING_REASONS and not (item["class"] == "offline" and done):
            entry.update(status="pending", reason=PENDING_REASONS[item["class"]])
        elif item["mountpoint"] not in seen:
            entry.update(status="pending", reason="applied; the filesystem was not mounted at the re-audit")
        else:
            entry.update(status="failed", reason="applied, but the re-audit still raises the finding")
        results.append(entry)
    return results
