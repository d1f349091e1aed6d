"""Questions to the store: a host's timeline, a rule's trend, when findings were first seen and
resolved, who regressed, how long fixes take, the night's gate, and retention.

Only complete runs count as nights: a run whose report step did not finish saw nothing for sure.
A finding is identified as in baseline.py: (host, rule, device, mount point). Its episodes are
the stretches of nights it was present; one ends (resolved) on the first later night its host was
audited without it. A night the host was not audited neither continues nor ends an episode.
"""

import datetime
import json
import statistics
from typing import Dict, List, Optional, Sequence, Tuple

from ext4audit import severity_rank
from ext4audit.report import finding_groups
from ext4audit.report import reports
from ext4audit.store import StoreError, backends
from ext4audit.store.ingest import SLICE_TABLES, WORST
from ext4audit.model import times

DEFAULT_KEEP_DAYS = 400  # a year of nights and a month to compare a year ago with
TREND_NIGHTS = 7  # nights of a finding group's trend in summary.md (group_history)
Identity = Tuple[str, str, Optional[str], Optional[str]]


def nights(store: backends.Store, limit: Optional[int] = None, until: Optional[str] = None,
           scope: str = "") -> List[tuple]:
    """(run_id, generated_at) of the complete runs, oldest first: the last `limit`, up to `until`;
    with a scope, the nights of that scope and those of unknown scope (recorded before scopes were,
    as the nightly diff falls back to them: last_night), so a --limit web night is not counted
    among the whole fleet's; without one, every night."""
    where: str = ""
    params: List[str] = []
    if scope:
        where, params = " AND scope IN (?, '')", [scope]
    if until:
        where, params = where + " AND generated_at <= ?", params + [until]
    rows = store.rows("SELECT run_id, generated_at FROM runs WHERE complete = 1%s ORDER BY generated_at DESC, "
                      "run_id DESC%s" % (where, " LIMIT %d" % int(limit) if limit else ""), params)
    return rows[::-1]


def latest_scope(store: backends.Store) -> str:
    """The scope of the last complete night: what `history` counts when no scope is asked for
    (empty: unknown, every night)."""
    row = store.one("SELECT scope FROM runs WHERE complete = 1 ORDER BY generated_at DESC, run_id DESC LIMIT 1")
    return row[0] if row else ""


def runs(store: backends.Store, limit: int = 30) -> List[dict]:
    rows = store.rows("SELECT run_id, generated_at, verdict, complete, hosts, hosts_audited, findings, waived, reason, "
                      "scope FROM runs ORDER BY generated_at DESC, run_id DESC LIMIT %d" % int(limit))
    keys = ("run_id", "generated_at", "verdict", "complete", "hosts", "hosts_audited", "findings", "waived", "reason",
            "scope")
    return [dict(zip(keys, row), complete=bool(row[3])) for row in rows]


def timeline(store: backends.Store, host: str, limit: int = 30) -> List[dict]:
    """The host on each of the last `limit` nights: status, kernel, its findings (rule, severity, mount point, waived)."""
    order = nights(store, limit)
    ids = [n[0] for n in order]
    if not ids:
        return []
    marks = ", ".join("?" * len(ids))
    statuses = dict((r[0], r[1:]) for r in store.rows(
        "SELECT run_id, status, kernel, findings, waived FROM hosts WHERE host = ? AND run_id IN (%s)" % marks,
        [host] + ids))
    found: Dict[str, list] = {}
    for run_id, rule, severity, device, mountpoint, waived in store.rows(
            "SELECT run_id, rule, severity, device, mountpoint, waived FROM findings WHERE host = ? AND run_id IN (%s) "
            "ORDER BY rule, mountpoint" % marks, [host] + ids):
        found.setdefault(run_id, []).append({"rule": rule, "severity": severity, "device": device,
                                             "mountpoint": mountpoint, "waived": bool(waived)})
    out = []
    for run_id, generated_at in order:
        status = statuses.get(run_id)
        out.append({"run_id": run_id, "generated_at": generated_at, "status": status[0] if status else "absent",
                    "kernel": status[1] if status else None, "findings": found.get(run_id, [])})
    return out


