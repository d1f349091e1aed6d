"""Command line: `python -m ext4audit {run,report,gate,merge,history,kernel-gate,check,rules,plan}`.

Exit codes (run, report, gate and merge): 0 pass, 1 policy failed, 2 incomplete or could not run.
A tool error is never a pass. check: 0 valid, 2 not. plan: 0 written, 2 could not.
"""

import argparse
import glob
import json
import os
import re
import sys
import traceback
from collections.abc import Sequence
from typing import Any, NoReturn

from ext4audit import DEFAULT_FAIL_ON, ERROR, SEVERITIES, severity_rank
from ext4audit.model import contract
from ext4audit.probe import analysis as probe
from ext4audit.report import reports
from ext4audit.steps import kernel_gate
from ext4audit.rules import catalog as catalog_mod, kernel_records, waivers as waivers_mod
from ext4audit import store as store_mod
from ext4audit.cli import version
from ext4audit.formats import html, markdown, terminal
from ext4audit.formats import writers
from ext4audit.report import baseline as baseline_mod
from ext4audit.steps import fleet, merge
from ext4audit.rules import policy as policy_mod
from ext4audit.parsers import run_folder
from ext4audit.store import commands as store_commands
from ext4audit.model import times
from ext4audit.report import host_report



def load_probe(run_dir: str) -> tuple[dict[str, dict[str, Any]] | None, dict[str, Any] | None]:
    """The run's probe records by host and its plan, from <run_dir>/probe/: (None, None) when the
    run had no probe. The plan is the file whose schema says so (the playbook names it plan.json)."""
    folder = os.path.join(run_dir, "probe")
    if not os.path.isdir(folder):
        return None, None
    records: dict[str, dict[str, Any]] = {}
    plan = None
    for path in sorted(glob.glob(os.path.join(folder, "*.json"))):
        doc = reports.read_json(path, "probe file")
        where = "probe file %s" % path
        try:
            if isinstance(doc, dict) and doc.get("schema") == probe.PLAN_SCHEMA:
                probe.check_plan(doc, where)
                if plan is not None:
                    raise probe.ProbeError("%s: a second plan in the run folder" % where)
                plan = doc
                continue
            probe.check_record(doc, where)
            if doc["host"] in records:
                raise probe.ProbeError("%s: a second record for host %r" % (where, doc["host"]))
        except probe.ProbeError as exc:
            raise reports.ReportError(str(exc))
        records[doc["host"]] = doc
    return records, plan


def load_baseline(args: argparse.Namespace) -> Any:
    """The --baseline run, its summary and folder checked before anything is written (None without
    one). fail_on_new without --baseline: the last complete run in the results store."""
    if args.fail_on_new and not args.baseline and getattr(args, "store", None) != store_mod.OFF:
        return store_commands.store_baseline(args)
    if args.fail_on_new and not args.baseline:
        raise reports.ReportError("--fail-on-new true needs --baseline (an earlier run folder) or a "
                                  "results store (--store): nothing to compare with")
    return baseline_mod.load(args.baseline, args.run_dir) if args.baseline else None


def plotted_hosts(probes: dict[str, dict[str, Any]] | None, plan: dict[str, Any] | None) -> Any:
    """The hosts whose probe gets pictures in report.html (html.plotted_hosts): of the hosts
    whose sweep completed runs, the first by name."""
    records = probes or {}
    return html.plotted_hosts(records, lambda host: (probe.host_section(records[host], plan).get("sweep") or {})
                              .get("runs_completed"))


def open_run(run_dir: str) -> tuple[int, str]:
    """The run folder opened by descriptor (run_folder.open_folder: from / without following a
    symbolic link, refused when another user could write it or its reports folder), and the path
    that reaches it through the descriptor: nothing swapped at run_dir later changes where the
    step reads and writes."""
    try:
        fd = run_folder.open_folder(os.path.abspath(run_dir), private=2)
    except FileNotFoundError:
        raise reports.ReportError("run folder %s not found" % run_dir)
    except run_folder.FolderError as exc:
        raise reports.ReportError("run folder %s refused: %s" % (run_dir, exc))
    return fd, "/proc/self/fd/%d" % fd


