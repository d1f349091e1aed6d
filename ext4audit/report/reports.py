"""The run folder's durable files and the gate verdict.

reports/<run-id>/
  facts/<host>.json    what the playbook collected (input)
  probe/<host>.json    what the probe measured, probe/plan.json its plan (input, optional)
  hosts/<host>.json    per-host report (contract: ext4-fleet-audit/host-report/v1)
  summary.json         verdict, counts, hosts not audited
  the report formats'  files (writers.FORMATS: junit.xml, summary.md, report.sarif, ...)
reports/latest -> <run-id>

Every file is written to a temporary name and renamed into place, so a killed run never leaves
a half-written report. summary.json is written last, once every other file is on disk, and
`latest` moves after it: a run folder without summary.json is incomplete (finish_run,
read_complete_run).
"""

import contextlib
import ctypes
import gc
import glob
import hashlib
import json
import os
import queue
import re
import tempfile
import threading

import msgspec

from ext4audit import EXIT_CODES, SEVERITIES, severity_rank, umask  # noqa: F401  # EXIT_CODES: reports.EXIT_CODES
from ext4audit.model import contract, times
from ext4audit.probe import analysis as probe
from ext4audit.rules import kernel_records
from ext4audit.parsers import run_folder

HOST_SCHEMA = contract.HOST_REPORT_SCHEMA
SUMMARY_SCHEMA = contract.SUMMARY_SCHEMA


class ReportError(ValueError):
    """A report folder or file that cannot be read; the message says which and why."""


# ------------------------------------------------------------------ file helpers
NAME_MAX = 200  # bytes of a hosts/ file name before .json; a file name may have 255


def safe_name(host):
    """A file name for an inventory hostname: kept as is when it is plain, escaped otherwise; never
    hidden; past NAME_MAX, cut short and ended by a hash of the whole name (a long host name is
    still reported, the report holds it whole)."""
    name = re.sub(r"[^A-Za-z0-9._-]", lambda m: "%%%02X" % ord(m.group(0)) if ord(m.group(0)) < 256
                  else "%%u%04X" % ord(m.group(0)), host)
    name = "_" + name if name.startswith(".") or not name else name
    if len(name) > NAME_MAX:
        name = "%s~%s" % (name[:NAME_MAX - 17], hashlib.sha1(host.encode("utf-8", "surrogatepass")).hexdigest()[:16])
    return name


def host_report_file(host: str) -> str:
    """The file name of a host's report in a run folder's hosts/."""
    return safe_name(host) + ".json"


def host_report_path(run_dir: str, host: str) -> str:
    """Where a run folder holds a host's report."""
    return os.path.join(run_dir, "hosts", host_report_file(host))


# The mode open() gives a new file (the umask read once, at import). mkstemp's 0600 would keep
# ext4audit.prom from node_exporter's textfile collector (another user) and make the fleet files
# unlike the host reports beside them.
FILE_MODE = 0o666 & ~umask()


@contextlib.contextmanager
def atomic_file(path, durable=True):
    """A text file to write in pieces (big reports are streamed): it gets its name only when the
    block completes, and is removed if the block raises. durable=False leaves the flush to disk to
    finish_run (one syncfs for thousands of host reports instead of an fsync each)."""
    directory = os.path.dirname(path) or "."
    os.makedirs(directory, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=directory, prefix=".tmp-", suffix=os.path.basename(path))
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            os.fchmod(out.fileno(), FILE_MODE)
            yield out
            out.flush()
            if durable:
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def write_atomic(path, text, durable=True):
    with atomic_file(path, durable) as out:
        out.write(text)


_COMPACT = msgspec.json.Encoder(order="sorted")


def dump_compact(doc):
    """One line of UTF-8, keys sorted: the bytes json.dumps(doc, sort_keys=True, ensure_ascii=False,
    separators=(",", ":")) gives, in a fifth of the time (host reports at fleet scale). The one
    difference: a NaN or infinity is written as null, which JSON can carry."""
    try:
        return _COMPACT.encode(doc) + b"\n"
    except TypeError:  # a key that is not a string: json's rules (it makes keys strings)
        return (json.dumps(doc, sort_keys=True, ensure_ascii=False, separators=(",", ":")) + "\n").encode("utf-8")


def json_text(doc):
    """Indented for people, keys sorted."""
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_json(path, doc, durable=True):
    write_atomic(path, json_text(doc), durable)


