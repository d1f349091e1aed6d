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

With neither hosts nor groups a waiver is fleet-wide (all level). A waived finding stays in the
report, marked waived. An expired waiver waives nothing and is listed loudly in every report.
Semantics follow InSpec's (justification required, expiry evaluated at run time) with the
expiry pinned to UTC.
"""

import datetime
import fnmatch

import yaml

REQUIRED = ("rule", "justification", "approver", "expires")


class WaiverError(ValueError):
    """The waiver file is invalid; the message names the entry and the field."""


def _expiry(value, index):
    if isinstance(value, datetime.datetime):
        moment = value
    elif isinstance(value, datetime.date):
        moment = datetime.datetime(value.year, value.month, value.day)
    else:
        try:
            moment = datetime.datetime.strptime(str(value).replace("Z", ""), "%Y-%m-%d")
        except ValueError:
            try:
                moment = datetime.datetime.strptime(str(value).replace("Z", ""), "%Y-%m-%dT%H:%M:%S")
            except ValueError:
                raise WaiverError("waiver #%d: expires %r is not a date (YYYY-MM-DD, UTC)" % (index, value))
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=datetime.timezone.utc)
    return moment.astimezone(datetime.timezone.utc)


def load(path, known_rules=None):
    """Read and validate a waiver file. A missing file means no waivers."""
    try:
        with open(path, "rb") as handle:  # bytes: PyYAML checks the encoding (ReaderError)
            doc = yaml.safe_load(handle)
    except FileNotFoundError:
        return []
    # ValueError: a timestamp that is no date (2027-02-30); RecursionError: absurd nesting
    except (OSError, yaml.YAMLError, ValueError, RecursionError) as exc:
        raise WaiverError("cannot read waiver file %s: %s" % (path, exc))
    return parse(doc, known_rules, source=path)


def parse(doc, known_rules=None, source="waivers"):
    if doc is None:
        return []
    if not isinstance(doc, dict) or not isinstance(doc.get("waivers", []), list):
        raise WaiverError("%s: expected a mapping with a 'waivers' list" % source)
    waivers = []
    for index, entry in enumerate(doc.get("waivers") or [], 1):
        if not isinstance(entry, dict):
            raise WaiverError("%s: waiver #%d is not a mapping" % (source, index))
        for field in REQUIRED:
            if not str(entry.get(field) or "").strip():
                raise WaiverError("%s: waiver #%d (%s) has no %s; every waiver needs %s"
                                  % (source, index, entry.get("rule", "no rule"), field, ", ".join(REQUIRED)))
        if not isinstance(entry["rule"], str):
            raise WaiverError("%s: waiver #%d: rule must be a rule id, got %r" % (source, index, entry["rule"]))
        if known_rules is not None and entry["rule"] not in known_rules:
            raise WaiverError("%s: waiver #%d names unknown rule %s" % (source, index, entry["rule"]))
        for field in ("hosts", "groups", "mountpoints"):
            if not isinstance(entry.get(field, []), list):
                raise WaiverError("%s: waiver #%d: %s must be a list" % (source, index, field))
        waivers.append({
            "index": index,
            "rule": entry["rule"],
            "hosts": [str(h) for h in entry.get("hosts") or []],
            "groups": [str(g) for g in entry.get("groups") or []],
            "mountpoints": [str(m) for m in entry.get("mountpoints") or []],
            "justification": str(entry["justification"]).strip(),
            "approver": str(entry["approver"]).strip(),
            "expires": _expiry(entry["expires"], index).strftime("%Y-%m-%dT%H:%M:%SZ"),
        })
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
    stamp = now.strftime("%Y-%m-%dT%H:%M:%SZ")
    for finding in findings:
        for waiver in waivers:
            if not matches(waiver, host, groups, finding):
                continue
            record = dict((k, waiver[k]) for k in ("rule", "justification", "approver", "expires"))
            if waiver["expires"] > stamp:
                finding["waived"], finding["waiver"] = True, dict(record, status="active")
                break
            finding["waiver"] = dict(record, status="expired")
            if record not in expired:
                expired.append(record)
    return expired
