"""The end-of-run table the report step prints (and `ext4audit gate --table`): not a file of
the run folder, the operator's first look."""

from . import markdown, reports, severity_rank

TABLE_ROWS = 25  # the end-of-run table shows the worst hosts; summary.md and summary.json have them all
KERNEL_GROUPS = 10  # kernel findings by kernel and action under the table; summary.json has them all


def tty(value):
    """A host-provided string for the terminal: control characters (newlines, escape sequences)
    shown as escapes, so they can neither break the table nor drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


def table(summary, limit=TABLE_ROWS):
    """The end-of-run table (host, worst severity, findings, undetermined rules, read errors, probe
    status), hosts not audited and the worst first, the undetermined rules, read errors and local
    filesystems of other types ("not audited: xfs at /srv") named under it, then the baseline line and the verdict line. The verdict line is always last (the
    playbook's failure message is that line)."""
    hosts = sorted(summary["hosts"], key=reports.attention_order)
    rows = [("host", "worst", "findings", "undetermined", "read errors", "probe")]
    named = []
    for h in hosts[:limit]:
        counts = (str(h.get("undetermined", "-")), str(h["errors"]))
        if h["status"] != "audited":
            rows.append((h["host"], "not audited: " + h["status"], "-") + counts + (h.get("probe") or "-",))
            continue
        notes = ["%d failing" % h["failing"]] if h["failing"] else []
        notes += ["%d new" % h["new"]] if h.get("new") else []
        notes += ["%d waived" % h["waived"]] if h["waived"] else []
        rows.append((h["host"], h["worst"] or "-", "%d%s" % (h["findings"], " (%s)" % ", ".join(notes) if notes else ""))
                    + counts + (h.get("probe") or "-",))
        named += ["  %s: %s" % (tty(h["host"]), tty(line)) for line in h.get("unresolved") or []]
        named += ["  %s: not audited: %s" % (tty(h["host"]), tty(line)) for line in h.get("not_audited") or []]
    cells = [[tty(cell)[:40] for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells] + named
    if len(hosts) > limit:
        out.append("... %d more host(s) (all in %s)" % (len(hosts) - limit, "summary.md" if len(hosts) <= markdown.MD_HOSTS
                                                          else "summary.json and report.html"))
    groups = summary.get("kernel_groups") or []
    if groups:
        out.append("kernel findings by kernel:")
        out += ["  " + tty(reports.kernel_group_line(group)) for group in groups[:KERNEL_GROUPS]]
        if len(groups) > KERNEL_GROUPS:
            out.append("  ... %d more (summary.json kernel_groups)" % (len(groups) - KERNEL_GROUPS))
    diff = summary.get("baseline")
    if diff is not None:
        changed = ["hosts %s: %s" % (what, ", ".join(tty(h) for h in diff["hosts_" + what][:5]) +
                                     (", ..." if len(diff["hosts_" + what]) > 5 else ""))
                   for what in ("added", "removed") if diff["hosts_" + what]]
        out.append("since baseline %s: %d new, %d resolved, %d persisting%s" % (
            tty(diff["run_id"]), len(diff["new"]), len(diff["resolved"]), diff["persisting"],
            "; " + "; ".join(changed) if changed else ""))
        for entry in sorted(diff["new"], key=lambda e: -severity_rank(e["severity"]))[:5]:
            out.append("  new: %s %s %s%s%s" % (tty(entry["host"]), entry["rule"], entry["severity"],
                                              " on " + tty(entry["mountpoint"]) if entry["mountpoint"] else "",
                                              " (was %s)" % entry["was"] if entry.get("was") else ""))
        if len(diff["new"]) > 5:
            out.append("  ... %d more new (summary.md)" % (len(diff["new"]) - 5))
    out.append("verdict: %s: %s" % (summary["verdict"], tty(summary["reason"])))
    return "\n".join(out)