def read_json(path, what, model=None):
    """A JSON file, parsed. model: a contract model to decode it into (msgspec builds only the
    fields the model names and skips the rest; a document of another shape is an error)."""
    try:
        with open(path, "rb") as handle:  # bytes: the decoders read UTF-8 themselves, faster than a text file
            data = handle.read()
        return _decoder(model).decode(data) if model else json.loads(data)
    except FileNotFoundError:
        raise ReportError("%s not found: %s" % (what, path))
    except msgspec.ValidationError as exc:
        raise ReportError("%s %s: %s" % (what, path, contract.explain(exc, model)))
    except (OSError, ValueError) as exc:
        raise ReportError("%s %s is not valid JSON: %s" % (what, path, exc))


_DECODERS = {}


def _decoder(model):
    if model not in _DECODERS:
        _DECODERS[model] = msgspec.json.Decoder(model)
    return _DECODERS[model]


def sync_folder(path):
    """Flush the filesystem that holds `path` to disk: syncfs(2) where the C library has it (Linux),
    else sync(2)."""
    try:
        syncfs = ctypes.CDLL(None, use_errno=True).syncfs
    except (AttributeError, OSError):
        os.sync()
        return
    handle = os.open(path, os.O_RDONLY | os.O_DIRECTORY)
    try:
        if syncfs(handle) != 0:
            raise OSError(ctypes.get_errno(), "syncfs %s: %s" % (path, os.strerror(ctypes.get_errno())))
    finally:
        os.close(handle)


@contextlib.contextmanager
def writing_back():
    """A thread that starts the write-back of the files in each folder given to the function this
    yields (posix_fadvise DONTNEED, Linux: it starts writing a file's dirty pages without waiting,
    and drops them from the page cache once written). The report step gives it each shard's
    hosts/ as soon as the shard is done: the disk writes them while the workers work, and the
    syncfs before summary.json (finish_run) has less left to wait for (a syncfs earlier would
    also write the staging parts, which the step removes unwritten). Only a head start: an error
    here is left to that syncfs, which reports write-back errors."""
    folders = queue.SimpleQueue()

    def start():
        for folder in iter(folders.get, None):
            with contextlib.suppress(OSError):
                for name in os.listdir(folder):
                    handle = os.open(os.path.join(folder, name), os.O_RDONLY | os.O_NOFOLLOW)  # the step made them
                    try:
                        os.posix_fadvise(handle, 0, 0, os.POSIX_FADV_DONTNEED)
                    finally:
                        os.close(handle)

    thread = threading.Thread(target=start, name="write-back", daemon=True)
    if hasattr(os, "posix_fadvise"):
        thread.start()
    try:
        yield folders.put
    finally:
        if thread.is_alive():
            folders.put(None)
            thread.join()


SUMMARY = "summary.json"


def finish_run(run_dir, summary):
    """Write summary.json, the run folder's last file, once every other file is on disk (then
    `latest` may move to the run: point_latest).

    summary.json itself marks a complete run folder, not a marker file beside it: it is what
    users and CI jobs script against (`jq .verdict`), and with a marker a run that stopped
    halfway (out of space, killed) would still leave a summary.json saying `pass` to every script
    that does not know to look for the marker. Writing it last costs nothing: junit.xml,
    report.sarif, ext4audit.prom, report.html and summary.md are made from the summary in
    memory, not from the file."""
    sync_folder(run_dir)
    write_json(os.path.join(run_dir, SUMMARY), summary)  # durable: never on disk empty or cut short