def cmd_report(args: argparse.Namespace) -> int:
    fd, held = open_run(args.run_dir)
    try:
        return _report(args, held)
    except (reports.ReportError, contract.ContractError) as exc:  # name the folder as given, not by descriptor
        raise type(exc)(str(exc).replace(held, args.run_dir))
    finally:
        os.close(fd)


def _report(args: argparse.Namespace, run_dir: str) -> int:
    catalog = catalog_mod.load(args.rules_dir, args.site_rules)
    waivers = waivers_mod.load(args.waivers, set(catalog.by_id)) if args.waivers else []
    base = load_baseline(args)
    now = times.utc_now()
    run_id = os.path.basename(os.path.normpath(args.run_dir))
    paths = sorted(glob.glob(os.path.join(run_dir, "facts", "*.json")))
    play_hosts = reports.play_hosts(run_dir)  # each ends in the summary, with a record or failed without
    probes, plan = load_probe(run_dir)
    job = fleet.Job(run_dir, catalog, waivers, base, probes, plan, run_id, now, args.fail_on, args.fail_on_new,
                    max(len(paths), len(play_hosts or ())), plotted_hosts(probes, plan), os.path.join(args.rules_dir, "catalog.yml"),
                    args.inventory, args.formats, play_hosts)
    job.history, store_failed = store_commands.report_history(args)  # the groups' open since, trend
    summary_path = os.path.join(run_dir, reports.SUMMARY)
    try:
        job.staging = fleet.stage(run_dir)
        try:
            digests = fleet.report_hosts(job, paths, args.jobs)
            diff = (baseline_mod.diff(base, [d["host"] for d in digests], [d["baseline"] for d in digests])
                    if base else None)
            summary = reports.summarize_digests(digests, run_id, args.fail_on, args.unreachable_incomplete, now,
                                                baseline=diff, fail_on_new=args.fail_on_new)
            fleet.put_hosts_in_place(job, run_dir, job.staging)
            fleet.write_fleet_files(job, summary, digests)
        finally:
            fleet.discard(job.staging)  # before finish_run's flush: the parts' pages are never written
        reports.finish_run(run_dir, summary)
    except OSError as exc:  # out of space, a write-back error: say which folder, and what it leaves there
        raise reports.ReportError("run folder %s: its reports could not be written (%s)%s" % (
            args.run_dir, exc, "" if os.path.exists(summary_path) else
            "; it is incomplete (no %s), and gate, merge and --baseline refuse it" % reports.SUMMARY))
    reports.point_latest(os.path.join(run_dir, ".."), run_id, run_dir)  # syncfs: summary.json too
    since = store_commands.record_report(args, summary, store_failed)  # the results store: history, first seen
    if args.verdict_file:
        reports.write_verdict(args.verdict_file, args.run_dir, summary, args.gate)
    sys.stdout.write(reports.json_text(summary) if args.print == "json" else
                     "".join(line + "\n" for line in since)
                     + terminal.table(summary, screen=terminal.SCREEN - len(since)) + "\n")
    return reports.EXIT_CODES[summary["verdict"]]


def load_host_reports(run_dir: str, facts: bool = True) -> list[dict[str, Any]]:
    """Every host report of a run folder, in full (facts=False: without filesystems and netfs)."""
    paths = sorted(glob.glob(os.path.join(run_dir, "hosts", "*.json")))
    if not paths:
        raise reports.ReportError("no host reports in %s/hosts" % run_dir)
    reader = host_report.Reader(run_dir, facts)
    return [read_host_report(path, "host report", reader) for path in paths]


