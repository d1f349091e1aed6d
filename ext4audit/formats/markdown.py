"""summary.md, for a GitHub job summary: the verdict first, the fleet's findings by rule and by
group (finding_groups: one row per finding shared by many hosts, with its host count and first
hosts, the worst first), the hosts most in need of attention, the kernel groups, the baseline diff,
then those hosts' findings, undetermined rules, read errors and probe, folded.

GitHub takes at most 1 MiB of job summary: the file stays within BUDGET at any fleet size (the
groups within GROUPS_BUDGET of it), and a note says what did not fit, and where it is.

Every host-provided string goes through md(): GitHub renders Markdown and inline HTML.
"""

import json
import re

from ext4audit import severity_rank
from ext4audit.report import finding_groups
from ext4audit.probe import analysis as probe, sentences as probe_actions
from ext4audit.formats import writers
from ext4audit.report import reports
from ext4audit.rules import policy as policy_mod
from ext4audit.store import history as store_history
from ext4audit.report import host_report

# The backslash first (the others add one), "&" before the entities.
_MD = (("\\", "\\\\"), ("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")) + tuple((c, "\\" + c) for c in "`*_[]{}()#+!|~$-")
_MD_BREAKS = re.compile(r"[\r\n\t]+")


def md(value):
    """Escape a host-provided string for Markdown and inline HTML (GitHub job summaries render both)."""
    text = writers.replace_all("" if value is None else str(value), _MD)
    return _MD_BREAKS.sub(" ", text) if "\n" in text or "\r" in text or "\t" in text else text


BUDGET = 900 * 1024  # bytes: GitHub takes at most 1 MiB of job summary; the cut notes come on top
GROUPS_BUDGET = 400 * 1024  # of it, the findings' groups at most: the tables after them keep room
GROUP_HOSTS = 5  # host names shown per group; the group's row counts them all
EXPIRED_NAMED = 20  # expired waivers named in the head; summary.json lists every one


class Page:
    """summary.md's lines and their bytes (UTF-8, a newline each), against a budget: rows go in
    while they fit, the few short notes that say what was cut go in always."""

    def __init__(self, budget: int) -> None:
        self.lines, self.size, self.budget = [], 0, budget

    def add(self, *lines: str) -> None:
        for line in lines:
            self.lines.append(line)
            self.size += len(line.encode("utf-8")) + 1

    def rows(self, rows, limit: "int | None" = None) -> int:
        """Add rows (each a line, or a list of lines kept together) while they fit within limit
        (the budget when None) and return how many went in."""
        limit = self.budget if limit is None else min(limit, self.budget)
        added = 0
        for row in rows:
            block = [row] if isinstance(row, str) else row
            if self.size + sum(len(line.encode("utf-8")) + 1 for line in block) > limit:
                break
            self.add(*block)
            added += 1
        return added