def trend(store: backends.Store, rule: Optional[str] = None, limit: int = 30, scope: str = "") -> List[dict]:
    """Per night (the last `limit` of `scope`: nights): unwaived findings and the hosts with one (of
    `rule`, or of every rule), waived ones."""
    order = nights(store, limit, scope=scope)
    if not order:
        return []
    ids = [n[0] for n in order]
    # counted at ingest: a rule's in rule_counts, the fleet's in runs (30 rows, not 30 nights of findings)
    rows = store.rows("SELECT run_id, SUM(findings), SUM(hosts), SUM(waived) FROM rule_counts WHERE run_id IN (%s) "
                      "AND rule = ? GROUP BY run_id" % ", ".join("?" * len(ids)), ids + [rule]) if rule else store.rows(
        "SELECT run_id, findings, hosts_with_findings, waived FROM runs WHERE run_id IN (%s)" % ", ".join("?" * len(ids)),
        ids)
    counts = dict((r[0], r[1:]) for r in rows)
    audited = dict(store.rows("SELECT run_id, hosts_audited FROM runs WHERE run_id IN (%s)" % ", ".join("?" * len(ids)),
                              ids))
    return [{"run_id": run_id, "generated_at": at, "rule": rule, "findings": int((counts.get(run_id) or (0,))[0] or 0),
             "hosts": int((counts.get(run_id) or (0, 0))[1] or 0), "waived": int((counts.get(run_id) or (0, 0, 0))[2] or 0),
             "hosts_audited": audited.get(run_id)} for run_id, at in order]


def images(store: backends.Store, image: Optional[str] = None, limit: int = 30, scope: str = "") -> List[dict]:
    """Per night (the last `limit` of `scope`: nights): the hosts on each image (ingest.image_of;
    "" unknown), the most first; with `image`, only that one, 0 on a night without it: how many
    still run it."""
    order = nights(store, limit, scope=scope)
    if not order:
        return []
    ids = [n[0] for n in order]
    counts: Dict[str, Dict[str, int]] = {}
    for run_id, name, hosts in store.rows(
            "SELECT run_id, image, SUM(hosts) FROM image_counts WHERE run_id IN (%s)%s GROUP BY run_id, image"
            % (", ".join("?" * len(ids)), " AND image = ?" if image is not None else ""),
            ids + ([image] if image is not None else [])):
        counts.setdefault(run_id, {})[name] = int(hosts)
    out = []
    for run_id, at in order:
        night = counts.get(run_id, {})
        if image is not None:
            night = {image: night.get(image, 0)}
        out += [{"run_id": run_id, "generated_at": at, "image": name, "hosts": hosts}
                for name, hosts in sorted(night.items(), key=lambda item: (-item[1], item[0]))]
    return out


def episodes(store: backends.Store, host: Optional[str] = None, rule: Optional[str] = None) -> List[dict]:
    """Each finding's stretches of presence: first_seen, last_seen, resolved (None while open),
    waived (on its last night), nights present. Filtered by host and/or rule."""
    order = nights(store)
    position = dict((run_id, i) for i, (run_id, _) in enumerate(order))
    when = [at for _, at in order]
    where, params = [], []
    for column, value in (("host", host), ("rule", rule)):
        if value:
            where.append("f.%s = ?" % column)
            params.append(value)
    present: Dict[Identity, Dict[int, tuple]] = {}
    for run_id, f_host, f_rule, severity, device, mountpoint, waived in store.rows(
            "SELECT f.run_id, f.host, f.rule, f.severity, f.device, f.mountpoint, f.waived FROM findings f "
            "JOIN runs r ON r.run_id = f.run_id AND r.complete = 1%s" % (
                " WHERE " + " AND ".join(where) if where else ""), params):
        present.setdefault((f_host, f_rule, device, mountpoint), {})[position[run_id]] = (severity, bool(waived))
    hosts = sorted(set(key[0] for key in present))
    audited: Dict[str, set] = dict((h, set()) for h in hosts)
    for start in range(0, len(hosts), 500):
        part = hosts[start:start + 500]
        for run_id, a_host in store.rows("SELECT h.run_id, h.host FROM hosts h JOIN runs r ON r.run_id = h.run_id AND "
                                         "r.complete = 1 WHERE h.status = 'audited' AND h.host IN (%s)"
                                         % ", ".join("?" * len(part)), part):
            audited[a_host].add(position[run_id])
    out = []
    for key, seen in sorted(present.items(), key=lambda item: tuple(v or "" for v in item[0])):
        episode = None
        for night in range(len(order)):
            if night in seen:
                if episode is None:
                    episode = {"host": key[0], "rule": key[1], "device": key[2], "mountpoint": key[3],
                               "first_seen": when[night], "last_seen": None, "resolved": None, "nights": 0}
                episode.update(last_seen=when[night], severity=seen[night][0], waived=seen[night][1])
                episode["nights"] += 1
            elif episode is not None and night in audited[key[0]]:
                episode["resolved"] = when[night]
                out.append(episode)
                episode = None
        if episode is not None:
            out.append(episode)
    return out


