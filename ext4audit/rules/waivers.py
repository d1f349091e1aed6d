"""Waivers: accepted findings, with a reason, an approver and an expiry date.

File format (YAML, kept in the inventory folder as .ext4audit/waivers.yml):

    waivers:
      - rule: EXT4_DIOREAD_NOLOCK_NODELALLOC    # a rule id, required
        hosts: [db-01]                           # optional: inventory hostnames (host level)
        groups: [tikv]                           # optional: inventory groups (group level)
        mountpoints: ["/data*"]                  # optional: fnmatch globs; none = every mount
        justification: TiKV requires nodelalloc  # required
        approver: storage-team                   # required
        expires: 2027-03-31                      # required, UTC: waives until 2027-03-31T00:00:00Z
        records: [CVE-2023-53149]                # optional: kernel CNA records (KERNEL_EXT4_* record rules)

With neither hosts nor groups a waiver is fleet-wide (all level). With records, a waiver takes those
records out of a kernel record finding's list (its evidence kernel_records and its message); the
finding is waived once no record is left. A waived finding stays in the
report, marked waived. An expired waiver waives nothing and is listed loudly in every report.
Semantics follow InSpec's (justification required, expiry evaluated at run time) with the
expiry pinned to UTC.

The file's shape is the contract's (contract.WaiverFile, published as schemas/waivers.json): no
other fields, a misspelt one would widen the waiver; justification and approver are text and the
lists hold names: a number or a mapping is an error, never turned into text. An expiry's year
runs from 2000 to 2100 (0999 or 20277 is a typo), and expiries compare as moments.
"""

import datetime
import fnmatch

import msgspec
import yaml

from ext4audit.model import contract, safe_yaml
from ext4audit.rules import kernel_records
from ext4audit.model import times

SCOPES = ("hosts", "groups", "mountpoints")
RECORDS = "records"  # kernel CNA record ids, for the {kernel_records: CLASS} rules
REQUIRED, FIELDS = contract.field_names(contract.Waiver)
FIRST_YEAR, LAST_YEAR = 2000, 2100  # an expiry outside these is a typo (0999, 20277), not a policy
# what a field must be, for the message when the contract's model refuses it
NEEDS = {"rule": "a rule id", "justification": "text", "approver": "text",
         "hosts": "a list of names", "groups": "a list of names", "mountpoints": "a list of names",
         RECORDS: "a non-empty list of CVE ids (CVE-YYYY-NNNN)"}


class WaiverError(ValueError):
    """The waiver file is invalid; the message names the entry and the field."""


def _expiry(value, where):
    """A date, or a date and time (docs/waivers-and-tailoring.md), as a moment in UTC: more than
    the model's date can say, so expires is read here and the model checks the date of it."""
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, datetime.date):
        moment = datetime.datetime(value.year, value.month, value.day)
    elif isinstance(value, str):
        for form in ("%Y-%m-%d", "%Y-%m-%dT%H:%M:%S"):
            try:
                moment = datetime.datetime.strptime(value.replace("Z", ""), form)
                break
            except ValueError:
                continue
        else:
            raise WaiverError("%s: expires %r is not a date (YYYY-MM-DD, UTC)" % (where, value))
    else:
        raise WaiverError("%s: expires %r is not a date (YYYY-MM-DD, UTC)" % (where, value))
    if not FIRST_YEAR <= moment.year <= LAST_YEAR:
        raise WaiverError("%s: expires %s is not a year from %d to %d"
                          % (where, moment.date().isoformat(), FIRST_YEAR, LAST_YEAR))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc)


def load(path, known_rules=None):
    """Read and validate a waiver file. A missing file means no waivers."""
    try:
        doc = safe_yaml.load(path)
    except FileNotFoundError:
        return []
    except ValueError as exc:  # a timestamp that is no date (2027-13-01): say which waiver and field
        raise WaiverError(_bad_timestamp(path, exc))
    # RecursionError: absurd nesting
    except (OSError, safe_yaml.Error, RecursionError) as exc:
        raise WaiverError("cannot read waiver file %s: %s" % (path, exc))
    return parse(doc, known_rules, source=path)


def _bad_timestamp(path: str, exc: ValueError) -> str:
    """The waiver and field whose YAML timestamp is no date (the loader's error names neither)."""
    try:
        root = safe_yaml.compose(path)
    except (OSError, safe_yaml.Error, ValueError, RecursionError):
        root = None
    entries = [value for key, value in getattr(root, "value", []) if isinstance(root, yaml.MappingNode)
               and getattr(key, "value", None) == "waivers" and isinstance(value, yaml.SequenceNode)]
    for index, entry in enumerate(entries[0].value if entries else [], 1):
        fields = entry.value if isinstance(entry, yaml.MappingNode) else []
        for key, value in fields:
            if isinstance(value, yaml.ScalarNode) and value.tag == "tag:yaml.org,2002:timestamp":
                try:
                    yaml.SafeLoader.construct_yaml_timestamp(yaml.SafeLoader(""), value)
                except ValueError as why:
                    rule = dict((k.value, v.value) for k, v in fields if isinstance(v, yaml.ScalarNode)).get("rule")
                    return "%s: %s is not a date (%s)" % (
                        _where(path, index, {"rule": rule}), "%s %r" % (key.value, value.value), why)
    return "cannot read waiver file %s: a date that is no date (%s)" % (path, exc)