def document(summary: dict, host_reports: list, groups: "finding_groups.FindingGroups | None" = None,
             history: "dict | None" = None) -> str:
    """summary.md: the verdict, the findings by rule and by group (groups: the whole fleet's;
    None: made from host_reports; history: the store's nights before this run, history.rule_nights,
    for each group's "open since" and trend; None: no store), the hosts most in need of attention,
    kernel groups, the baseline diff, then the details of the hosts of host_reports that are
    shown, within BUDGET."""
    if groups is None:
        groups = finding_groups.FindingGroups(summary.get("baseline") is not None, GROUP_HOSTS)
        for report in host_reports:
            groups.add_host(report)
    page = Page(BUDGET)
    page.add("## ext4 fleet audit: %s" % summary["verdict"].upper(), "",
             "**%s**: %s (fail_on=%s)" % (summary["verdict"], md(summary["reason"]), summary["policy"]["fail_on"]), "")
    expired = summary["expired_waivers"]
    if expired:
        page.add("> **%d expired waiver(s) no longer waive anything:** %s%s" % (
            len(expired), "; ".join("%s on %s (expired %s, approver %s)" % (md(w["rule"]), md(w["host"]), w["expires"],
                                                                          md(w["approver"]))
                                    for w in expired[:EXPIRED_NAMED]),
            "; %d more in summary.json" % (len(expired) - EXPIRED_NAMED) if len(expired) > EXPIRED_NAMED else ""), "")
    _group_lines(page, summary, groups, history)
    rows = sorted(summary["hosts"], key=reports.attention_order)[:MD_HOSTS]
    page.add("### Hosts most in need of attention", "",
             "| host | status | worst | findings | failing | waived | probe |", "|---|---|---|---|---|---|---|")
    shown = page.rows("| %s | %s | %s | %d | %d | %d | %s |" % (
        md(host["host"]), host["status"], host["worst"] or "-", host["findings"], host["failing"], host["waived"],
        host.get("probe") or "-") for host in rows)
    if shown < len(summary["hosts"]):
        page.add("", "The %d hosts most in need of attention of %d; every host is in summary.json, report.html "
                 "and hosts/." % (shown, len(summary["hosts"])))
    _kernel_group_lines(page, summary.get("kernel_groups") or [])
    if summary.get("baseline") is not None:
        _baseline_lines(page, summary["baseline"], summary["policy"].get("fail_on_new"))
    page.add("", "<details><summary>Findings by host</summary>", "")
    by_host = dict((r["host"], r) for r in host_reports)
    detailed = [by_host[h["host"]] for h in rows[:shown] if h["host"] in by_host]
    written = page.rows(_host_lines(report) for report in detailed)
    if written < len(detailed):
        page.add("... the details of %d more host(s) did not fit in GitHub's job summary: see hosts/ and "
                 "report.html" % (len(detailed) - written), "")
    page.add("</details>", "")
    return "\n".join(page.lines)


def _group_lines(page: Page, summary: dict, groups: finding_groups.FindingGroups, history: "dict | None") -> None:
    """The fleet's findings by rule (every rule with a finding: a few dozen rows at most), then by
    group, the worst first, within GROUPS_BUDGET (with the store's history: since when each is
    open, and its trend); what did not fit is counted."""
    order = groups.ordered()
    if not order:
        return
    rules = {}
    for key, (findings, _, _) in order:
        entry = rules.setdefault(key[0], {"worst": None, "findings": 0, "waived": 0})
        if finding_groups.is_waived(key):
            entry["waived"] += findings
        else:
            entry["findings"] += findings
            if entry["worst"] is None or severity_rank(key[1]) > severity_rank(entry["worst"]):
                entry["worst"] = key[1]
    counts = summary["counts"]
    page.add("### Findings by rule", "",
             "%s hosts, %s audited: %s findings, %s waived." % (
                 "{:,}".format(counts["hosts"]), "{:,}".format(counts["hosts_audited"]),
                 "{:,}".format(sum(counts["by_severity"].values())), "{:,}".format(counts["waived"])), "",
             "| rule | worst | hosts | findings | waived |", "|---|---|---|---|---|")
    page.add(*("| %s | %s | %s | %s | %s |" % (md(rule), entry["worst"] or "-",
                                             "{:,}".format(groups.rule_hosts.get(rule, 0)),
                                             "{:,}".format(entry["findings"]), "{:,}".format(entry["waived"]))
               for rule, entry in sorted(rules.items(), key=lambda item: (
                   -severity_rank(item[1]["worst"]) if item[1]["worst"] else 1, -groups.rule_hosts.get(item[0], 0),
                   item[0]))))
    page.add("", "### Findings by group", "",
             "Each group is one finding (rule, severity, message, waiver%s) and the hosts that have it; %s "
             "group(s), the worst first." % (", baseline state" if groups.with_baseline else "",
                                             "{:,}".format(len(order))), "",
             *_history_head(history))
    past = store_history.group_history(history, groups) if history is not None else None
    shown = page.rows((_group_row(key, hosts, samples) + (_history_cells(past[key]) if past else "")
                       for key, (_, hosts, samples) in order), page.size + GROUPS_BUDGET)
    if shown < len(order):
        left = order[shown:]
        page.add("", "... %s more group(s) (%s findings, the worst %s) did not fit in GitHub's job summary: see "
                 "report.html (every host's findings are in hosts/)." % (
                     "{:,}".format(len(left)), "{:,}".format(sum(findings for _, (findings, _, _) in left)),
                     max((key[1] for key, _ in left), key=severity_rank)))
    page.add("")