def read_host_report(path: str, what: str, reader: host_report.Reader | None = None) -> dict[str, Any]:
    """A host report in full (host_report.Reader: either version), checked against its model: a
    hand-edited or foreign file is a clear error (exit 2) naming the file, host and field, never
    a traceback."""
    report = (reader or host_report.Reader(host_report.run_of(path))).read(path, what)
    for number, finding in enumerate(report["findings"]):
        where = "%s %s (host %r): $.findings[%d]" % (what, path, report["host"], number)
        waiver = finding.get("waiver")
        if waiver is None and finding["waived"]:
            raise reports.ReportError("%s: waived is true but there is no waiver" % where)
        if waiver is not None and not _is_stamp(waiver["expires"]):  # the model checked its form, not the date
            raise reports.ReportError("%s: waiver.expires %r is no date" % (where, waiver["expires"]))
    return report


def _is_stamp(text: str) -> bool:
    try:
        times.moment_of(text)
    except ValueError:
        return False
    return True


def cmd_gate(args: argparse.Namespace) -> int:
    """Re-evaluate a finished run offline: same reports, the policy given now, waivers as of now."""
    if args.run:
        return store_commands.cmd_store_gate(args)
    if not args.run_dir:
        raise reports.ReportError("gate needs a run folder, or --run ID with --store")
    base = load_baseline(args)
    if base:
        base.check_every_host()
    reports.read_complete_run(args.run_dir, "run folder")
    host_reports = load_host_reports(args.run_dir, facts=False)  # the verdict needs no filesystems
    now = times.utc_now()
    catalog = catalog_mod.load(args.rules_dir, args.site_rules)
    waivers = waivers_mod.load(args.waivers, set(catalog.by_id)) if args.waivers else None
    for report in host_reports:
        if args.fail_on:  # given now: it replaces every host's own
            report["policy"] = dict(report.get("policy") or {}, fail_on=args.fail_on)
        for finding in report["findings"]:
            if waivers is not None:  # a new waiver file replaces the one the run used
                finding["waived"], finding["waiver"] = False, None
            elif finding["waived"] and times.moment_of(finding["waiver"]["expires"]) <= now:
                finding["waived"], finding["waiver"]["status"] = False, "expired"
        if waivers is not None:
            report["expired_waivers"] = waivers_mod.apply(report["findings"], waivers, report["host"],
                                                          report.get("groups") or [], now)
    run_id = os.path.basename(os.path.normpath(args.run_dir))
    diff = baseline_mod.compare(host_reports, base) if base else None
    summary = reports.summarize(host_reports, run_id, args.fail_on or DEFAULT_FAIL_ON, args.unreachable_incomplete,
                                now, baseline=diff, fail_on_new=args.fail_on_new)
    print(terminal.table(summary) if args.table else "verdict: %s: %s" % (summary["verdict"], summary["reason"]))
    return reports.EXIT_CODES[summary["verdict"]]


def cmd_merge(args: argparse.Namespace) -> int:
    """Merge sliced runs' facts/ and probe/ into a new run folder and report on it as one run."""
    merge.stage(args.run_dir, args.slices)  # checks every slice before it writes anything
    try:
        return cmd_report(args)
    except BaseException:  # e.g. a bad waiver file: no half-made run folder is left behind
        merge.discard(args.run_dir)
        raise


def cmd_host_report(args: argparse.Namespace) -> int:
    """Print a host report in full (its references to the run's shared file and facts resolved), as JSON."""
    sys.stdout.write(reports.json_text(read_host_report(args.path, "host report")))
    return 0


