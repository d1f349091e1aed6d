"""The store's command line: `ext4audit history ...`, `gate --store --run`, and the report step's
one call (record_report) that records the run it just wrote."""

import argparse
import functools
import json
import os
import sys
from typing import Any, Dict, List, Optional, Tuple

from ext4audit.report import baseline, reports
from ext4audit.store import DEFAULT_NAME, OFF, StoreError, display, history, ingest, location, schema, scope

SINCE_LINES = 5  # rules named in the report step's "first seen" lines: the oldest, known before tonight


def add_store_option(parser: argparse.ArgumentParser, what: str) -> None:
    parser.add_argument("--store", default="", metavar="URL",
                        help="results store: an SQLite file or a postgresql:// URL (the password from PGPASSWORD "
                             "or PGPASSFILE, never in the URL); %s" % what)


def add_report_options(parser: argparse.ArgumentParser) -> None:
    add_store_option(parser, "empty: <reports>/%s beside the run folders; %s: record nothing" % (DEFAULT_NAME, OFF))
    parser.add_argument("--slice", default="", metavar="NAME",
                        help="record this run folder as slice NAME of its night (AWX job slices, several "
                             "controllers: the same run id, one name each; default: the whole night)")
    add_scope_options(parser)


RECORDED = ("the facts play's hosts pattern (ext4_audit_hosts), recorded as the run's scope with --scope-limit: the "
            "store's nightly diff compares nights of one scope (empty: unknown, compared with any)")
COUNTED = ("the nights counted: those of this scope (the facts play's hosts pattern, with --scope-limit) and those "
           "recorded without one; default: the scope of the last complete night")


def add_scope_options(parser: argparse.ArgumentParser, hosts_help: str = RECORDED) -> None:
    parser.add_argument("--scope-hosts", default="", metavar="PATTERN", help=hosts_help)
    parser.add_argument("--scope-limit", default="", metavar="PATTERN", help="the run's --limit (ansible_limit)")


def run_scope(args: argparse.Namespace) -> str:
    """The scope of the run being reported (store.scope of --scope-hosts and --scope-limit); empty: unknown."""
    hosts, limit = getattr(args, "scope_hosts", ""), getattr(args, "scope_limit", "")
    return scope(hosts or "all", limit) if hosts or limit else ""


def record_report(args: argparse.Namespace, summary: dict, failed: Optional[StoreError] = None) -> List[str]:
    """Record the run folder the report step just finished; return the lines to print above its
    table (each finding rule: how many, and since when the store has seen them). failed: the
    error report_history met opening the store, said again without waiting for it twice."""
    reports_dir = os.path.dirname(os.path.normpath(os.path.abspath(args.run_dir)))
    where = location(args.store, reports_dir)
    if where is None:
        return []
    try:
        if failed is not None:
            raise failed
        with schema.open_store(where) as store:
            done = ingest.ingest(store, args.run_dir, args.slice, scope=run_scope(args))
            seen = history.first_seen(store, done["run_id"])
    except StoreError as exc:
        raise StoreError("%s (the run folder %s is complete: record it later with `ext4audit history ingest %s`)"
                         % (exc, args.run_dir, args.run_dir))
    return since_lines(seen, summary["generated_at"], display(where))


def report_history(args: argparse.Namespace) -> Tuple[Optional[dict], Optional[StoreError]]:
    """For the finding groups of summary.md and report.html, before tonight is recorded:
    (history.rule_nights of the store the report step records into, nights of this run's scope,
    None without a store (off), without a night of this scope yet, or when it cannot be read;
    the StoreError that says why it could not, for record_report, which then does not try again:
    an unreachable server is waited for once)."""
    reports_dir = os.path.dirname(os.path.normpath(os.path.abspath(args.run_dir)))
    where = location(args.store, reports_dir)
    if where is None:
        return None, None
    try:
        with schema.open_store(where) as store:
            data = history.rule_nights(store, run_scope(args))
    except StoreError as exc:
        return None, exc
    run_id = os.path.basename(os.path.normpath(args.run_dir))  # reported again: its earlier record is not history
    data["nights"] = [night for night in data["nights"] if night[0] != run_id]
    return (data if data["nights"] else None), None  # a first night: nothing to show yet