def read_complete_run(run_dir, what):
    """(summary, {host: status}) of a complete run folder, for gate, merge and --baseline. A
    folder without summary.json, with one that is cut short or foreign, or whose summary.json does
    not list exactly the host reports in hosts/ (a copy cut short), is refused: a ReportError
    naming the folder and what is missing. what: the folder's role in the message."""
    if not os.path.isdir(run_dir):
        raise ReportError("%s %s: %s" % (what, run_dir, "not a folder" if os.path.exists(run_dir) else "not found"))
    path = os.path.join(run_dir, SUMMARY)
    if not os.path.exists(path):
        raise ReportError("%s %s is incomplete: it has no %s, which the report step writes last, once every other "
                          "file is on disk; the step did not finish there (it failed, e.g. out of space, was killed, "
                          "or is still running)" % (what, run_dir, SUMMARY))
    summary = read_json(path, what + " summary")
    contract.check(summary, contract.Summary, "%s summary %s" % (what, path))
    listed = summary["hosts"]
    statuses = dict((h["host"], h["status"]) for h in listed)
    if len(statuses) < len(listed):
        raise ReportError("%s %s lists a host twice" % (what, path))
    files = dict((host_report_file(host), host) for host in statuses)
    present = set(os.path.basename(p) for p in glob.glob(os.path.join(run_dir, "hosts", "*.json")))
    if set(files) != present:
        missing, extra = sorted(files[f] for f in set(files) - present), sorted(present - set(files))
        raise ReportError("%s %s is incomplete: %s lists %d host(s), hosts/ has %d%s%s" % (
            what, run_dir, SUMMARY, len(files), len(present), "; no report for %s" % some(missing) if missing else "",
            "; not in the summary: %s" % some(extra) if extra else ""))
    return summary, statuses


def play_hosts(run_dir: str) -> "list[str] | None":
    """The hosts of the run's facts play (play-hosts.json, written by the role with their records,
    decoded through contract.PlayHosts), or None for a folder without the list (made by hand, or by
    an older role)."""
    path = os.path.join(run_dir, run_folder.PLAY_HOSTS)
    if not os.path.exists(path):
        return None
    return read_json(path, "the play's host list", contract.PlayHosts).hosts


def some(names):
    """Names for a message: the first five, quoted."""
    return ", ".join(repr(n) for n in names[:5]) + (", ..." if len(names) > 5 else "")


def point_latest(reports_dir: str, name: str, run_dir: str) -> None:
    """Move reports/latest to the run folder `name` (run_dir) atomically (symlink to a temp name,
    then rename), once the run's files are on disk: `latest` never points at a run a crash could
    leave half written."""
    sync_folder(run_dir)
    link = os.path.join(reports_dir, "latest")
    tmp = os.path.join(reports_dir, ".latest-%d" % os.getpid())
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(name, tmp)
    os.replace(tmp, link)