def cmd_kernel_gate(args: argparse.Namespace) -> int:
    """Compare a baseline and a candidate host's probe runs and findings; write kernel_gate.{json,md}."""
    sides: list[dict[str, Any]] = []
    plan_ids: list[str | None] = []
    loaded: dict[str, tuple[Any, Any]] = {}
    for role, host, run_dir in (("baseline", args.baseline, args.baseline_run or args.run_dir),
                                ("candidate", args.candidate, args.run_dir)):
        if run_dir not in loaded:  # both sides usually come from the same run folder
            loaded[run_dir] = load_probe(run_dir)
        records, plan = loaded[run_dir]
        report_path = reports.host_report_path(run_dir, host)
        report = read_host_report(report_path, "%s host report" % role) if os.path.exists(report_path) else None
        sides.append({"host": host, "record": (records or {}).get(host), "report": report})
        plan_ids.append(plan and "seed %s, %s runs, %s levels" % (plan["seed"], plan["runs"], plan["level_set"]))
    policy = dict(alpha=args.alpha, min_effect=args.min_effect, dspan_tolerance=args.dspan_tolerance,
                  tail_tolerance=args.tail_tolerance, ratio_tolerance=args.ratio_tolerance, fail_on=args.fail_on,
                  record_fail_classes=args.record_fail_classes)
    gate = kernel_gate.evaluate(sides[0], sides[1], tuple(plan_ids), policy)
    reports.write_json(os.path.join(args.run_dir, "kernel_gate.json"), gate)
    reports.write_atomic(os.path.join(args.run_dir, "kernel_gate.md"), kernel_gate.markdown(gate, markdown.md))
    # A complete run's report.html gets the comparison too (unless its formats left the page out)
    if all(os.path.exists(os.path.join(args.run_dir, name)) for name in (reports.SUMMARY, html.Writer.file)):
        html.write(os.path.join(args.run_dir, "report.html"),
                   reports.read_json(os.path.join(args.run_dir, "summary.json"), "summary"),
                   load_host_reports(args.run_dir), catalog_mod.load(), args.run_dir)
    print("kernel gate: %s: %s" % (gate["verdict"], gate["reason"]))
    return reports.EXIT_CODES[gate["verdict"]]


def cmd_check(args: argparse.Namespace) -> int:
    """Validate the rule catalog, the site rules, the waiver file, hosts' policies and the report
    formats (the playbooks' preflight, before any host is contacted)."""
    catalog = catalog_mod.load(args.rules_dir, args.site_rules)
    waivers = waivers_mod.load(args.waivers, set(catalog.by_id)) if args.waivers else []
    if args.baseline:  # a corrupt or unfinished baseline stops the run before the audit, not after
        baseline_mod.load(args.baseline)
    for host, policy in args.policies.items():
        policy_mod.make(policy, catalog, "host %s" % host, DEFAULT_FAIL_ON)
    print("catalog: %d rules (%d from site rule files), %d kernel issues; waivers: %d; policies: %d; report formats: %s"
          % (len(catalog.rules), len(catalog.site_rules), len(catalog.kernel_issues), len(waivers),
             len(args.policies), ", ".join(args.formats)))
    return 0


def cmd_rules(args: argparse.Namespace) -> int:
    """The rule list as a Markdown table (the README's copy is checked against this)."""
    catalog = catalog_mod.load(args.rules_dir)
    print("| id | severity | kind | scope | seed | title |")
    print("|---|---|---|---|---|---|")
    for rule in catalog.rules:
        # The highest level a finding can reach: by an escalate entry or by a probe confirmation.
        raised = [e["severity"] for e in rule.get("escalate") or []]
        raised += [rule["confirmation"]["escalate_to"]] if rule.get("confirmation") else []
        raised += list(kernel_records.CLASS_SEVERITY.values()) if rule.get("severity_by_records") else []
        ceiling = max(raised, key=severity_rank, default=rule["severity"])
        escalation = " (up to %s)" % ceiling if severity_rank(ceiling) > severity_rank(rule["severity"]) else ""
        print("| `%s` | %s%s | %s | %s | %s | %s |" % (rule["id"], rule["severity"], escalation, rule["kind"],
                                                     rule["scope"], rule.get("seed") or "-", rule["title"]))
    return 0


def cmd_plan(args: argparse.Namespace) -> int:
    """Write a seeded probe plan (Chopper-style Latin hypercube) as JSON."""
    plan = probe.make_plan(args.seed, args.runs, args.levels)
    reports.write_json(args.out, plan)
    print("plan: %d runs, seed %d, level set %s -> %s" % (plan["runs"], plan["seed"], plan["level_set"], args.out))
    return 0