def _history_head(history: "dict | None") -> list:
    """The group table's head: with the store's history, its two columns and what they mean."""
    if history is None:
        return ["| severity | rule | hosts | finding | on |", "|---|---|---|---|---|"]
    return [store_history.group_history_note(history), "",
            "| severity | rule | hosts | finding | on | open since | trend |", "|---|---|---|---|---|---|---|"]


def _history_cells(past: dict) -> str:
    """A group's "open since" and trend cells, after its row's last."""
    return " %s | %s |" % (store_history.since_label(past),
                           " ".join("{:,}".format(count) for _, count in past["trend"]) or "-")


def _group_row(key: tuple, hosts: int, samples: list) -> str:
    """A group's row: severity, rule, host count, the finding (with its escalation, waiver and
    baseline state) and the first hosts."""
    rule, severity, base_severity, message, because, suppressed, expired, baseline = key
    text = md(message)
    if because:
        text += " Raised from %s: %s." % (base_severity, md(because))
    if suppressed is not None:
        text += " (waived: %s)" % md(suppressed)
    if expired is not None:
        text += " (**waiver expired %s**)" % md(json.loads(expired).get("expires"))
    if baseline == "new":
        text += " (**new** since the baseline)"
    return "| %s | %s | %s | %s | %s%s |" % (severity, md(rule), "{:,}".format(hosts), text,
                                             ", ".join(md(host) for host in samples),
                                             ", ..." if hosts > len(samples) else "")


def _host_lines(report: dict) -> list:
    """A host's details: why it was not audited, its policy, findings (each with its fix),
    undetermined rules, read errors, what was not audited, its probe."""
    lines = ["### %s" % md(report["host"])]
    if report["status"] != "audited":
        lines.append("- not audited: %s" % md(report.get("reason")))
    lines += ["- policy: %s" % md(line) for line in policy_mod.describe(report)]
    for f in sorted(report["findings"], key=lambda f: -severity_rank(f["severity"])):
        mark = " (waived: %s)" % md(f["waiver"]["justification"]) if f["waived"] else ""
        if f.get("severity_override"):
            mark += " (site severity, %s in the catalog: %s)" % (f["severity_override"]["from"],
                                                                md(f["severity_override"]["reason"]))
        if f["waiver"] and f["waiver"]["status"] == "expired":
            mark = " (**waiver expired %s**)" % f["waiver"]["expires"]
        lines.append("- **%s** `%s`: %s%s" % (f["severity"], f["rule"], md(f["message"]), mark))
        lines.append("  - Fix: %s (cost: %s)" % (md(f["remediation"]["steps"]), md(f["remediation"]["cost"])))
        if f.get("confirmation"):
            lines.append("  - Probe: " + _confirmation_text(f["confirmation"]))
    for item in report.get("undetermined") or []:
        lines.append("- undetermined `%s`%s: missing %s" % (item["rule"], " on %s" % md(item["mountpoint"])
                                                           if item["mountpoint"] else "", md(", ".join(item["missing"]))))
    for error in report.get("errors") or []:
        lines.append("- could not read (%s): %s" % (md(error["where"]), md(error["reason"])))
    lines += ["- not audited: %s" % md(line) for line in reports.not_audited_lines(report)]
    if report.get("probe"):
        lines += _probe_lines(report)
    lines.append("")
    return lines