def first_seen(store: backends.Store, run_id: str) -> Dict[Identity, str]:
    """The night each finding of run_id was first seen (on any complete night, its own included)."""
    rows = store.rows("SELECT f.host, f.rule, f.device, f.mountpoint, MIN(r.generated_at) FROM findings f "
                      "JOIN runs r ON r.run_id = f.run_id AND r.complete = 1 WHERE EXISTS (SELECT 1 FROM findings c "
                      "WHERE c.run_id = ? AND c.host = f.host AND c.rule = f.rule) "
                      "GROUP BY f.host, f.rule, f.device, f.mountpoint", (run_id,))
    mine = set(store.rows("SELECT host, rule, device, mountpoint FROM findings WHERE run_id = ?", (run_id,)))
    return dict((row[:4], row[4]) for row in rows if row[:4] in mine)


def regressed(store: backends.Store, since: str, scope: str = "") -> List[dict]:
    """Hosts with an unwaived finding on the latest night that they did not have on the last night
    up to `since` (a stamp or a date), both nights of `scope` (nights), the host audited on the latest."""
    latest, before = nights(store, 1, scope=scope), nights(store, 1, until=_stamp(since), scope=scope)
    if not latest or not before:
        return []
    now, then = latest[0][0], before[0][0]
    rows = store.rows(
        "SELECT f.host, f.rule, f.severity, f.device, f.mountpoint FROM findings f "
        "JOIN hosts h ON h.run_id = ? AND h.host = f.host AND h.status = 'audited' "
        "WHERE f.run_id = ? AND f.waived = 0 AND NOT EXISTS (SELECT 1 FROM findings o WHERE o.run_id = ? "
        "AND o.host = f.host AND o.rule = f.rule AND o.waived = 0 "
        "AND COALESCE(o.device, '') = COALESCE(f.device, '') AND COALESCE(o.mountpoint, '') = COALESCE(f.mountpoint, '')) "
        "ORDER BY f.host, f.rule", (then, now, then))
    out: Dict[str, dict] = {}
    for host, rule, severity, device, mountpoint in rows:
        out.setdefault(host, {"host": host, "since_run": then, "run": now, "findings": []})["findings"].append(
            {"rule": rule, "severity": severity, "device": device, "mountpoint": mountpoint})
    return list(out.values())


def time_to_fix(store: backends.Store) -> List[dict]:
    """By rule and severity: findings fixed (episodes resolved), days from first seen to resolved
    (median, max), and still open."""
    groups: Dict[tuple, dict] = {}
    for episode in episodes(store):
        group = groups.setdefault((episode["rule"], episode["severity"]), {"days": [], "open": 0})
        if episode["resolved"]:
            group["days"].append((times.moment_of(episode["resolved"]) -
                                  times.moment_of(episode["first_seen"])).total_seconds() / 86400)
        else:
            group["open"] += 1
    return [{"rule": rule, "severity": severity, "fixed": len(g["days"]),
             "median_days": round(statistics.median(g["days"]), 2) if g["days"] else None,
             "max_days": round(max(g["days"]), 2) if g["days"] else None, "open": g["open"]}
            for (rule, severity), g in sorted(groups.items())]