def cmd_remediate_plan(args: argparse.Namespace) -> int:
    """Print, as JSON, the fixes one host's findings in a run folder or a night of the store get (playbooks/remediate.yml)."""
    from ext4audit.steps import remediation
    try:
        data = remediation.load(known_rules=list(catalog_mod.load().by_id))
        report = remediation.read_store_report(args.store, args.store_run, args.host) if args.store else \
            remediation.read_host_report(args.run_dir, args.host)
        items = remediation.plan_host(report, data,
                                      _json_arg(args.rules, list, "--rules"), args.min_severity,
                                      _json_arg(args.choices, dict, "--choices"))
    except (remediation.RemediationError, reports.ReportError) as exc:
        print("ext4audit remediate-plan: %s" % exc, file=sys.stderr)
        return ERROR
    print(json.dumps(items))
    return 0


def cmd_remediate_night(args: argparse.Namespace) -> int:
    """Print the night of the store the remediation reads: the given run id, checked complete, or the latest complete one."""
    from ext4audit.steps import remediation
    try:
        print(remediation.store_night(args.store, args.store_run))
    except remediation.RemediationError as exc:
        print("ext4audit remediate-night: %s" % exc, file=sys.stderr)
        return ERROR
    return 0


def cmd_remediate_outcome(args: argparse.Namespace) -> int:
    """Print, as JSON, each planned fix of one host as fixed, pending or failed after the re-audit."""
    from ext4audit.steps import remediation
    try:
        after = remediation.read_host_report(args.run_dir, args.host)
    except reports.ReportError as exc:
        print("ext4audit remediate-outcome: %s" % exc, file=sys.stderr)
        return ERROR
    print(json.dumps(remediation.outcome(_json_arg(args.plan, list, "--plan"),
                                         _json_arg(args.applied, list, "--applied"), after)))
    return 0


def _json_arg(text: str, kind: type, name: str) -> Any:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise SystemExit("ext4audit: %s: not JSON (%s)" % (name, exc))
    if not isinstance(value, kind):
        raise SystemExit("ext4audit: %s: expected a JSON %s" % (name, kind.__name__))
    return value


def _site_rules_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--site-rules", action="append", default=[], metavar="DIR",
                        help="a folder of site rule files (*.yml, the catalog's schema); repeatable")


def _policies(text: str) -> dict[str, Any]:
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError("not JSON: %s" % exc)
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError("expected a JSON object of host -> policy")
    return value


def _classes(text: str) -> list[str]:
    """"data corruption,crash/BUG" -> a list; "" -> none."""
    return [name.strip() for name in text.split(",") if name.strip()]


def _formats(text: str) -> list[str]:
    try:
        return writers.names(text)
    except writers.FormatError as exc:
        raise argparse.ArgumentTypeError(str(exc))


# A run id names one folder inside the reports folder: one path component of a safe character set,
# never a hidden name, . or .., nor the `latest` link's name.
RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}\Z")


def _run_id(text: str) -> str:
    if text and (not RUN_ID.match(text) or text == "latest"):
        raise argparse.ArgumentTypeError(
            "%r is not a run id: one folder name of letters, digits, '.', '_' and '-' (at most 128, not starting "
            "with '.', '_' or '-', not latest); it names a folder inside the reports folder" % text)
    return text


def _add_formats(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--formats", type=_formats, default=list(writers.FORMATS), metavar="LIST",
                        help="report files to write besides summary.json and hosts/: a comma-separated list of %s, "
                             "or %s (default)" % (", ".join(writers.FORMATS), writers.ALL))


def _bool(text: str) -> bool:
    if text.lower() in ("1", "true", "yes", "on"):
        return True
    if text.lower() in ("0", "false", "no", "off"):
        return False
    raise argparse.ArgumentTypeError("expected true or false, got %r" % text)


class _Version(argparse.Action):
    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        code, line = version.report()
        print(line, file=sys.stderr if code else sys.stdout)
        parser.exit(code)