def _kernel_group_lines(page: Page, groups: list) -> None:
    """The kernel record findings by kernel and action: what to do, and on how many hosts."""
    if not groups:
        return
    page.add("", "### Kernel findings by kernel", "", "| kernel | hosts | severity | what to do |", "|---|---|---|---|")
    shown = page.rows("| %s | %s | %s | %s |" % (
        md(group["kernel"] + (" (upstream %s)" % group["upstream"] if group["upstream"] else "")),
        "{:,}".format(group["hosts"]), group["severity"], md(group["action"]))
        for group in groups[:reports.KERNEL_GROUP_ROWS])
    if shown < len(groups):
        page.add("", "%d more in summary.json (kernel_groups)." % (len(groups) - shown))


BASELINE_ROWS = 100  # rows of the Markdown diff table; summary.json lists every change
MD_HOSTS = 100  # hosts in summary.md (table and details) when there are more: those most in need of attention


def _baseline_lines(page: Page, diff: dict, fail_on_new: bool) -> None:
    """The diff against the baseline for Markdown: counts, hosts added and removed, a table of new
    and resolved findings."""
    page.add("", "### Since baseline %s" % md(diff["run_id"]), "",
             "**%d new**, %d resolved, %d persisting%s" % (
                 len(diff["new"]), len(diff["resolved"]), diff["persisting"],
                 " (fail_on_new: only new findings can fail the gate)" if fail_on_new else ""), "")
    for key, label in (("hosts_added", "Hosts added"), ("hosts_removed", "Hosts removed")):
        if diff[key]:
            page.add("- %s (%d): %s%s" % (label, len(diff[key]), ", ".join(md(h) for h in diff[key][:BASELINE_ROWS]),
                                          ", ..." if len(diff[key]) > BASELINE_ROWS else ""))
    not_compared = diff.get("hosts_not_compared") or []
    shown = page.rows("- Not compared: %s (%s)" % (md(item["host"]), md(item["reason"]))
                      for item in not_compared[:BASELINE_ROWS])
    if shown < len(not_compared):
        page.add("- ... %d more not compared: see summary.json" % (len(not_compared) - shown))
    why = {"new": "new", "worsened": "worse", "host_added": "new host", "not_audited_in_baseline": "not audited before"}
    rows = [(why.get(e.get("why"), "new") + (" (was %s)" % e["was"] if e.get("was") else "") +
             (" (waived)" if e.get("waived") else ""), e) for e in diff["new"]]
    rows += [("resolved", e) for e in diff["resolved"]]
    if rows:
        page.add("", "| change | host | rule | severity | mount point |", "|---|---|---|---|---|")
        shown = page.rows("| %s | %s | %s | %s | %s |" % (change, md(e["host"]), md(e["rule"]), e["severity"],
                                                          md(e["mountpoint"]) if e["mountpoint"] else "-")
                          for change, e in rows[:BASELINE_ROWS])
        if shown < len(rows):
            page.add("\n%d more change(s) in summary.json" % (len(rows) - shown))


def _confirmation_text(conf):
    """One finding's confirmation, for Markdown (its probe id is the catalog's: shown as code)."""
    if conf["status"] == "not_measured":
        return "not measured (`%s`): %s" % (conf["probe"], md(conf["reason"]))
    return "%s: `%s`%s ratio %.3g %s %g" % (
        conf["status"].replace("_", " "), conf["probe"], " (%s)" % md(conf["metric"]) if conf["metric"] else "",
        conf["ratio"], ">=" if conf["status"] == "confirmed" else "<", conf["threshold"])