def gate(store: backends.Store, run_id: str, expect: Sequence[str] = (),
         count: Optional[int] = None) -> Tuple[str, str, List[dict]]:
    """The night's verdict from the store: (verdict, reason, its slices). A slice in `expect` that
    did not report makes it incomplete; so do fewer than `count` slices, and an incomplete slice."""
    run = store.one("SELECT verdict, reason, complete FROM runs WHERE run_id = ?", (run_id,))
    if run is None:
        raise StoreError("store %s has no run %r: no slice of it reported" % (store.name, run_id))
    keys = ("slice", "verdict", "complete", "hosts", "hosts_audited", "findings", "generated_at", "reason")
    slices = [dict(zip(keys, row), complete=bool(row[2])) for row in store.rows(
        "SELECT slice, verdict, complete, hosts, hosts_audited, findings, generated_at, reason FROM slices "
        "WHERE run_id = ? ORDER BY slice", (run_id,))]
    reported = [s["slice"] for s in slices]
    missing = [name for name in expect if name not in reported]
    worst = max(slices, key=lambda s: WORST.get(s["verdict"], 2))
    short = count is not None and len(slices) < count
    verdict = "incomplete" if missing or short or not all(s["complete"] for s in slices) else worst["verdict"]
    reason = "run %s: %d slice(s) reported (%s), %d host(s), %d audited" % (
        run_id, len(slices), ", ".join(name or "(unnamed)" for name in reported), sum(s["hosts"] for s in slices),
        sum(s["hosts_audited"] for s in slices))
    if missing:
        reason += "; no report from slice(s) %s" % ", ".join(missing)
    if short:
        reason += "; %d slice(s) expected" % count
    if WORST.get(worst["verdict"], 2) > 0:
        reason += "; slice %s: %s: %s" % (worst["slice"] or "(unnamed)", worst["verdict"], worst["reason"])
    return verdict, reason, slices


def prune(store: backends.Store, keep_days: int, now: Optional[datetime.datetime] = None) -> int:
    """Remove the runs older than keep_days (by when they were reported, else ingested); return how many."""
    if keep_days < 0:
        raise StoreError("--keep-days %d: give 0 or more days" % keep_days)
    cutoff = times.stamp((now or times.utc_now()) - datetime.timedelta(days=keep_days))
    with store.transaction():
        old = [r[0] for r in store.rows("SELECT run_id FROM runs WHERE COALESCE(generated_at, ingested_at) < ?",
                                        (cutoff,))]
        for run_id in old:
            for table in SLICE_TABLES + ("runs",):
                store.execute("DELETE FROM %s WHERE run_id = ?" % table, (run_id,))
    return len(old)


def _stamp(text: str) -> str:
    """A date (end of that day) or a stamp, as a stamp; StoreError otherwise."""
    for form, end in (("%Y-%m-%d", True), (times.STAMP, False)):
        try:
            moment = datetime.datetime.strptime(text, form)
        except ValueError:
            continue
        return times.stamp(moment.replace(hour=23, minute=59, second=59) if end else moment)
    raise StoreError("--since %r: give a date (2026-11-28) or a UTC stamp (2026-11-28T03:00:00Z)" % text)


def scope_of(store: backends.Store, run_id: str) -> str:
    """The scope recorded with run_id (store.scope); empty when unknown or not recorded."""
    row = store.one("SELECT scope FROM runs WHERE run_id = ?", (run_id,))
    return row[0] if row else ""


def last_night(store: backends.Store, other_than: str,
               scope: str = "") -> Optional[Tuple[str, Dict[str, str], Dict[str, dict]]]:
    """The last complete night other than `other_than` of the same scope, for the nightly diff
    (a --limit web night is not compared with a whole fleet's, nor the other way): (run_id, {host:
    status}, {host: {identity: severity}}), a finding found twice at its highest severity; None
    when there is none. Without a night of that scope, the last of unknown scope (recorded before
    scopes were): the first night after an upgrade is still compared. An unknown scope tonight
    (a report run by hand without --scope-hosts) takes the last night of any scope."""
    row = None
    for where in (("AND scope = ?", "AND scope = ''") if scope else ("",)):  # unknown tonight: as before, any
        row = store.one("SELECT run_id FROM runs WHERE complete = 1 AND run_id <> ? %s ORDER BY generated_at DESC, "
                        "run_id DESC LIMIT 1" % where, (other_than, scope) if "?" in where else (other_than,))
        if row is not None:
            break
    if row is None:
        return None
    statuses = dict(store.rows("SELECT host, status FROM hosts WHERE run_id = ?", (row[0],)))
    findings: Dict[str, dict] = {}
    for host, rule, severity, device, mountpoint in store.rows(
            "SELECT host, rule, severity, device, mountpoint FROM findings WHERE run_id = ?", (row[0],)):
        known = findings.setdefault(host, {})
        key = (host, rule, device, mountpoint)
        if key not in known or severity_rank(severity) > severity_rank(known[key]):
            known[key] = severity
    return row[0], statuses, findings