def write_verdict(path: str, run_dir: str, summary: dict, gate: bool = True) -> None:
    """The verdict for `ext4audit run` (--verdict-file): {"verdict", "reason", "run_dir", "gate"},
    mode 0600, in the private folder it names, written without following a symbolic link. The wrapper
    exits by this, never by re-reading the run folder (gate false: as ansible-playbook did)."""
    fd = os.open(os.path.dirname(os.path.abspath(path)), os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        run_folder.write_file(fd, os.path.basename(path), json.dumps(
            {"verdict": summary["verdict"], "reason": summary["reason"], "run_dir": os.path.abspath(run_dir),
             "gate": gate}) + "\n",
            mode=0o600)
    finally:
        os.close(fd)


@contextlib.contextmanager
def no_gc():
    """Python's cycle collector paused: a run's reports are millions of objects and no reference
    cycles, and each full collection walks all of them (about a tenth of the time at 1,000 hosts,
    more with more). Reference counting still frees everything."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()


# ------------------------------------------------------------------ the verdict
def failing(finding, fail_on):
    return not finding["waived"] and severity_rank(finding["severity"]) >= severity_rank(fail_on)


def policy_failures(findings, fail_on, fail_on_new):
    """The findings that fail the gate: unwaived, at or above fail_on and, with fail_on_new, new
    since the baseline (marked by baseline.compare_host)."""
    return [f for f in findings if failing(f, fail_on) and (not fail_on_new or f.get("baseline") == "new")]


def host_fail_on(report, fail_on):
    """The host's own fail_on (its policy, from group_vars or host_vars); fail_on for a report without one."""
    return (report.get("policy") or {}).get("fail_on") or fail_on


UNRESOLVED_NAMED = 3  # per host in summary.json's host rows; the host report has them all


def unresolved(undetermined, errors):
    """The first undetermined rules and read errors of a host, one short line each (summary.json's host rows)."""
    lines = ["undetermined %s%s: missing %s" % (item.get("rule"), " on %s" % item["mountpoint"] if item.get("mountpoint")
                                                else "", ", ".join(item.get("missing") or []))
             for item in undetermined]
    lines += ["read error (%s): %s" % (error.get("where"), error.get("reason")) for error in errors]
    return [line[:160] for line in lines[:UNRESOLVED_NAMED]] + (
        ["... %d more (host report)" % (len(lines) - UNRESOLVED_NAMED)] if len(lines) > UNRESOLVED_NAMED else [])


UNDETERMINED, READ_ERROR = "undetermined", "read error"


def unresolved_keys(undetermined: list, errors: list) -> list:
    """What a host could not settle, one (kind, subject, detail) per kind of gap whatever the mount
    point: (undetermined, rule, the missing facts) and (read error, where, why). Hosts with the same
    key are one line of the end-of-run table (unresolved_groups)."""
    keys = set((UNDETERMINED, str(item.get("rule")), ", ".join(item.get("missing") or [])) for item in undetermined)
    keys.update((READ_ERROR, str(error.get("where")), str(error.get("reason"))[:160]) for error in errors)
    return sorted(keys)


UNRESOLVED_GROUP_SAMPLE = 3  # host names kept per group; the host reports name them all


def unresolved_groups(digests: list) -> list:
    """The fleet's undetermined rules and read errors, one entry per unresolved_keys key: kind,
    subject (the rule, or where the read failed), detail (the missing facts, or the error), hosts
    (how many) and sample (the first host names). Largest first."""
    groups = {}
    for digest_ in digests:
        for key in digest_.get("unresolved_keys") or ():
            group = groups.get(key)
            if group is None:
                group = groups[key] = {"kind": key[0], "subject": key[1], "detail": key[2], "hosts": 0, "sample": []}
            group["hosts"] += 1
            if len(group["sample"]) < UNRESOLVED_GROUP_SAMPLE:
                group["sample"].append(digest_["host"])
    return sorted(groups.values(), key=lambda g: (-g["hosts"], g["kind"] != UNDETERMINED, g["subject"], g["detail"]))


def not_audited_lines(report: dict) -> list:
    """'TYPE at MOUNTPOINT' for each local filesystem of the host that the audit does not check."""
    return ["%s at %s" % (item.get("fstype"), item.get("mountpoint")) for item in report.get("not_audited") or []]


_SHARED: dict = {}


def shared(value):
    """One object for equal values (strings, tuples) across the hosts of a worker: the digests of a
    fleet repeat the same few hundred lines and keys, which pickle then sends and the parent keeps
    once per shard instead of once per host (issue 28: the report step's memory at 100,000 hosts)."""
    return _SHARED.setdefault(value, value)


def digest(report, fail_on, fail_on_new=False, compared=False):
    """What the fleet files need from one host report, in a few hundred bytes: the report step
    keeps this for every host and no host's full report (fleet.py). compared: the findings carry
    baseline marks (baseline.compare_host ran). The host is judged by its own fail_on."""
    fail_on = host_fail_on(report, fail_on)
    findings = report["findings"]
    unwaived = [f for f in findings if not f["waived"]]
    by_severity, by_rule, metrics = dict((s, 0) for s in SEVERITIES), {}, {}
    for finding in unwaived:
        by_severity[finding["severity"]] += 1
        by_rule[finding["rule"]] = by_rule.get(finding["rule"], 0) + 1
    for finding in findings:
        key = shared((bool(finding["waived"]), finding["rule"], finding["severity"]))
        metrics[key] = metrics.get(key, 0) + 1
    failing_ = [f for f in unwaived if severity_rank(f["severity"]) >= severity_rank(fail_on)]
    fails_policy = policy_failures(failing_, fail_on, fail_on_new)
    section = report.get("probe")
    sweep = (section or {}).get("sweep") or {}
    worst = max((f["severity"] for f in unwaived), key=severity_rank, default=None)
    new = sum(f.get("baseline") == "new" for f in unwaived) if compared else None
    expired = [dict(w, host=report["host"]) for w in report.get("expired_waivers") or []]
    errors = report.get("errors") or []
    undetermined = report.get("undetermined") or []
    probe_failed = section is not None and section["status"] in probe.FAILED
    # the host's kernel record findings, by what they share with other hosts (kernel_groups)
    kernel_actions = [shared(_kernel_action(f)) for f in unwaived if (f.get("evidence") or {}).get("kernel_action")]
    return {
        "host": report["host"], "status": report["status"], "reason": report.get("reason"),
        "row": {"host": report["host"], "status": report["status"], "fail_on": fail_on, "worst": worst,
                "findings": len(unwaived),
                "failing": len(failing_), "new": new, "waived": len(findings) - len(unwaived), "errors": len(errors),
                "undetermined": len(undetermined), "unresolved": [shared(line) for line in unresolved(undetermined, errors)],
                "not_audited": [shared(line) for line in not_audited_lines(report)],
                "probe": (section or {}).get("status")},
        "by_severity": by_severity, "by_rule": by_rule, "metrics": sorted(metrics.items()),
        "undetermined": len(undetermined),
        "unresolved_keys": [shared(key) for key in unresolved_keys(undetermined, errors)],
        "kernel_actions": kernel_actions,
        "bad": [shared((f["rule"], f["severity"])) for f in fails_policy],
        "expired_waivers": expired,
        "probe": probe_overview(report["host"], section) if section else None,
        "probe_failed": {"host": report["host"], "status": section["status"], "reason": section["reason"]}
        if probe_failed else None,
        "probe_plotted": bool(sweep.get("runs_completed")),
        "dspan": (sweep.get("dspan") or {}) if sweep.get("runs_completed") else {},
        # report.html gives a host its own section when the gate or a person has to act on it
        "attention": bool(report["status"] != "audited" or fails_policy or probe_failed or expired or new),
    }


def _kernel_action(finding: dict) -> tuple:
    """(kernel, upstream, rule, severity, what to do) of a kernel record finding: hosts with the same
    tuple are one group of kernel_groups."""
    evidence = finding["evidence"]
    kernel = evidence["kernel_action"].get("kernel") or {}
    return (kernel.get("release"), kernel.get("upstream"), finding["rule"], finding["severity"],
            kernel_records.describe(evidence))


KERNEL_GROUP_SAMPLE = 5  # host names kept per kernel group; summary.json's host rows have them all
KERNEL_GROUP_ROWS = 50  # kernel groups in summary.md and report.html; summary.json lists every one


def kernel_groups(digests: list) -> list:
    """The kernel record findings of the fleet, one entry per kernel and action (the hosts that
    share a kernel share its records): kernel, upstream, rule, severity, action (the message's
    sentence), hosts (how many) and sample (the first host names). Worst and largest first."""
    groups = {}
    for digest_ in digests:
        for key in digest_.get("kernel_actions") or ():
            group = groups.get(key)
            if group is None:
                group = groups[key] = {"kernel": key[0], "upstream": key[1], "rule": key[2], "severity": key[3],
                                       "action": key[4], "hosts": 0, "sample": []}
            group["hosts"] += 1
            if len(group["sample"]) < KERNEL_GROUP_SAMPLE:
                group["sample"].append(digest_["host"])
    return sorted(groups.values(), key=lambda g: (-severity_rank(g["severity"]), -g["hosts"], g["kernel"] or "",
                                                  g["rule"]))


def kernel_group_line(group: dict) -> str:
    """One line of a kernel group: "6.1.0-40-amd64 (upstream 6.1.153) on 3,412 hosts [high]: upgrade ..."."""
    upstream = " (upstream %s)" % group["upstream"] if group["upstream"] and group["upstream"] != group["kernel"] else ""
    return "%s%s on %s host%s [%s]: %s" % (group["kernel"], upstream, "{:,}".format(group["hosts"]),
                                           "" if group["hosts"] == 1 else "s", group["severity"], group["action"])


def verdict(host_reports, fail_on, unreachable_is_incomplete, fail_on_new=False):
    """Return (verdict, one-line reason) for host reports (see verdict_of)."""
    return verdict_of([digest(r, fail_on, fail_on_new) for r in host_reports], fail_on, unreachable_is_incomplete,
                      fail_on_new)


def verdict_of(digests, fail_on, unreachable_is_incomplete, fail_on_new=False):
    """Return (verdict, one-line reason). incomplete outranks fail: a gate that could not look
    at every host cannot vouch for the fleet, and says what it did find as well. fail_on_new:
    only findings new since the baseline count (marked by baseline.compare)."""
    audited = [d for d in digests if d["status"] == "audited"]
    missing = [d for d in digests if d["status"] != "audited"]
    bad = [(d["host"], rule, severity) for d in audited for rule, severity in d["bad"]]
    kind = "new finding" if fail_on_new else "finding"
    levels = set(d["row"]["fail_on"] for d in audited) or {fail_on}
    level = levels.pop() if len(levels) == 1 else "each host's fail_on"
    found = ("%d %s(s) at or above %s on %d host(s)" % (len(bad), kind, level, len(set(b[0] for b in bad)))
             if bad else "no unwaived %s at or above %s" % (kind, level))
    if not audited:
        return "incomplete", "no host was audited" + ("" if not missing else ": " + _host_statuses(missing))
    if missing and unreachable_is_incomplete:
        return "incomplete", "%d host(s) not audited (%s); %s" % (len(missing), _host_statuses(missing), found)
    if bad:
        host, rule, severity = bad[0]
        return "fail", "%s, e.g. %s %s on %s" % (found, rule, severity, host)
    return "pass", found + " on %d host(s)" % len(audited)


def _host_statuses(reports):
    names = ["%s: %s" % (r["host"], r["status"]) for r in reports[:3]]
    return ", ".join(names) + (", ..." if len(reports) > 3 else "")


def probe_overview(host, section):
    """A host's probe in one row of summary.json."""
    sweep = section.get("sweep") or {}
    dspan = sweep.get("dspan") or {}
    return {"host": host, "status": section["status"], "runs_completed": sweep.get("runs_completed"),
            "runs_planned": sweep.get("runs_planned"), "dspan_p90": dspan.get("p90"), "dspan_p99": dspan.get("p99"),
            "confirmations": [{"id": c["id"], "status": c.get("status"), "ratio": c.get("ratio"),
                               "mountpoint": c.get("mountpoint")} for c in section["confirmations"]],
            "errors": len(section["errors"])}


def summarize(host_reports, run_id, fail_on, unreachable_is_incomplete, now, baseline=None, fail_on_new=False):
    """The fleet summary of host reports (see summarize_digests)."""
    digests = [digest(r, fail_on, fail_on_new, compared=baseline is not None) for r in host_reports]
    return summarize_digests(digests, run_id, fail_on, unreachable_is_incomplete, now, baseline, fail_on_new)


def summarize_digests(digests, run_id, fail_on, unreachable_is_incomplete, now, baseline=None, fail_on_new=False):
    """The fleet summary. `probe` has an overview of each host with a probe record. A probe
    that failed does not change the verdict (the static audit decides) but is never silent: it
    is listed in probe.failed and named in the reason line. baseline: the diff from
    baseline.compare (None without a baseline); fail_on_new needs one."""
    result, reason = verdict_of(digests, fail_on, unreachable_is_incomplete, fail_on_new)
    if baseline is not None:
        reason += "; since baseline %s: %d new, %d resolved" % (baseline["run_id"], len(baseline["new"]),
                                                             len(baseline["resolved"]))
    probe_failed = [d["probe_failed"] for d in digests if d["probe_failed"]]
    if probe_failed:
        reason += "; probe did not run on %d host(s) (%s)" % (len(probe_failed), _host_statuses(probe_failed))
    by_severity = dict((s, 0) for s in SEVERITIES)
    by_rule = {}
    for d in digests:
        for severity, count in d["by_severity"].items():
            by_severity[severity] += count
        for rule, count in d["by_rule"].items():
            by_rule[rule] = by_rule.get(rule, 0) + count
    return {
        "schema": SUMMARY_SCHEMA,
        "run_id": run_id,
        "generated_at": times.stamp(now),
        "policy": {"fail_on": fail_on, "unreachable_is_incomplete": unreachable_is_incomplete,
                   "fail_on_new": fail_on_new},
        "verdict": result,
        "reason": reason,
        "counts": {"by_severity": by_severity, "by_rule": dict(sorted(by_rule.items())),
                   "waived": sum(d["row"]["waived"] for d in digests),
                   "undetermined": sum(d["undetermined"] for d in digests),
                   "hosts": len(digests), "hosts_audited": sum(d["status"] == "audited" for d in digests)},
        "hosts": [d["row"] for d in digests],
        "hosts_not_audited": [{"host": d["host"], "status": d["status"], "reason": d["reason"]}
                              for d in digests if d["status"] != "audited"],
        "expired_waivers": [w for d in digests for w in d["expired_waivers"]],
        "probe": {"hosts": [d["probe"] for d in digests if d["probe"]], "failed": probe_failed},
        "baseline": baseline,
        "kernel_groups": kernel_groups(digests),
        "unresolved_groups": unresolved_groups(digests),
    }


def attention_order(h):
    """Sort key of summary host rows: not audited first, then by worst severity and failing findings."""
    return (h["status"] == "audited", -severity_rank(h["worst"]) if h["worst"] else 1, -h["failing"], h["host"])