def _probe_lines(report):
    """A host's probe for Markdown: what it means for the host (probe_actions), then quantiles, top
    factors, each confirmation's ratio and spread (and whether it is the host's configuration)."""
    section = report["probe"]
    head = "- **Probe** %s" % md(section["status"])
    head += " on %s" % md(section["mountpoint"]) if section["mountpoint"] else ""
    head += ": %s" % md(section["reason"]) if section["reason"] else ""
    details = [md(section["kernel"])] if section["kernel"] else []
    details += ["%.1f s" % section["duration_s"]] if section["duration_s"] is not None else []
    lines = [head + (" (%s)" % ", ".join(details) if details else "")]
    lines += ["  - " + probe_actions.text(sentence, md, lambda value: "`%s`" % value)
              for sentence in probe_actions.sentences(report)]
    sweep = section.get("sweep")
    if sweep:
        stopped = "; stopped by %s" % md(sweep["stopped_by"]) if sweep.get("stopped_by") else ""
        lines.append("  - sweep: %d of %d runs (seed %s, level set %s%s)" % (
            sweep["runs_completed"], sweep["runs_planned"], md(sweep["seed"]), md(sweep["level_set"]), stopped))
        if sweep["runs_completed"]:
            dspan, ratio = sweep["dspan"], sweep["tail_vs_ideal"]
            lines.append("  - d-span p50 %s, p90 %s, p99 %s; d-span / file size p50 %.3g, p90 %.3g, p99 %.3g" % (
                probe.human_bytes(dspan["p50"]), probe.human_bytes(dspan["p90"]), probe.human_bytes(dspan["p99"]),
                ratio["p50"], ratio["p90"], ratio["p99"]))
        if sweep["prioritization"]:
            lines.append("  - what the d-span depends on most (share of its variance; by chance alone in brackets): "
                         + ", ".join("%s %s (%s)" % (md(probe.factor_title(e["factor"])), probe_actions.percent(e["s"]),
                                                    probe_actions.percent(e["noise_floor"]))
                                     for e in sweep["prioritization"][:3]))
        lines += ["  - note: %s" % md(note) for note in sweep["notes"]]
    for c in section["confirmations"]:
        if c.get("ratio") is not None:
            spread = " (spread %.3g to %.3g)" % tuple(c["ratio_spread"]) if c.get("ratio_spread") else ""
            text = "ratio %.3g%s over %s repetitions, %s" % (c["ratio"], spread, md(c.get("repetitions")),
                                                            md(c.get("status")))
        else:
            text = "%s: %s" % (md(c.get("status")), md(c.get("reason")))
        where = " on %s" % md(c["mountpoint"]) if c.get("mountpoint") else ""
        metric = " (%s)" % md(c["metric"]) if c.get("metric") else ""
        missing = probe_actions.not_in_effect(report, c) if c.get("status") == "measured" else None
        reference = " (for reference; not your configuration: no %s)" % md(",".join(missing)) if missing else ""
        lines.append("  - confirmation %s%s%s: %s%s" % (md(c["id"]), where, metric, text, reference))
    lines += ["  - error: %s" % md(error) for error in section["errors"]]
    return lines




class Writer(writers.GroupsWriter):
    """The findings' groups are made in the report step's workers (a shard's part is its groups,
    one line of JSON) and merged in the parent; the details are those of the hosts shown (MD_HOSTS
    at most), read back from hosts/ (in place when the fleet files are written)."""

    file = "summary.md"

    def __init__(self, job) -> None:
        super().__init__(job)
        self.groups = finding_groups.FindingGroups(job.base is not None, GROUP_HOSTS)

    def finish(self, out, summary: dict, digests: list, parts: writers.Parts) -> None:
        merged = finding_groups.FindingGroups(self.job.base is not None, GROUP_HOSTS)
        merged.merge_parts(parts)
        shown = [row["host"] for row in sorted(summary["hosts"], key=reports.attention_order)[:MD_HOSTS]]
        reader = host_report.Reader(self.job.run_dir)
        out.write(document(summary, [reader.read(reports.host_report_path(self.job.run_dir, host)) for host in shown],
                           merged, self.job.history))
