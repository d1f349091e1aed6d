"""Waivers: accepted findings, with a reason, an approver and an expiry date.

File format (YAML, kept in the inventory folder as waivers.yml):

    waivers:
      - rule: EXT4_DIOREAD_NOLOCK_NODELALLOC    # a rule id, required
        hosts: [db-01]                           # optional: inventory hostnames (host level)
        groups: [tikv]                           # optional: inventory groups (group level)
        mountpoints: ["/data*"]                  # optional: fnmatch globs; none = every mount
        justification: TiKV requires nodelalloc  # required
        approver: storage-team                   # required
        expires: 2027-03-31                      # required, UTC: waives until 2027-03-31T00:00:00Z
        records: [CVE-2023-53149]                # optional: kernel CNA records (KERNEL_EXT4_*_UNFIXED)

With neither hosts nor groups a waiver is fleet-wide (all level). With records, a waiver takes those
records out of a kernel record finding's list (its evidence kernel_records and its message); the
finding is waived once no record is left. A waived finding stays in the
report, marked waived. An expired waiver waives nothing and is listed loudly in every report.
Semantics follow InSpec's (justification required, expiry evaluated at run time) with the
expiry pinned to UTC.

No other fields: a misspelt one would widen the waiver. justification and approver are text and
the lists hold names: a number or a mapping is an error, never turned into text. An expiry's
year runs from 2000 to 2100 (0999 or 20277 is a typo), and expiries compare as moments.
"""

import datetime
import fnmatch
import re

from . import contract, kernel_records, reports, safe_yaml

REQUIRED = ("rule", "justification", "approver", "expires")
SCOPES = ("hosts", "groups", "mountpoints")
RECORDS = "records"  # kernel CNA record ids, for the {kernel_records: CLASS} rules
_RECORD_ID = re.compile(contract.RECORD_ID_PATTERN)
FIRST_YEAR, LAST_YEAR = 2000, 2100  # an expiry outside these is a typo (0999, 20277), not a policy


class WaiverError(ValueError):
    """The waiver file is invalid; the message names the entry and the field."""


def _expiry(value, where):
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
    # ValueError: a timestamp that is no date (2027-02-30); RecursionError: absurd nesting
    except (OSError, safe_yaml.Error, ValueError, RecursionError) as exc:
        raise WaiverError("cannot read waiver file %s: %s" % (path, exc))
    return parse(doc, known_rules, source=path)


def _names(entry, field, where):
    """hosts, groups or mountpoints: a list of non-empty strings (never numbers turned into text:
    a waiver must say exactly what it waives)."""
    value = entry.get(field)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(item, str) and item for item in value):
        raise WaiverError("%s: %s must be a list of names (quote numbers), got %r" % (where, field, value))
    return value


def parse(doc, known_rules=None, source="waivers"):
    if doc is None:
        return []
    if not isinstance(doc, dict) or not isinstance(doc.get("waivers", []), list):
        raise WaiverError("%s: expected a mapping with a 'waivers' list" % source)
    waivers = []
    for index, entry in enumerate(doc.get("waivers") or [], 1):
        if not isinstance(entry, dict):
            raise WaiverError("%s: waiver #%d is not a mapping" % (source, index))
        rule = entry.get("rule")
        where = "%s: waiver #%d (%s)" % (source, index, rule if isinstance(rule, str) else "no rule")
        for field in REQUIRED:
            if entry.get(field) is None or entry.get(field) == "":
                raise WaiverError("%s has no %s; every waiver needs %s" % (where, field, ", ".join(REQUIRED)))
        fields = REQUIRED + SCOPES + (RECORDS,)
        unknown = sorted((str(key) for key in entry if key not in fields))
        if unknown:  # a misspelt hosts: or mountpoints: would widen the waiver to the whole fleet
            raise WaiverError("%s: unknown field %s (fields: %s)" % (where, unknown[0], ", ".join(fields)))
        if not isinstance(rule, str):
            raise WaiverError("%s: waiver #%d: rule must be a rule id, got %r" % (source, index, rule))
        if known_rules is not None and rule not in known_rules:
            raise WaiverError("%s: waiver #%d names unknown rule %s" % (source, index, rule))
        for field in ("justification", "approver"):
            if not isinstance(entry[field], str) or not entry[field].strip():
                raise WaiverError("%s: %s must be text, got %r" % (where, field, entry[field]))
        scopes = dict((field, _names(entry, field, where)) for field in SCOPES + (RECORDS,))
        bad = [record for record in scopes[RECORDS] if not _RECORD_ID.match(record)]
        if bad or (RECORDS in entry and not scopes[RECORDS]):  # an empty list would waive every record
            raise WaiverError("%s: records must be a non-empty list of CVE ids (CVE-YYYY-NNNN), got %r"
                              % (where, entry[RECORDS]))
        waivers.append(dict(scopes, index=index, rule=rule, justification=entry["justification"].strip(),
                            approver=entry["approver"].strip(), expires=_expiry(entry["expires"], where)))
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
            record["expires"] = reports.stamp(waiver["expires"])
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
        finding["message"] = finding["message"].replace(kernel_records.describe(items), kernel_records.describe(kept))
        evidence["kernel_records"] = kept
    return bool(kept)
