"""summary.md, for a GitHub job summary: the verdict first, a table of hosts, the baseline diff,
then each host's findings, undetermined rules, read errors and probe, folded.

Every host-provided string goes through md(): GitHub renders Markdown and inline HTML.
"""

import os
import re

from . import policy as policy_mod, probe, probe_actions, reports, severity_rank, writers

# The backslash first (the others add one), "&" before the entities.
_MD = (("\\", "\\\\"), ("&", "&amp;"), ("<", "&lt;"), (">", "&gt;")) + tuple((c, "\\" + c) for c in "`*_[]{}()#+!|~$-")
_MD_BREAKS = re.compile(r"[\r\n\t]+")


def md(value):
    """Escape a host-provided string for Markdown and inline HTML (GitHub job summaries render both)."""
    text = writers.replace_all("" if value is None else str(value), _MD)
    return _MD_BREAKS.sub(" ", text) if "\n" in text or "\r" in text or "\t" in text else text


def document(summary, host_reports):
    lines = ["## ext4 fleet audit: %s" % summary["verdict"].upper(), "",
             "**%s**: %s (fail_on=%s)" % (summary["verdict"], md(summary["reason"]), summary["policy"]["fail_on"]), ""]
    if summary["expired_waivers"]:
        lines += ["> **%d expired waiver(s) no longer waive anything:** %s" % (
            len(summary["expired_waivers"]),
            "; ".join("%s on %s (expired %s, approver %s)" % (md(w["rule"]), md(w["host"]), w["expires"], md(w["approver"]))
                      for w in summary["expired_waivers"])), ""]
    rows = summary["hosts"]
    if len(rows) > MD_HOSTS:  # GitHub takes at most 1 MiB of job summary; every host is in the other files
        rows = sorted(rows, key=reports.attention_order)[:MD_HOSTS]
    lines += ["| host | status | worst | findings | failing | waived | probe |", "|---|---|---|---|---|---|---|"]
    for host in rows:
        lines.append("| %s | %s | %s | %d | %d | %d | %s |" % (
            md(host["host"]), host["status"], host["worst"] or "-", host["findings"], host["failing"], host["waived"],
            host.get("probe") or "-"))
    if len(rows) < len(summary["hosts"]):
        lines += ["", "The %d hosts most in need of attention of %d; every host is in summary.json, report.html "
                  "and hosts/." % (len(rows), len(summary["hosts"]))]
    lines += _kernel_group_lines(summary.get("kernel_groups") or [])
    if summary.get("baseline") is not None:
        lines += _baseline_lines(summary["baseline"], summary["policy"].get("fail_on_new"))
    lines += ["", "<details><summary>Findings by host</summary>", ""]
    by_host = dict((r["host"], r) for r in host_reports)
    for report in (by_host[h["host"]] for h in rows):
        lines.append("### %s" % md(report["host"]))
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
    lines += ["</details>", ""]
    return "\n".join(lines)


def _kernel_group_lines(groups):
    """The kernel record findings by kernel and action: what to do, and on how many hosts."""
    if not groups:
        return []
    lines = ["", "### Kernel findings by kernel", "", "| kernel | hosts | severity | what to do |", "|---|---|---|---|"]
    for group in groups[:reports.KERNEL_GROUP_ROWS]:
        kernel = group["kernel"] + (" (upstream %s)" % group["upstream"] if group["upstream"] else "")
        lines.append("| %s | %s | %s | %s |" % (md(kernel), "{:,}".format(group["hosts"]), group["severity"],
                                               md(group["action"])))
    if len(groups) > reports.KERNEL_GROUP_ROWS:
        lines += ["", "%d more in summary.json (kernel_groups)." % (len(groups) - reports.KERNEL_GROUP_ROWS)]
    return lines


BASELINE_ROWS = 100  # rows of the Markdown diff table; summary.json lists every change
MD_HOSTS = 100  # hosts in summary.md (table and details) when there are more: those most in need of attention


def _baseline_lines(diff, fail_on_new):
    """The diff against the baseline for Markdown: counts, hosts added and removed, a table of new
    and resolved findings."""
    lines = ["", "### Since baseline %s" % md(diff["run_id"]), "",
             "**%d new**, %d resolved, %d persisting%s" % (
                 len(diff["new"]), len(diff["resolved"]), diff["persisting"],
                 " (fail_on_new: only new findings can fail the gate)" if fail_on_new else ""), ""]
    for key, label in (("hosts_added", "Hosts added"), ("hosts_removed", "Hosts removed")):
        if diff[key]:
            lines.append("- %s (%d): %s%s" % (label, len(diff[key]), ", ".join(md(h) for h in diff[key][:BASELINE_ROWS]),
                                              ", ..." if len(diff[key]) > BASELINE_ROWS else ""))
    for item in diff.get("hosts_not_compared") or []:
        lines.append("- Not compared: %s (%s)" % (md(item["host"]), md(item["reason"])))
    why = {"new": "new", "worsened": "worse", "host_added": "new host", "not_audited_in_baseline": "not audited before"}
    rows = [(why.get(e.get("why"), "new") + (" (was %s)" % e["was"] if e.get("was") else "") +
             (" (waived)" if e.get("waived") else ""), e) for e in diff["new"]]
    rows += [("resolved", e) for e in diff["resolved"]]
    if rows:
        lines += ["", "| change | host | rule | severity | mount point |", "|---|---|---|---|---|"]
        lines += ["| %s | %s | %s | %s | %s |" % (change, md(e["host"]), md(e["rule"]), e["severity"],
                                                  md(e["mountpoint"]) if e["mountpoint"] else "-")
                  for change, e in rows[:BASELINE_ROWS]]
        if len(rows) > BASELINE_ROWS:
            lines.append("\n%d more change(s) in summary.json" % (len(rows) - BASELINE_ROWS))
    return lines


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




class Writer(writers.Writer):
    """No host parts: the host details come from the hosts it shows (MD_HOSTS at most), read back
    from hosts/ (in place when the fleet files are written)."""

    file = "summary.md"

    def finish(self, out, summary, digests, parts):
        shown = [row["host"] for row in sorted(summary["hosts"], key=reports.attention_order)[:MD_HOSTS]]
        out.write(document(summary, [
            reports.read_json(os.path.join(self.job.run_dir, "hosts", reports.safe_name(host) + ".json"), "host report")
            for host in shown]))