def _where(source, index, entry):
    rule = entry.get("rule") if isinstance(entry, dict) else None
    return "%s: waiver #%d (%s)" % (source, index, rule if isinstance(rule, str) else "no rule")


def _unset(value):
    return value is None or value == ""


def _refused(exc, doc, source):
    """The model's refusal as a message naming the file, the waiver (#n and its rule) and the field."""
    failed = contract.failure(exc, contract.WaiverFile)
    if len(failed.steps) < 2:
        return "%s: expected a mapping with a 'waivers' list (%s)" % (source, contract.explain(exc, contract.WaiverFile))
    index = failed.steps[1]
    entry = doc["waivers"][index]
    where = _where(source, index + 1, entry)
    if len(failed.steps) == 2 and failed.field is None:
        return "%s: waiver #%d is not a mapping" % (source, index + 1)
    field = failed.field if len(failed.steps) == 2 else failed.steps[2]
    if field in REQUIRED and _unset(entry.get(field)):  # missing, null or ""
        return "%s has no %s; every waiver needs %s" % (where, field, ", ".join(REQUIRED))
    if field not in FIELDS:  # a misspelt hosts: or mountpoints: would widen the waiver to the whole fleet
        return "%s: unknown field %s (fields: %s)" % (where, field, ", ".join(FIELDS))
    return "%s: %s must be %s%s, got %r" % (where, field, NEEDS[field], failed.hint, entry[field])


def parse(doc, known_rules=None, source="waivers"):
    """The waivers of a waiver file's document: its shape is the contract's (contract.WaiverFile);
    what a model cannot say is checked here (a known rule, text that is not blank, the expiry)."""
    if doc is None:
        return []
    entries = doc.get("waivers") if isinstance(doc, dict) else None
    expiries = {}  # read by _expiry (a date, or a date and time); the model checks the date of each
    if isinstance(entries, list):
        for index, entry in enumerate(entries, 1):
            if isinstance(entry, dict) and not _unset(entry.get("expires")):
                expiries[index] = _expiry(entry["expires"], _where(source, index, entry))
        doc = dict(doc, waivers=[dict(entry, expires=expiries[index].date()) if index in expiries else entry
                                 for index, entry in enumerate(entries, 1)])
    try:
        msgspec.convert(doc, contract.WaiverFile, strict=True)
    except msgspec.ValidationError as exc:
        raise WaiverError(_refused(exc, doc, source))
    waivers = []
    for index, entry in enumerate(entries or [], 1):
        where = _where(source, index, entry)
        if known_rules is not None and entry["rule"] not in known_rules:
            raise WaiverError("%s: waiver #%d names unknown rule %s" % (source, index, entry["rule"]))
        for field in ("justification", "approver"):
            if not entry[field].strip():
                raise WaiverError("%s: %s must be text, got %r" % (where, field, entry[field]))
        waivers.append(dict(((field, entry.get(field) or []) for field in SCOPES + (RECORDS,)), index=index,
                            rule=entry["rule"], justification=entry["justification"].strip(),
                            approver=entry["approver"].strip(), expires=expiries[index]))
    return waivers


def matches(waiver, host, groups, finding):
    if waiver["rule"] != finding["rule"]:
        return False
    if (waiver["hosts"] or waiver["groups"]) and not (
            host in waiver["hosts"] or set(groups) & set(waiver["groups"])):
        return False
    if waiver["mountpoints"]:
        mountpoint = finding.get("mountpoint")
        return mountpoint is not None and any(fnmatch.fnmatchcase(mountpoint, g) for g in waiver["mountpoints"])
    return True


def apply(findings, waivers, host, groups, now):
    """Mark findings waived (or carrying an expired waiver). Returns the expired waivers that matched."""
    expired = []
    for finding in findings:
        for waiver in waivers:
            if not matches(waiver, host, groups, finding):
                continue
            record = dict((k, waiver[k]) for k in ("rule", "justification", "approver"))
            record["expires"] = times.stamp(waiver["expires"])
            if waiver["expires"] > now:
                if waiver[RECORDS] and _waive_records(finding, waiver[RECORDS], record):
                    continue  # records are left: the finding stands with them
                finding["waived"], finding["waiver"] = True, dict(record, status="active")
                break
            finding["waiver"] = dict(record, status="expired")
            if record not in expired:
                expired.append(record)
    return expired


def _waive_records(finding, ids, waiver):
    """Take the records a waiver names out of a kernel record finding's list (evidence
    kernel_records, and the message while records are left; kernel_records_waived says which and
    by whom). True when records are left: a finding without such a list keeps all it has."""
    evidence = finding.get("evidence") or {}
    items = evidence.get("kernel_records")
    if not items:
        return True
    kept = [item for item in items if item["id"] not in ids]
    evidence.setdefault("kernel_records_waived", []).extend(
        "%s (waived by %s until %s)" % (item["id"], waiver["approver"], waiver["expires"])
        for item in items if item["id"] in ids)
    if kept:
        before = kernel_records.describe(evidence)
        evidence["kernel_records"] = kept
        finding["message"] = finding["message"].replace(before, kernel_records.describe(evidence))
        if (evidence.get("kernel_action") or {}).get("by_class"):  # the severity follows the records left
            finding["severity"], finding["escalated_because"] = kernel_records.class_severity(
                kept, finding["base_severity"])
    return bool(kept)