def since_lines(seen: Dict[tuple, str], tonight: str, where: str) -> List[str]:
    """One line: tonight's findings, how many are new. Then, per rule with findings known before
    tonight (oldest first, at most SINCE_LINES): how many, and since when."""
    rules: Dict[str, list] = {}
    for (_host, rule, _device, _mountpoint), first in seen.items():
        rules.setdefault(rule, []).append(first)
    new = sum(first == tonight for first in seen.values())
    lines = ["history (%s): %d finding(s) tonight, %d new" % (where, len(seen), new)]
    known = sorted(((min(firsts), rule, len(firsts)) for rule, firsts in rules.items() if min(firsts) != tonight))
    for first, rule, how_many in known[:SINCE_LINES]:
        lines.append("  %s: %d, first seen %s" % (rule, how_many, first))
    if len(known) > SINCE_LINES:
        lines.append("  ... %d more rules seen before (ext4audit history findings)" % (len(known) - SINCE_LINES))
    return lines


def cmd_store_gate(args: argparse.Namespace) -> int:
    """gate --store URL --run ID: the whole night from the store, every slice that reported."""
    expect = [name for name in (args.slices or "").split(",") if name]
    with schema.open_store(location(args.store, "reports") or "") as store:
        verdict, reason, _slices = history.gate(store, args.run, expect, args.slice_count)
    print("verdict: %s: %s" % (verdict, reason))
    return reports.EXIT_CODES[verdict]


def add_history_parser(sub: Any) -> None:
    p = sub.add_parser("history", help="the results store: runs, a host's timeline, a rule's trend, first seen and "
                       "resolved, regressions, time to fix; ingest and prune")
    add_store_option(p, "default: reports/history.sqlite")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    # the same options after the question too (`history trend --json`); SUPPRESS keeps the first's value
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    common.add_argument("--json", action="store_true", default=argparse.SUPPRESS, help=argparse.SUPPRESS)
    questions = p.add_subparsers(dest="question")
    questions.add_parser = functools.partial(questions.add_parser, parents=[common])  # type: ignore[method-assign]
    q = questions.add_parser("runs", help="the recorded runs, newest first (the default)")
    q.add_argument("--nights", type=int, default=30)
    q = questions.add_parser("timeline", help="a host's status, kernel and findings night by night")
    q.add_argument("host")
    q.add_argument("--nights", type=int, default=30)
    q = questions.add_parser("trend", help="per night: findings and hosts with one, of a rule or of all")
    q.add_argument("--rule")
    q.add_argument("--nights", type=int, default=30)
    add_scope_options(q, COUNTED)
    q = questions.add_parser("images", help="per night: the hosts on each image (their os-release), or on --image")
    q.add_argument("--image", help="only this image (as `history images` names it): how many hosts still run it")
    q.add_argument("--nights", type=int, default=30)
    add_scope_options(q, COUNTED)
    q = questions.add_parser("findings", help="each finding's first seen, last seen and resolved dates")
    q.add_argument("--host")
    q.add_argument("--rule")
    q = questions.add_parser("regressed", help="hosts with findings on the latest night they did not have at a date")
    q.add_argument("--since", required=True, metavar="DATE", help="2026-11-28 (end of that day) or a UTC stamp")
    add_scope_options(q, COUNTED)
    questions.add_parser("time-to-fix", help="days from first seen to resolved, by rule and severity")
    q = questions.add_parser("prune", help="remove runs older than --keep-days")
    q.add_argument("--keep-days", type=int, default=history.DEFAULT_KEEP_DAYS,
                   help="default: %d" % history.DEFAULT_KEEP_DAYS)
    q = questions.add_parser("ingest", help="record a run folder (one the report step could not record)")
    q.add_argument("run_dir")
    q.add_argument("--slice", default="")
    q.add_argument("--run-id", help="the night to record it in (default: its own run id)")
    add_scope_options(q)
    q = questions.add_parser("where", help="the store the report step of a reports folder records into, as "
                             "shown to people (a URL without its password; empty when --store off); opens nothing")
    q.add_argument("reports_dir")
    p.set_defaults(func=cmd_history)