class _CheckVersion(argparse.Action):
    """check --version: the version line of --version (exit 1 when a requirement is wrong), then the
    plan cache's prefix, then the check. Given first, it runs before the other options are read, so
    the roles' preflight learns the version even when an option is wrong: one start for both."""

    def __call__(self, parser: argparse.ArgumentParser, namespace: argparse.Namespace, values: Any,
                 option_string: str | None = None) -> None:
        code, line = version.report()
        if code:
            print(line, file=sys.stderr)
            parser.exit(code)
        print(line)
        print("plan cache: %s" % probe.plan_cache_prefix())


def _run_elsewhere(_args: argparse.Namespace) -> NoReturn:
    raise reports.ReportError("`ext4audit run` starts in ext4audit.__main__.main (the ext4audit command), not cli.main")


def main(argv: "list[str] | None" = None) -> int:
    """Run one of the commands but `run` (__main__.main starts that); return its exit code."""
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="ext4audit", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--version", action=_Version, nargs=0, help="print the version and check the installed requirements")
    sub = parser.add_subparsers(dest="command", required=True)
    # listed here for --help; the command starts in __main__.main, before this module is loaded
    sub.add_parser("run", help="run ansible-playbook (ext4audit run [--] PLAYBOOK ARGS...) and exit with the "
                   "gate's code: 0 pass, 1 policy failed, 2 incomplete or could not run").set_defaults(func=_run_elsewhere)
    for name, func in (("report", cmd_report), ("gate", cmd_gate), ("merge", cmd_merge)):
        p = sub.add_parser(name, help=func.__doc__.splitlines()[0] if func.__doc__ else
                           "evaluate a run folder's facts and write every report")
        p.add_argument("run_dir", nargs="?" if name == "gate" else None,
                       help="reports/<run-id> (gate: reports/latest works too; merge: the new folder)")
        # report: the hosts' policies come with their facts records; gate: as their reports record them
        p.add_argument("--fail-on", choices=SEVERITIES, default=None if name == "gate" else DEFAULT_FAIL_ON,
                       help="lowest unwaived severity that fails the gate: for every host (default: each host's "
                       "own, %s for reports without one)" % DEFAULT_FAIL_ON if name == "gate" else
                       "lowest unwaived severity that fails the gate, for hosts whose facts record has no "
                       "policy of its own (default: %s)" % DEFAULT_FAIL_ON)
        p.add_argument("--unreachable-incomplete", type=_bool, default=True, metavar="BOOL",
                       help="whether hosts that could not be audited make the verdict incomplete (default: true)")
        p.add_argument("--waivers", help="waiver file (YAML); report: the run's waivers, gate: replaces them")
        p.add_argument("--baseline", metavar="DIR", help="an earlier run folder (or reports/latest) to compare with: "
                       "new, resolved and persisting findings (empty: none)")
        p.add_argument("--fail-on-new", type=_bool, default=False, metavar="BOOL",
                       help="fail only on findings new since --baseline, or without one since the "
                       "last complete run in the results store (default: false)")
        p.add_argument("--rules-dir", default=catalog_mod.RULES_DIR, help=argparse.SUPPRESS)
        _site_rules_option(p)
        p.set_defaults(func=func)
    sub.choices["gate"].add_argument("--table", action="store_true", help="print the per-host table too")
    store_commands.add_store_option(sub.choices["gate"], "with --run: the store to gate from (default: "
                                    "reports/history.sqlite)")
    sub.choices["gate"].add_argument("--run", metavar="ID", help="gate the night ID from the store (every slice "
                                     "that reported), not a run folder")
    sub.choices["gate"].add_argument("--slices", metavar="NAME,...", help="with --run: the slices expected; one "
                                     "that did not report makes the night incomplete")
    sub.choices["gate"].add_argument("--slice-count", type=int, metavar="N", help="with --run: fewer than N slices "
                                     "reported makes the night incomplete (AWX: the template's job_slice_count)")
    sub.choices["merge"].add_argument("slices", nargs="+", metavar="SLICE_DIR",
                                      help="run folders of the slices (--limit runs, AWX job slices, other controllers)")
    for name in ("report", "merge"):
        store_commands.add_report_options(sub.choices[name])
        _add_formats(sub.choices[name])
        sub.choices[name].add_argument("--print", choices=("table", "json"), default="table",
                                       help="what to print: the table of hosts and the verdict line (default), or "
                                            "summary.json's document, for scripts")
        sub.choices[name].add_argument("--inventory", metavar="DIR",
                                       help="inventory folder: report.sarif points at its host_vars/<host>.yml files")
        sub.choices[name].add_argument("--verdict-file", metavar="FILE", default="",
                                       help="also write the verdict here, as {\"verdict\", \"reason\", \"run_dir\", "
                                            "\"gate\"} (mode 0600; `ext4audit run` gives its private file; empty: none)")
        sub.choices[name].add_argument("--gate", type=_bool, default=True, metavar="BOOL",
                                       help="written into --verdict-file: false when the run reports only "
                                            "(ext4_audit_gate false), and `ext4audit run` then exits as ansible-playbook did")
        sub.choices[name].add_argument("--jobs", type=int, default=fleet.default_jobs(), metavar="N",
                                       help="worker processes for fleets of %d hosts or more (default: the CPUs "
                                            "this process may use, %d here)" % (fleet.PARALLEL_FROM, fleet.default_jobs()))
    store_commands.add_history_parser(sub)
    p = sub.add_parser("host-report", help=cmd_host_report.__doc__.splitlines()[0])  # type: ignore[union-attr]  # it has one
    p.add_argument("path", help="reports/<run-id>/hosts/<host>.json")
    p.set_defaults(func=cmd_host_report)
    p = sub.add_parser("kernel-gate", help=cmd_kernel_gate.__doc__)
    p.add_argument("run_dir", help="the run with the candidate (and, unless --baseline-run, the baseline)")
    p.add_argument("--baseline", required=True, help="inventory name of the baseline host")
    p.add_argument("--candidate", required=True, help="inventory name of the candidate host")
    p.add_argument("--baseline-run", help="the baseline's run folder, when it ran before (e.g. before a reboot)")
    p.add_argument("--fail-on", choices=SEVERITIES, default=kernel_gate.DEFAULTS["fail_on"],
                   help="a new candidate finding at or above this fails the gate")
    p.add_argument("--record-fail-classes", type=_classes, default=kernel_gate.DEFAULTS["record_fail_classes"],
                   metavar="CLASS,...", help="classes of kernel CNA records that fail the gate when the candidate "
                   "lacks a fix the baseline had; empty: list only (default: %s)"
                   % ",".join(kernel_gate.DEFAULTS["record_fail_classes"]))  # type: ignore[arg-type]  # DEFAULTS: dict[str, object]
    for name, help_text in (("alpha", "significance level of the paired Wilcoxon test"),
                            ("min_effect", "smallest rank-biserial effect size that counts"),
                            ("dspan_tolerance", "allowed relative rise of the p99 d-span"),
                            ("tail_tolerance", "allowed rise of the tail share (absolute)"),
                            ("ratio_tolerance", "allowed relative rise of a confirmation ratio")):
        p.add_argument("--" + name.replace("_", "-"), type=float, default=kernel_gate.DEFAULTS[name],
                       help="%s (default %g)" % (help_text, kernel_gate.DEFAULTS[name]))  # type: ignore[str-format]
    p.set_defaults(func=cmd_kernel_gate)
    p = sub.add_parser("check", help=cmd_check.__doc__.splitlines()[0])  # type: ignore[union-attr]  # it has one
    p.add_argument("--version", action=_CheckVersion, nargs=0,
                   help="first print the version and check the installed requirements, as ext4audit --version "
                        "(exit 1 when one is wrong), and where plans are cached (the roles' preflight)")
    p.add_argument("--waivers", help="waiver file (YAML); a missing file means none")
    p.add_argument("--run-id", type=_run_id, default="", help="the run id the playbook was given (empty: none)")
    p.add_argument("--baseline", default="", help="an earlier run folder to compare with, checked as the report step reads it")
    p.add_argument("--policies", type=_policies, default={}, metavar="JSON",
                   help='hosts\' policies to check: {"HOST": {"fail_on": ..., "rules_select": [...], '
                        '"rules_skip": [...], "severity_overrides": {...}, "capacity_limits": {...}}, ...}')
    p.add_argument("--rules-dir", default=catalog_mod.RULES_DIR, help=argparse.SUPPRESS)
    _add_formats(p)
    _site_rules_option(p)
    p.set_defaults(func=cmd_check)
    p = sub.add_parser("rules", help="print the rule catalog as a Markdown table")
    p.add_argument("--rules-dir", default=catalog_mod.RULES_DIR, help=argparse.SUPPRESS)
    p.set_defaults(func=cmd_rules)
    p = sub.add_parser("remediate-plan", help=cmd_remediate_plan.__doc__)
    p.add_argument("host")
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--run-dir", help="the run folder whose hosts/HOST.json is read")
    source.add_argument("--store", help="the results store (SQLite file or postgresql:// URL) to read --store-run from")
    p.add_argument("--store-run", default="", help="with --store: the night's run id (see remediate-night)")
    p.add_argument("--rules", default="[]", help="JSON list of rule ids or tags (empty: by --min-severity)")
    p.add_argument("--min-severity", default="medium", help="lowest severity an empty selection picks")
    p.add_argument("--choices", default="{}", help="JSON mapping of rule id to the name of a fix choice")
    p.set_defaults(func=cmd_remediate_plan)
    p = sub.add_parser("remediate-night", help=cmd_remediate_night.__doc__)
    p.add_argument("--store", required=True, help="the results store (SQLite file or postgresql:// URL)")
    p.add_argument("--store-run", default="", help="a run id to check; empty: the latest complete night")
    p.set_defaults(func=cmd_remediate_night)
    p = sub.add_parser("remediate-outcome", help=cmd_remediate_outcome.__doc__)
    p.add_argument("run_dir", help="the re-audit's run folder")
    p.add_argument("host")
    p.add_argument("--plan", required=True, help="JSON: remediate-plan's output for the host")
    p.add_argument("--applied", default="[]", help="JSON: per planned fix, {error} or {pending} from applying it")
    p.set_defaults(func=cmd_remediate_outcome)
    p = sub.add_parser("plan", help=cmd_plan.__doc__.splitlines()[0])  # type: ignore[union-attr]  # it has one
    p.add_argument("--seed", type=int, default=probe.DEFAULT_SEED,
                   help="random seed (default: %d, so plans compare across hosts and kernels)" % probe.DEFAULT_SEED)
    p.add_argument("--runs", type=int, default=probe.DEFAULT_RUNS, help="treatments (default: %d)" % probe.DEFAULT_RUNS)
    p.add_argument("--levels", default="short", help="level set in ext4audit/probe/factors.yml: short (default) or paper")
    p.add_argument("--out", required=True, help="plan file to write (JSON)")
    p.set_defaults(func=cmd_plan)
    args = parser.parse_args(argv)
    try:
        with reports.no_gc():
            return args.func(args)
    except (contract.ContractError, catalog_mod.CatalogError, waivers_mod.WaiverError, policy_mod.PolicyError, reports.ReportError, probe.ProbeError,
            kernel_records.RecordsError, kernel_gate.PolicyError, store_mod.StoreError, OSError) as exc:
        print("error: %s" % exc, file=sys.stderr)
        return ERROR
    except Exception as exc:  # a bug, or input no check caught: exit 2 (could not run), never 1 (policy failed)
        print("error: %s failed on an unexpected %s: %s (traceback below)" % (args.command, type(exc).__name__, exc),
              file=sys.stderr)
        traceback.print_exc()
        return ERROR


if __name__ == "__main__":
    sys.exit(main())
