"""The end-of-run table the report step prints (and `ext4audit gate --table`): not a file of
the run folder, the operator's first look."""

from ext4audit import severity_rank
from ext4audit.formats import markdown
from ext4audit.report import reports

TABLE_ROWS = 25  # the end-of-run table shows the worst hosts; summary.md and summary.json have them all
MIN_ROWS = 5  # host rows kept however much the lines under the table take
SCREEN = 38  # lines of the report step's output (store lines and this table): with the report path, one screen
GROUP_LINES = 5  # per collapsed list under the table (undetermined and read errors, not audited, kernel groups)
EXPIRED_LINES = 3  # expired waivers, one line per rule, date and approver
NEW_LINES = 5  # findings new since the baseline
SAMPLE = 2  # host names after each collapsed line ("e.g. web-1, web-2")


def tty(value):
    """A host-provided string for the terminal: control characters (newlines, escape sequences)
    shown as escapes, so they can neither break the table nor drive the terminal."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in str(value))


def on_hosts(count: int) -> str:
    return "on %s host%s" % ("{:,}".format(count), "" if count == 1 else "s")


def example_hosts(count: int, sample: list) -> str:
    """"(e.g. web-1, web-2)", or "(web-1)" when the sample is every host."""
    return "(%s%s)" % ("" if count <= SAMPLE else "e.g. ", ", ".join(tty(name) for name in sample[:SAMPLE]))


def capped(lines: list, cap: int, more: str) -> list:
    """At most cap lines, the last one saying how many more there are and where."""
    return lines if len(lines) <= cap else lines[:cap - 1] + ["  ... %d more (%s)" % (len(lines) - cap + 1, more)]


def unresolved_lines(summary: dict) -> list:
    """The undetermined rules and read errors, one line per rule and missing facts (or place and
    error) with how many hosts share it, instead of lines per host."""
    out = []
    for group in summary.get("unresolved_groups") or []:
        if group["kind"] == reports.UNDETERMINED:
            text = "%s undetermined %s: missing %s" % (group["subject"], on_hosts(group["hosts"]), group["detail"])
        else:
            text = "read error (%s) %s: %s" % (group["subject"], on_hosts(group["hosts"]), group["detail"])
        out.append("  %s %s" % (tty(text), example_hosts(group["hosts"], group["sample"])))
    return capped(out, GROUP_LINES, "summary.json unresolved_groups, the host reports")


def not_audited_lines(hosts: list) -> list:
    """Local filesystems of other types ("not audited: xfs at /srv"), one line per type and mount point."""
    groups = {}
    for h in hosts:
        for line in h.get("not_audited") or []:
            groups.setdefault(line, []).append(h["host"])
    out = ["  not audited: %s %s %s" % (tty(line), on_hosts(len(names)), example_hosts(len(names), names))
           for line, names in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))]
    return capped(out, GROUP_LINES, "summary.json host rows")


def expired_lines(summary: dict) -> list:
    """Waivers that expired and no longer waive anything: one line per rule, date and approver."""
    groups = {}
    for waiver in summary.get("expired_waivers") or []:
        key = (str(waiver.get("rule")), str(waiver.get("expires")), str(waiver.get("approver")))
        groups.setdefault(key, []).append(waiver.get("host"))
    if not groups:
        return []
    out = ["expired waivers (%d): they no longer waive anything" % len(summary["expired_waivers"])]
    out += ["  %s %s: expired %s, approver %s %s" % (tty(rule), on_hosts(len(names)), tty(expires[:10]), tty(approver),
                                                     example_hosts(len(names), names))
            for (rule, expires, approver), names in sorted(groups.items(), key=lambda item: (-len(item[1]), item[0]))]
    return out[:1] + capped(out[1:], EXPIRED_LINES, "summary.md")


def kernel_lines(summary: dict) -> list:
    groups = summary.get("kernel_groups") or []
    if not groups:
        return []
    return ["kernel findings by kernel:"] + capped(["  " + tty(reports.kernel_group_line(group)) for group in groups],
                                                   GROUP_LINES, "summary.json kernel_groups")


def baseline_lines(summary: dict) -> list:
    diff = summary.get("baseline")
    if diff is None:
        return []
    changed = ["hosts %s: %s" % (what, ", ".join(tty(h) for h in diff["hosts_" + what][:5]) +
                                 (", ..." if len(diff["hosts_" + what]) > 5 else ""))
               for what in ("added", "removed") if diff["hosts_" + what]]
    out = ["since baseline %s: %d new, %d resolved, %d persisting%s" % (
        tty(diff["run_id"]), len(diff["new"]), len(diff["resolved"]), diff["persisting"],
        "; " + "; ".join(changed) if changed else "")]
    for entry in sorted(diff["new"], key=lambda e: -severity_rank(e["severity"]))[:NEW_LINES]:
        out.append("  new: %s %s %s%s%s" % (tty(entry["host"]), entry["rule"], entry["severity"],
                                          " on " + tty(entry["mountpoint"]) if entry["mountpoint"] else "",
                                          " (was %s)" % entry["was"] if entry.get("was") else ""))
    if len(diff["new"]) > NEW_LINES:
        out.append("  ... %d more new (summary.md)" % (len(diff["new"]) - NEW_LINES))
    return out


def table(summary: dict, limit: int = TABLE_ROWS, screen: int = SCREEN) -> str:
    """The end-of-run table (host, worst severity, findings, undetermined rules, read errors, probe
    status), hosts not audited and the worst first; under it, collapsed across hosts, the undetermined
    rules and read errors, the local filesystems of other types ("not audited: xfs at /srv"), the
    expired waivers and the kernel findings; then the baseline line and the verdict line. At most
    `screen` lines however many hosts: the table gives up rows (down to MIN_ROWS) for the lines under
    it. The verdict line is always last."""
    hosts = sorted(summary["hosts"], key=reports.attention_order)
    under = (unresolved_lines(summary) + not_audited_lines(hosts) + expired_lines(summary) + kernel_lines(summary)
             + baseline_lines(summary) + ["verdict: %s: %s" % (summary["verdict"], tty(summary["reason"]))])
    rows_left = screen - len(under) - 1  # the header
    if len(hosts) > min(limit, rows_left):
        limit = max(MIN_ROWS, min(limit, rows_left - 1))  # and the "... more hosts" line
    rows = [("host", "worst", "findings", "undetermined", "read errors", "probe")]
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
    cells = [[tty(cell)[:40] for cell in row] for row in rows]
    widths = [max(len(row[i]) for row in cells) for i in range(len(rows[0]))]
    out = ["  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in cells]
    if len(hosts) > limit:
        out.append("... %s more hosts: see %s" % ("{:,}".format(len(hosts) - limit),
                                                 "summary.md" if len(hosts) <= markdown.MD_HOSTS else "report.html"))
    return "\n".join(out + under)