def cmd_history(args: argparse.Namespace) -> int:
    question = args.question or "runs"
    if question == "where":  # for playbooks (AWX's artifact_data): the one place that says it
        where = location(args.store, args.reports_dir)
        print(display(where) if where else "")
        return 0
    with schema.open_store(location(args.store, "reports") or "") as store:
        if question == "runs":
            result: Any = history.runs(store, getattr(args, "nights", 30))  # also `history` alone
        elif question == "timeline":
            result = history.timeline(store, args.host, args.nights)
        elif question == "trend":
            result = history.trend(store, args.rule, args.nights, run_scope(args) or history.latest_scope(store))
        elif question == "images":
            result = history.images(store, args.image, args.nights, run_scope(args) or history.latest_scope(store))
        elif question == "findings":
            result = history.episodes(store, args.host, args.rule)
        elif question == "regressed":
            result = history.regressed(store, args.since, run_scope(args) or history.latest_scope(store))
        elif question == "time-to-fix":
            result = history.time_to_fix(store)
        elif question == "prune":
            result = {"removed_runs": history.prune(store, args.keep_days), "keep_days": args.keep_days}
        else:
            result = ingest.ingest(store, args.run_dir, args.slice, args.run_id, run_scope(args))
    sys.stdout.write(json.dumps(result, indent=2, sort_keys=True) + "\n" if args.json else table(question, result))
    return 0


COLUMNS = {
    "runs": ("run_id", "generated_at", "verdict", "complete", "hosts", "hosts_audited", "findings", "waived", "scope"),
    "timeline": ("generated_at", "run_id", "status", "kernel", "findings"),
    "trend": ("generated_at", "run_id", "findings", "hosts", "waived", "hosts_audited"),
    "images": ("generated_at", "run_id", "hosts", "image"),
    "findings": ("host", "rule", "severity", "mountpoint", "first_seen", "last_seen", "resolved", "nights", "waived"),
    "regressed": ("host", "since_run", "run", "findings"),
    "time-to-fix": ("rule", "severity", "fixed", "median_days", "max_days", "open"),
}


def _cell(value: Any) -> str:
    if isinstance(value, list):
        return "; ".join("%s%s%s" % (v["rule"], " " + v["mountpoint"] if v.get("mountpoint") else "",
                                     " (waived)" if v.get("waived") else "") for v in value) or "-"
    return "-" if value is None else str(value)


def _printable(text: str) -> str:
    """Host names and mount points are data: a control character is shown escaped, never sent to the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def table(question: str, result: Any) -> str:
    """A plain text table of a history answer (its JSON has every field)."""
    if isinstance(result, dict):
        return "".join("%s: %s\n" % item for item in sorted(result.items()))
    columns = COLUMNS[question]
    rows = [[_printable(_cell(row.get(c))) for c in columns] for row in result]
    widths = [max([len(c)] + [len(r[i]) for r in rows]) for i, c in enumerate(columns)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(columns, widths)).rstrip()]
    lines += ["  ".join(v.ljust(w) for v, w in zip(row, widths)).rstrip() for row in rows]
    return "\n".join(lines) + "\n" + ("(none)\n" if not rows else "")


class StoreBaseline(baseline.Baseline):
    """The nightly diff's baseline from the store: the last complete night's hosts and findings
    (checked when they were recorded), in memory; picklable for the report step's workers."""

    def __init__(self, run_id: str, path: str, statuses: Dict[str, str], findings: Dict[str, dict]) -> None:
        super().__init__(run_id, path, statuses)
        self.findings = findings

    def host_findings(self, host: str) -> dict:
        return {"status": self.statuses[host], "findings": self.findings.get(host, {})}

    def check_every_host(self) -> None:
        """Nothing to read: the store holds checked rows."""


def store_baseline(args: argparse.Namespace) -> Optional[baseline.Baseline]:
    """fail_on_new without --baseline: new since the last complete run of the same scope in the
    store (another run id; history.last_night). A store with none gives an empty baseline: every
    finding is new (its host was not compared). None without a store (off)."""
    run_dir = os.path.abspath(args.run_dir) if args.run_dir else os.path.abspath("reports/latest")
    where = location(args.store, os.path.dirname(os.path.normpath(run_dir)))
    if where is None:
        return None
    run_id = os.path.basename(os.path.normpath(run_dir))
    with schema.open_store(where) as store:
        # the report step's own scope; the gate's: the one recorded with the run it re-evaluates
        tonight = run_scope(args) if hasattr(args, "scope_hosts") else history.scope_of(store, run_id)
        night = history.last_night(store, run_id, tonight)
    name = "store %s" % display(where)
    if night is None:
        return StoreBaseline("(none: %s has no earlier complete run)" % name, name, {}, {})
    return StoreBaseline(night[0], name, night[1], night[2])