def host_night(store: backends.Store, run_id: str, host: str) -> Optional[dict]:
    """What the store has of one host on one night, in the host report's shape: {"host", "status",
    "findings": [{rule, severity, device, mountpoint, waived}], "filesystems": [{mountpoint, device,
    superblock}]} (only the filesystems with a finding); None when the night did not list the host."""
    status = store.one("SELECT status FROM hosts WHERE run_id = ? AND host = ?", (run_id, host))
    if status is None:
        return None
    findings = [{"rule": rule, "severity": severity, "device": device, "mountpoint": mountpoint, "waived": bool(waived)}
                for rule, severity, device, mountpoint, waived in store.rows(
                    "SELECT rule, severity, device, mountpoint, waived FROM findings WHERE run_id = ? AND host = ?",
                    (run_id, host))]
    filesystems = [{"mountpoint": mountpoint, "device": device, "superblock": json.loads(superblock) if superblock else None}
                   for mountpoint, device, superblock in store.rows(
                       "SELECT mountpoint, device, superblock FROM filesystems WHERE run_id = ? AND host = ?",
                       (run_id, host))]
    return {"host": host, "status": status[0], "findings": findings, "filesystems": filesystems}


def rule_nights(store: backends.Store, scope: str = "") -> dict:
    """Every complete night of `scope` (empty: of any) and, per rule, its hosts with an unwaived
    finding and its waived findings on each, from rule_counts (counted at ingest): one query, a
    row per night and rule, whatever the fleet's size. {"nights": [(run_id, generated_at)],
    "rules": {rule: {run_id: (hosts, waived)}}}; group_history reads it."""
    out: dict = {"nights": [], "rules": {}}
    for run_id, at, rule, hosts, waived in store.rows(
            "SELECT r.run_id, r.generated_at, c.rule, SUM(c.hosts), SUM(c.waived) FROM runs r "
            "LEFT JOIN rule_counts c ON c.run_id = r.run_id WHERE r.complete = 1%s "
            "GROUP BY r.run_id, r.generated_at, c.rule ORDER BY r.generated_at, r.run_id, c.rule"
            % (" AND r.scope = ?" if scope else ""), (scope,) if scope else ()):
        if not out["nights"] or out["nights"][-1][0] != run_id:
            out["nights"].append((run_id, at))
        if rule is not None:
            out["rules"].setdefault(rule, {})[run_id] = (int(hosts or 0), int(waived or 0))
    return out


def group_history_note(data: dict) -> str:
    """What a group's "open since" and trend mean, for the pages that show group_history's rows."""
    return ("Open since: the first of the nights in a row up to the last one (%s) with the group's rule (waived, "
            "for a waived group); trend: hosts with it on each of the last %d nights of this scope (waived "
            "findings, for a waived group), oldest first; the results store keeps rules, so the groups of a rule "
            "share them." % (data["nights"][-1][1], TREND_NIGHTS))


def since_label(past: dict) -> str:
    """A group's "open since" as the pages show it: the night's date, "new" when its rule was not
    on the last night, "-" without nights."""
    return past["open_since"][:10] if past["open_since"] else "new" if past["trend"] else "-"


def group_history(data: dict, groups: "finding_groups.FindingGroups",
                  nights: int = TREND_NIGHTS) -> Dict[tuple, dict]:
    """Per finding group (groups.groups' keys), from rule_nights' data of the nights before this
    run: "open_since", the first night of the unbroken stretch of nights up to the last one on
    which its rule was present (unwaived, or waived for a waived group), None when it was not on
    the last night (new tonight); "trend", its rule's hosts (unwaived groups) or waived findings
    (waived groups) on each of the last `nights` nights, oldest first, as [(generated_at, count)].
    The store keeps rules' counts, not messages: the groups of one rule share its history.
    summary.md and report.html show it (since_label, group_history_note)."""
    order = data["nights"]
    out = {}
    for key in groups.groups:
        counts = data["rules"].get(key[0], {})
        column = 1 if finding_groups.is_waived(key) else 0
        series = [(at, counts.get(run_id, (0, 0))[column]) for run_id, at in order]
        since = None
        for at, count in reversed(series):
            if not count:
                break
            since = at
        out[key] = {"open_since": since, "trend": series[-nights:]}
    return out
