"""report.html: the page for people (ext4audit/formats/templates/report.html.j2), and its details folder.

The verdict first, then the fleet's findings groups (finding_groups.py), the worst hosts, the
fleet table (its rows are JSON data the page's script sorts, filters and pages over every host:
fleet_data), the baseline diff and the kernel-gate comparison when the run has them, and the rules
found (rationale, remediation, references: one entry per rule). A host's detail loads on demand
from report-data/ beside the page (Details: chunks of hosts as .js files, since a file:// page may
load a script but not fetch() a file). Runs of up to ALL_SECTIONS hosts also get a section per
host, with the probe's pictures (SVG inline, ext4audit/probe/plots.py). So the page and its data stay
small at any fleet size: about 1 KB a host.

Inert: the Content-Security-Policy (csp) lets the one inline script run by its hash and load only
scripts of the page's own origin (the details files); every host-provided string is escaped: by
Jinja2's autoescape in the templates, by escape() (the same function) in the host sections, which
are written in Python for speed (Sections); in the data block, "<", ">" and "&" are JSON escapes;
the script sets every string as text. Nothing in here marks host data safe: only our own CSS,
script and matplotlib's SVG (whose text matplotlib escapes) are.
"""

import base64
import functools
import glob
import hashlib
import io
import itertools
import json
import os
import shutil
import tempfile
import urllib.parse

import msgspec
from markupsafe import Markup

from ext4audit import SEVERITIES, severity_rank
from ext4audit.report import finding_groups
from ext4audit.model import contract
from ext4audit.probe import analysis as probe, sentences as probe_actions
from ext4audit.formats import writers
from ext4audit.report import reports
from ext4audit.rules import policy as policy_mod
from ext4audit.report import host_report
from ext4audit.store import history as store_history

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "templates")
# A probed host's three pictures take about 0.3 s to draw and 80 KiB of page: a fleet where the
# probe ran on more hosts gets them for the first ones (every host's numbers are in the page).
MAX_PLOTTED_HOSTS = 10
# Fleets up to this size show every host unfolded, each finding with its rule's rationale,
# remediation and references; larger ones link each finding to its rule's entry (one per rule),
# which keeps 10,000 hosts to tens of MiB.
DETAILED_HOSTS = 20
# Runs up to this size give every host a section in the page; larger ones none: a host's detail
# loads on demand from report-data/ (Details), and the page stays small at any fleet size.
ALL_SECTIONS = 200
DATA = "report-data"  # the folder beside report.html with the hosts' details (Details)
CHUNK_HOSTS = writers.SHARD_ALIGN  # hosts a details file: ~300 KB, loaded in a blink when one host is opened
WORST_HOSTS = 25  # rows of the page's "worst hosts" table
GROUP_ROWS = 100  # rows of the page's findings groups table (summary.md and report.sarif have them all)
_ENCODE = msgspec.json.Encoder().encode  # the page's data (5 times json.dumps' speed)


@functools.lru_cache(maxsize=None)
def _environment():
    import jinja2  # only the report step needs it (and ansible-core pins it)

    class Environment(jinja2.Environment):
        def getattr(self, obj, attribute):
            """`a.b` on the reports' dicts: the key first. Jinja tries the Python attribute first,
            and the AttributeError it catches for every lookup was a third of the render time."""
            if type(obj) is dict and attribute in obj:
                return obj[attribute]
            return super().getattr(obj, attribute)

    # ChainableUndefined: an optional field missing from an older or partial report renders empty
    env = Environment(loader=jinja2.FileSystemLoader(TEMPLATES), autoescape=True,
                      undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters.update(bytes=lambda v: "-" if v is None else probe.human_bytes(v), num=_num, json=_json, link=_link,
                       percent=probe_actions.percent, factor=probe.factor_title)
    return env


@functools.lru_cache(maxsize=None)
def _asset(name):
    with open(os.path.join(TEMPLATES, name), encoding="utf-8") as handle:
        return handle.read()


try:  # markupsafe's own C escaping (Jinja's autoescape runs it), without the Markup escape() wraps it in
    from markupsafe._speedups import _escape_inner as _escape_text
except ImportError:  # markupsafe before 3.0, or without its C extension: its entities, by str.replace
    _HTML = (("&", "&amp;"), (">", "&gt;"), ("<", "&lt;"), ("'", "&#39;"), ('"', "&#34;"))

    def _escape_text(text):
        return writers.replace_all(text, _HTML)


def escape(value):
    """A value as escaped text (Sections), as Jinja's autoescape writes it: 0.1 us for a short
    string, where five str.replace calls took 1.2 (a host section escapes some 200 values)."""
    return _escape_text(value if type(value) is str else str(value))


def _num(value, digits=3):
    if value is None:
        return "-"
    if isinstance(value, float):
        return "%.*g" % (digits, value)
    return str(value)


def _json(value):
    """A fact value as compact text (escaped by the template like any other string)."""
    return value if isinstance(value, str) else _JSON(value)


# json.dumps(value, ensure_ascii=False, sort_keys=True) without making an encoder for each call
# (it does whenever an option is given): a finding's evidence has two or three values to write.
_JSON = json.JSONEncoder(ensure_ascii=False, sort_keys=True).encode


def _link(url):
    """Only http(s) references become links (a javascript: URL in a catalog would run on click)."""
    return url if isinstance(url, str) and url.startswith(("https://", "http://")) else None


def csp(script):
    """The page's Content-Security-Policy: the one inline script runs by its hash, and scripts of
    the page's own origin ('self') may load: the details files of report-data/ (Details), which the
    inline script inserts by names it builds from numbers (never from host strings). A hash cannot
    allow them: Chromium checks an external script's hash only through Subresource Integrity,
    which file:// (no CORS) cannot pass; and fetch() of a file:// URL is blocked. No host string
    becomes markup (all are escaped, or set as text by the script), so no one else's <script>
    gets into the page to use 'self'. Nothing else loads. Styles are inline (the page's and
    matplotlib's style attributes): CSS cannot run code."""
    digest = base64.b64encode(hashlib.sha256(script.encode("utf-8")).digest()).decode("ascii")
    return ("default-src 'none'; img-src data:; style-src 'unsafe-inline'; script-src 'sha256-%s' 'self'; "
            "base-uri 'none'; form-action 'none'" % digest)


def _dspan_records(run_dir, hosts):
    """(the raw probe records of `hosts` in <run_dir>/probe by host, the run's plan): the host
    report keeps only the d-span quantiles, the CDF needs every run and the plan its levels.
    The files were checked by the report step."""
    found, plan = {}, None
    for path in sorted(glob.glob(os.path.join(run_dir or "", "probe", "*.json"))) if hosts else ():
        doc = reports.read_json(path, "probe file")
        if isinstance(doc, dict) and doc.get("host") in hosts:
            found[doc["host"]] = doc
        elif isinstance(doc, dict) and doc.get("schema") == probe.PLAN_SCHEMA:
            plan = doc
    return found, plan


def _runs_of(record):
    """A probe record's runs that have a d-span."""
    runs = (((record or {}).get("result") or {}).get("sweep") or {}).get("runs") or []
    return [r for r in runs if isinstance(r, dict)
            and isinstance(r.get("dspan"), (int, float)) and not isinstance(r["dspan"], bool)]


def _dspans_of(record):
    """A probe record's run d-spans."""
    return [r["dspan"] for r in _runs_of(record)]


def _own_dspans(record, plan, own):
    """The d-spans of the record's runs whose plan treatment has the host's own level of every
    factor in `own` ({factor: level label}, probe_actions.own_levels); None when no own level is
    known (or there is no plan): nothing to mark."""
    if not own or not plan:
        return None
    treatments = dict((t["id"], t) for t in plan["treatments"])

    def matches(treatment):
        return all(factor in treatment and probe.level_label(factor, treatment[factor]) == level
                   for factor, level in own.items())

    # type(...) is int: a run's id is unchecked data (a list would not hash; True is no id)
    return [r["dspan"] for r in _runs_of(record)
            if type(r.get("id")) is int and r["id"] in treatments and matches(treatments[r["id"]])]


def _level_names(sweep):
    try:
        return probe.level_names(sweep.get("level_set") or "short")
    except probe.ProbeError:  # a level set this version does not know: the tail map's labels
        return {}


def _probe_view(section, dspans, index, own=None, own_dspans=None):
    """The probe block of one host: its numbers and, when drawn, its three plots. own: the
    host's own levels (probe_actions.own_levels), marked in the tail plot; own_dspans: the
    d-spans of the runs with those levels (_own_dspans), marked on the CDF."""
    from ext4audit.probe import plots

    sweep = section.get("sweep")
    view = {"plots": [], "zero_dspans": 0}
    if not sweep or not sweep.get("runs_completed"):
        return view
    if dspans:
        view["zero_dspans"] = sum(1 for v in dspans if v <= 0)
        cdf = plots.dspan_cdf(dspans, sweep["dspan"], "cdf-%d" % index, own_dspans)
        if cdf:
            view["plots"].append(("d-span CDF (Chopper Figure 3)", Markup(cdf)))
    bars = plots.prioritization(sweep.get("prioritization"), "prio-%d" % index)
    if bars:
        view["plots"].append(("Factor prioritization (Chopper Figure 4)", Markup(bars)))
    tails = plots.tail_share(sweep.get("mapping"), sweep.get("prioritization") or [], sweep["runs_completed"],
                             "tail-%d" % index, _level_names(sweep), own)
    if tails:
        view["plots"].append(("Tail share per factor level (Chopper Figure 5)", Markup(tails)))
    return view


def _kernel_gate(run_dir):
    """(kernel_gate.json, its plot, an error) for the run folder; all None without a gate."""
    path = os.path.join(run_dir or "", "kernel_gate.json")
    if not run_dir or not os.path.exists(path):
        return None, None, None
    try:
        gate = reports.read_json(path, "kernel gate report")
        contract.check(gate, contract.KernelGate, "kernel gate report %s" % path)
        from ext4audit.probe import plots

        return gate, plots.kernel_gate(gate, "kernel-gate"), None
    except (reports.ReportError, KeyError, TypeError, ValueError) as exc:
        # The gate is a separate step with its own exit code: the page says it could not be read.
        return None, None, str(exc)


def _confirmation(c, shown):
    """What the probe measured for a finding (Sections.article)."""
    if c.get("status") == "not_measured":
        return "not measured (<code>%s</code>): %s" % (shown(c, "probe"), shown(c, "reason"))
    text = "%s: <code>%s</code>" % (escape(str(c.get("status", "")).replace("_", " ")), shown(c, "probe"))
    if c.get("metric"):
        text += " (%s)" % shown(c, "metric")
    text += " ratio %s %s %s" % (escape(_num(c["ratio"])) if "ratio" in c else "",
                                 "&gt;=" if c.get("status") == "confirmed" else "&lt;", shown(c, "threshold"))
    if c.get("spread"):
        text += " (spread %s to %s)" % (escape(_num(c["spread"][0])), escape(_num(c["spread"][1])))
    return text


def _data_json(value) -> str:
    """JSON for a data block in the page (<script type="application/json">): "<", ">" and "&" as
    \\u escapes, so no host string can end the block ("</script>") or open a comment."""
    return writers.replace_all(_ENCODE(value).decode("utf-8"), (("<", "\\u003c"), (">", "\\u003e"), ("&", "\\u0026")))


def fleet_data(digests: list) -> str:
    """The fleet table's data (JSON, a row per host from its reports.digest): the page's script
    sorts, filters and pages it, and shows a page of rows at a time (100,000 rows in the DOM are
    a page no browser opens). A row: [host, status (index into statuses), worst (severity rank,
    -1 none), unwaived counts critical..info, waived, errors, probe status, fails the policy (0/1),
    details chunk (index into chunks, -1 none), has a section in the page (0/1)]. Statuses are
    sorted, so their indexes sort as their names do."""
    statuses = sorted(set(d["status"] for d in digests))
    status_index = dict((status, number) for number, status in enumerate(statuses))
    chunks = sorted(set(d["chunk"] for d in digests if d.get("chunk") is not None))
    chunk_index = dict((first, number) for number, first in enumerate(chunks))
    severities = list(reversed(SEVERITIES))
    rows = []
    for d in digests:
        worst, counts, row = d["row"]["worst"], d["by_severity"], d["row"]
        rows.append([d["host"], status_index[d["status"]], severity_rank(worst) if worst else -1]
                    + [counts[s] for s in severities]
                    + [row["waived"], row["errors"], row["probe"] or "", 1 if d["bad"] else 0,
                       chunk_index.get(d.get("chunk"), -1), 1 if d.get("section") else 0])
    return _data_json({"statuses": statuses, "chunks": chunks, "rows": rows, "data": DATA})


def worst_hosts(digests: list, count: int = 25) -> list:
    """The `count` hosts most in need of attention (reports.attention_order: not audited first,
    then by worst severity and failing findings), of those with anything to act on."""
    acting = [d for d in digests if d["status"] != "audited" or d["row"]["worst"]]
    return sorted(acting, key=lambda d: reports.attention_order(d["row"]))[:count]


def has_section(digest, hosts):
    """Whether a host gets its own section in a run of `hosts` hosts: in small runs every host
    (findings in full, facts, the probe and its pictures). In larger ones no host does: each
    host's detail is loaded on demand from the page's data folder (Details)."""
    return hosts <= ALL_SECTIONS


class Details:
    """The hosts' details that the page loads on demand, in chunks of CHUNK_HOSTS hosts in the run
    folder's report-data/ (DATA): hosts-<index of the chunk's first host>.js, a script that hands
    its data to the page's (window.ext4auditHosts: file:// pages cannot fetch() files, but may
    load a script). A host: its status, policy, findings, undetermined rules, read errors, kernel and
    filesystems (what is missing for an undetermined rule, the facts and the probe's numbers are
    in its hosts/<host>.json, which the detail links), every string an index into the chunk's string table (a fleet's hosts share
    messages, options and kernels). add() notes the chunk in the host's digest (digest["chunk"]).
    folder None: nothing is written (render(): the page alone)."""

    def __init__(self, folder: "str | None") -> None:
        self.folder = folder
        self._start()

    def _start(self) -> None:
        self.first, self.index, self.hosts = None, _Strings(), []

    def add(self, report: dict, digest: dict) -> None:
        if self.folder is None:
            return
        if self.first is not None and digest["index"] // CHUNK_HOSTS != self.first // CHUNK_HOSTS:
            self.flush()  # chunks by the hosts' indexes: the same files with one process or several
        if self.first is None:
            self.first = digest["index"]
        digest["chunk"] = self.first
        self.hosts.append(self._host(report, digest))

    def _host(self, report: dict, digest: dict) -> dict:
        s = self.index  # s[text]: its index in the chunk's strings (a dict lookup; 200 a host)
        host = {"n": report["host"], "s": s[report.get("status")], "b": 1 if digest["bad"] else 0,
                "j": s[host_link(report["host"])]}
        if report.get("reason"):
            host["r"] = s[str(report["reason"])]
        if report.get("groups"):
            host["g"] = [s[str(g)] for g in report["groups"]]
        policy = policy_mod.describe(report)
        if policy:
            host["y"] = [s[line] for line in policy]
        findings = sorted(report.get("findings") or (), key=_finding_order)
        if findings:
            host["f"] = [[s[f.get("severity")], s[f.get("rule")], s[f.get("title")], s[f.get("message")],
                          s[f.get("mountpoint")], s[f.get("device")],
                          (1 if f.get("waived") else 0) | (2 if f.get("baseline") == "new" else 0)
                          | (4 if (f.get("waiver") or {}).get("status") == "expired" else 0),
                          s[(f.get("confirmation") or {}).get("status")]] for f in findings]
        if report.get("undetermined"):
            host["u"] = [[s[u.get("rule")], s[u.get("mountpoint")], s[u.get("device")]] for u in report["undetermined"]]
        if report.get("errors"):
            host["e"] = [[s[e.get("where")], s[e.get("reason")]] for e in report["errors"]]
        kernel = report.get("kernel")
        if isinstance(kernel, dict):
            host["k"] = s["%s (upstream %s)" % (kernel.get("release"), kernel.get("upstream") or "unknown")]
        if report.get("filesystems"):
            host["m"] = [[s[fs.get("mountpoint")], s[fs.get("device")], s[fs.get("fstype")],
                          s[", ".join(map(str, fs.get("options") or ()))]] for fs in report["filesystems"]]
        if report.get("probe"):
            host["p"] = s[report["probe"].get("status")]
        return host

    def flush(self) -> None:
        """Write the chunk made so far (a worker calls it at the end of its shard)."""
        if self.hosts and self.folder:
            strings = list(self.index)[1:]  # in the order of their indexes (None, -1, first)
            text = b"ext4auditHosts(%d, %s);\n" % (self.first, _ENCODE({"s": strings, "h": self.hosts}))
            # No temporary name: the folder is new (a staging folder) and moves into place whole.
            with open(os.path.join(self.folder, chunk_name(self.first)), "xb") as out:
                out.write(text)
        self._start()


class _Strings(dict):
    """A details chunk's string table: strings[text] is its index, given at its first use (a
    string's index is its place in the dict's order, less one: None, missing, is -1)."""

    def __init__(self) -> None:
        super().__init__({None: -1})

    def __missing__(self, text) -> int:
        number = self[text] = len(self) - 1
        return number


def _finding_order(f: dict) -> tuple:
    """Findings in a host's detail: the worst first, then by rule and mount point."""
    return -severity_rank(f["severity"]), f["rule"], f.get("mountpoint") or ""


def chunk_name(first: int) -> str:
    """The file of the details chunk whose first host has index `first` (report.js builds the same)."""
    return "hosts-%06d.js" % first


def host_link(host: str) -> str:
    """The relative link of a host's report in hosts/ (its file name, URL-quoted)."""
    return "hosts/" + urllib.parse.quote(reports.host_report_file(host))


def put_data_in_place(run_dir: str, staged: str) -> None:
    """Move a staged details folder to <run_dir>/report-data, replacing an earlier run's (moved
    aside into the staging folder's parent's place and removed): report.html, written after,
    loads from it."""
    target = os.path.join(run_dir, DATA)
    before = staged + ".before"
    if os.path.lexists(target):
        os.replace(target, before)
    os.replace(staged, target)
    shutil.rmtree(before, ignore_errors=True)


class Sections:
    """Renders host sections; the same for every host of a run (workers of the report step each
    make one). probe_records: the run's raw probe records by host (the d-span CDF needs every
    run); plan: the run's probe plan (the levels of each run); plotted: the hosts whose probe
    gets pictures."""

    def __init__(self, policy, hosts, catalog, plotted=(), probe_records=None, plan=None):
        self.probe_template = _environment().get_template("host_probe.html.j2")
        self.policy, self.detailed = policy, hosts <= DETAILED_HOSTS
        self.rationales = dict((rule["id"], rule.get("rationale")) for rule in catalog.rules) if catalog else {}
        self.plotted, self.probe_records, self.plan = set(plotted), probe_records or {}, plan

    def article(self, f):
        """A finding's <article> (HTML text). Written out here rather than in a template: Jinja
        took 90 us per finding, this 15 (a host section has ~25 findings; 10,000 hosts). Like the
        template, every value is escaped, and a field the finding lacks shows as nothing."""
        shown = _shown
        waiver, rule, severity = f.get("waiver"), shown(f, "rule"), shown(f, "severity")
        out = ['<article class="finding sev-border-%s%s">\n<h4><span class="sev sev-%s">%s</span> <code>%s</code> %s\n'
               % (severity, " waived" if f.get("waived") else "", severity, severity, rule, shown(f, "title"))]
        if f.get("waived"):
            out.append('<span class="mark waived-mark">waived</span>')
        if waiver and waiver.get("status") == "expired":
            out.append('<span class="mark expired-mark">waiver expired %s</span>' % shown(waiver, "expires"))
        if f.get("baseline") == "new":
            out.append('<span class="mark new-mark">new since the baseline</span>')
        out.append('</h4>\n<p class="where">')
        if f.get("mountpoint"):
            out.append('on <code class="host-data">%s</code>' % shown(f, "mountpoint"))
        if f.get("device"):
            out.append(' (<code class="host-data">%s</code>)' % shown(f, "device"))
        out.append('</p>\n<p class="message host-data">%s</p>\n' % shown(f, "message"))
        if f.get("severity_override"):
            override = f["severity_override"]
            out.append("<p>Severity set by this site (%s in the catalog): %s</p>" % (shown(override, "from"),
                                                                                      shown(override, "reason")))
        if f.get("escalated_because"):
            out.append("<p>Raised from %s: %s</p>" % (shown(f, "base_severity"), shown(f, "escalated_because")))
        if f.get("confirmation"):
            out.append('<p class="confirmation">Probe: %s</p>\n' % _confirmation(f["confirmation"], shown))
        if waiver:
            out.append('<p class="waiver">Waiver (%s): %s; approved by %s; %s %s.</p>' % (
                shown(waiver, "status"), shown(waiver, "justification"), shown(waiver, "approver"),
                "expires" if waiver.get("status") == "active" else "expired", shown(waiver, "expires")))
        out.append('<dl>\n<dt>Evidence</dt>\n<dd><ul class="evidence">')
        out.extend('<li><code>%s = <span class="host-data">%s</span></code></li>' % (escape(path), escape(_json(value)))
                   for path, value in sorted((f.get("evidence") or {}).items(), key=lambda item: item[0].lower()))
        out.append("</ul></dd>\n")
        if self.detailed:
            remediation = f.get("remediation")
            out.append("<dt>Remediation</dt>\n<dd>%s" % shown(remediation, "steps"))
            if isinstance(remediation, dict) and remediation.get("cost"):
                out.append(' <span class="cost">Cost: %s</span>' % shown(remediation, "cost"))
            out.append('</dd>\n<dt>Why</dt>\n<dd>%s <a href="#rule-%s">(the rule)</a></dd>\n'
                       % (escape(self.rationales.get(f.get("rule")) or ""), rule))
            if f.get("references"):
                links = ['<a href="%s" rel="noreferrer">%s</a>' % (escape(_link(url)), escape(url)) if _link(url)
                         else escape(url) for url in f["references"]]
                out.append("<dt>References</dt>\n<dd>%s</dd>\n" % " · ".join(links))
        else:
            out.append('<dt>Fix</dt>\n<dd><a href="#rule-%s">why and how to fix</a></dd>\n' % rule)
        out.append("</dl>\n</article>\n")
        return "".join(out)

    def render(self, report, digest):
        """A host's <details> section. Written out here rather than in a template, as article is
        (Jinja took 2 ms a host at 10,000 hosts); only the probe block, which few hosts have, is
        one (host_probe.html.j2). Every host value is escaped; a field missing from an older or
        partial report shows as nothing, a null one as None, as the template wrote them."""
        findings = sorted(report["findings"], key=lambda f: (-severity_rank(f["severity"]), f["rule"],
                                                             f.get("mountpoint") or ""))
        worst, shown = digest["row"]["worst"], _shown
        out = ['<details class="host" id="h-%s"%s>\n<summary><span class="host-data hostname">%s</span> '
               '<span class="sev sev-%s">%s</span> <span class="status">%s</span>\n%s</summary>\n' % (
                   escape(digest["index"]), " open" if self.detailed else "", shown(report, "host"),
                   escape(worst or "none"), escape(worst or "none"), shown(report, "status"),
                   '<span class="mark fail-mark">fails the policy</span>' if digest["bad"] else "")]
        if report.get("status") != "audited":
            out.append('<p class="alert">Not audited (%s): %s</p>' % (shown(report, "status"),
                                                                       escape(report.get("reason") or "no reason given")))
        if report.get("groups"):
            out.append("<p>Groups: %s</p>" % ", ".join('<span class="host-data">%s</span>' % escape(g)
                                                       for g in report["groups"]))
        policy = policy_mod.describe(report)
        if policy:
            out.append('<h3>Policy</h3>\n<ul class="policy">%s</ul>' % "".join("<li>%s</li>" % escape(line)
                                                                                for line in policy))
        out.append("\n<h3>Findings (%d)</h3>\n%s" % (len(findings), "" if findings else "<p>None.</p>"))
        out.extend(self.article(f) for f in findings)
        out.append("\n")
        if report.get("undetermined"):
            out.append("<h3>Undetermined (%d)</h3>\n<ul>%s</ul>\n" % (len(report["undetermined"]), "".join(
                "<li><code>%s</code>%s: missing %s</li>" % (shown(u, "rule"), _where(u), escape(", ".join(
                    map(str, u.get("missing") or ())))) for u in report["undetermined"])))
        if report.get("errors"):
            out.append("<h3>Could not read (%d)</h3>\n<ul>%s</ul>\n" % (len(report["errors"]), "".join(
                '<li class="host-data">%s: %s</li>' % (shown(e, "where"), shown(e, "reason")) for e in report["errors"])))
        out.append("\n")
        if report.get("kernel"):
            out.append(_kernel(report["kernel"]))
        if report.get("filesystems"):
            out.append('<h3>Filesystems (%d)</h3>\n<div class="wide"><table class="facts">\n<thead><tr><th>mount point'
                       '</th><th>device</th><th>options in effect</th><th>superblock</th><th>device queue</th><th>fstab'
                       '</th></tr></thead>\n<tbody>\n' % len(report["filesystems"]))
            out.extend(_filesystem_row(fs) for fs in report["filesystems"])
            out.append("</tbody>\n</table></div>\n")
        if report.get("netfs"):
            out.append("<h3>Network filesystems (%d)</h3>\n<ul>%s</ul>\n" % (len(report["netfs"]), "".join(
                '<li><code class="host-data">%s</code>: %s from <code class="host-data">%s</code></li>'
                % (shown(n, "mountpoint"), shown(n, "fstype"), shown(n, "source")) for n in report["netfs"])))
        if report.get("not_audited"):
            out.append("<h3>Not audited (%d)</h3>\n<ul>%s</ul>\n" % (len(report["not_audited"]), "".join(
                '<li>not audited: %s at <code class="host-data">%s</code> from <code class="host-data">%s</code></li>'
                % (shown(n, "fstype"), shown(n, "mountpoint"), shown(n, "source")) for n in report["not_audited"])))
        out.append("\n")
        section = report.get("probe")
        if section:
            out.append(self._probe(report, digest, section))
        out.append("</details>")
        return "".join(out)

    def _probe(self, report, digest, section):
        """The probe block (host_probe.html.j2)."""
        view = None
        if report["host"] in self.plotted:
            record, own = self.probe_records.get(report["host"]), probe_actions.own_levels(report)
            view = _probe_view(section, _dspans_of(record), digest["index"], own, _own_dspans(record, self.plan, own))
        # per confirmation: the options of its risky side the host does not use ([]: its own configuration)
        not_used = [probe_actions.not_in_effect(report, c) for c in section["confirmations"]]
        return self.probe_template.render(h={"probe": section, "probe_view": view, "not_used": not_used,
                                             "actions": probe_actions.sentences(report)})


def _shown(mapping, key):
    """{{ mapping.key }} as the host template wrote it (jinja2.ChainableUndefined: "" when missing)."""
    return escape(mapping[key]) if isinstance(mapping, dict) and key in mapping else ""


def _where(item):
    """The where() macro of macros.html.j2: on <mount point> (<device>)."""
    text = ' on <code class="host-data">%s</code>' % escape(item["mountpoint"]) if item.get("mountpoint") else ""
    return text + (' (<code class="host-data">%s</code>)' % escape(item["device"]) if item.get("device") else "")


def _bytes(value):
    return "-" if value is None else probe.human_bytes(value)


def _kernel(k):
    """A host section's kernel paragraph and notes."""
    os_release = k.get("os_release")
    pretty = os_release.get("PRETTY_NAME") if isinstance(os_release, dict) else None
    return ('<h3>Kernel</h3>\n<p><code class="host-data">%s</code>: upstream %s, vendor %s%s%s%s%s.</p>\n%s' % (
        _shown(k, "release"), escape(k.get("upstream") or "unknown"), escape(k.get("vendor") or "unknown"),
        " " + escape(k["vendor_version"]) if k.get("vendor_version") else "",
        " (backports fixes)" if k.get("backports") else "",
        ", %s-byte pages" % escape(k["page_size"]) if k.get("page_size") else "",
        "; " + escape(pretty) if pretty else "",
        "".join('<p class="note">%s</p>' % escape(note) for note in k.get("notes") or ())))


def _filesystem_row(fs):
    """A filesystem's row of a host section's facts table."""
    sb, q, shown = fs.get("superblock"), fs.get("queue"), _shown
    options = escape(", ".join(map(str, fs.get("options") or ())))
    if fs.get("options_source") and fs["options_source"] != "proc":
        options += " (%s)" % escape(fs["options_source"])
    if sb:
        size = ""
        if sb.get("block_count") and sb.get("block_size"):
            size = ", size %s" % escape(_bytes(sb["block_count"] * sb["block_size"]))
        superblock = 'block %s, inode %s B, journal %s%s<br><span class="features">%s</span>' % (
            escape(_bytes(sb.get("block_size"))), escape(sb.get("inode_size") or "?"),
            escape(_bytes(sb.get("journal_bytes"))), size, escape(" ".join(map(str, sb.get("features") or ()))))
    else:
        superblock = "not read"
    if q:
        queue = "%s, write cache %s%s" % ("rotational" if q.get("rotational") else "non-rotational",
                                          escape(q.get("write_cache") or "?"), ", discard" if q.get("discard_max_bytes")
                                          else "")
    else:
        queue = "-"
    if fs.get("fstab_drift"):
        fstab = "drift: " + ", ".join('<code class="host-data">%s</code> (in effect: %s)' % (
            shown(d, "option"), escape(_json(d.get("effective")))) for d in fs["fstab_drift"])
    else:
        fstab = "matches" if fs.get("fstab") else "no entry"
    return ('<tr>\n<td><code class="host-data">%s</code></td>\n<td><code class="host-data">%s</code> %s</td>\n'
            '<td class="options host-data">%s</td>\n<td>%s</td>\n<td>%s</td>\n<td>%s</td>\n</tr>\n' % (
                shown(fs, "mountpoint"), shown(fs, "device"), shown(fs, "fstype"), options, superblock, queue, fstab))


def plotted_hosts(hosts, completed):
    """The hosts whose probe gets pictures: of the hosts whose sweep completed runs (completed(host)
    is asked in name order, until enough are found), the first MAX_PLOTTED_HOSTS by name. The
    report step knows them before it has read any host."""
    return list(itertools.islice(filter(completed, sorted(hosts)), MAX_PLOTTED_HOSTS))


def _glossary(rule_ids, catalog, found=None):
    """One entry per rule found in the run, worst base severity first: its rationale, remediation
    and references from the catalog (or, for a rule the catalog lacks, from a finding: found)."""
    rules = catalog.by_id if catalog is not None else {}
    entries = []
    for rule_id in rule_ids:
        rule = rules.get(rule_id) or {}
        finding = (found or {}).get(rule_id) or {}
        entries.append({"id": rule_id, "title": rule.get("title") or finding.get("title"),
                        "severity": rule.get("severity") or finding.get("base_severity") or finding.get("severity"),
                        "rationale": rule.get("rationale"), "seed": rule.get("seed") or finding.get("seed"),
                        "remediation": rule.get("remediation") or finding.get("remediation") or {},
                        "references": rule.get("references") or finding.get("references") or []})
    return sorted(entries, key=lambda e: (-severity_rank(e["severity"]), e["id"]))


def _group_rows(groups: "finding_groups.FindingGroups", history: "dict | None" = None) -> list:
    """The findings groups the page shows (GROUP_ROWS at most, the worst first), as dicts; with the
    store's history (history.rule_nights of the nights before this run), each with its "since"
    and "trend" ([(generated_at, count)], oldest first) as summary.md shows them."""
    rows = []
    past = store_history.group_history(history, groups) if history is not None else None
    for key, (findings, hosts, samples) in groups.ordered()[:GROUP_ROWS]:
        rows.append({"rule": key[0], "severity": key[1], "message": key[3], "waived": finding_groups.is_waived(key),
                     "expired": key[6] is not None, "new": key[7] == "new", "findings": findings, "hosts": hosts,
                     "samples": samples})
        if past is not None:
            rows[-1].update(since=store_history.since_label(past[key]), trend=past[key]["trend"])
    return rows


def write_page(out, summary, digests, sections, groups, catalog=None, run_dir=None, found=None, history=None):
    """Write the page to `out`: digests are every host's reports.digest in run order (with its
    index, whether it has a section and its details chunk); sections: the host sections' HTML, in
    order (small runs only, has_section); groups: the run's FindingGroups; history: the store's
    nights before this run (history.rule_nights) for each group's open since and trend, or None."""
    rule_ids = sorted(set(rule for d in digests for (_, rule, _), _ in d["metrics"]))
    glossary = _glossary(rule_ids, catalog, found)
    gate, gate_plot, gate_error = _kernel_gate(run_dir)
    script = _asset("report.js")
    probed = sum(1 for d in digests if d["probe_plotted"])
    template = _environment().get_template("report.html.j2")
    worst = worst_hosts(digests, WORST_HOSTS)
    template.stream(
        summary=summary, fleet_data=Markup(fleet_data(digests)), statuses=sorted(set(d["status"] for d in digests)),
        kernel_group_rows=reports.KERNEL_GROUP_ROWS,
        own_policy=sum(1 for d in digests if d["row"]["fail_on"] != summary["policy"]["fail_on"]),
        sections=sections, groups=_group_rows(groups, history), group_count=len(groups.groups), group_rows=GROUP_ROWS,
        history_note=store_history.group_history_note(history) if history is not None else None,
        worst=[dict(d["row"], index=d["index"], bad=bool(d["bad"]), link=host_link(d["host"])) for d in worst],
        worst_rows=WORST_HOSTS,
        with_sections=any(d.get("section") for d in digests), glossary=glossary,
        severities=SEVERITIES, severities_desc=list(reversed(SEVERITIES)), baseline=summary.get("baseline"),
        probed=probed, plotted=min(probed, MAX_PLOTTED_HOSTS), max_plotted=MAX_PLOTTED_HOSTS,
        gate=gate, gate_plot=Markup(gate_plot) if gate_plot else None, gate_error=gate_error,
        csp=csp(script), script=Markup(script), css=Markup(_asset("report.css"))).dump(out)


def _write_held(out, summary, host_reports, catalog, run_dir, details, history=None):
    """write_page for host reports held in memory (render, write); details: a Details."""
    policy = summary["policy"]
    compared = summary.get("baseline") is not None
    digests, groups = [], finding_groups.FindingGroups(compared)
    for index, report in enumerate(host_reports):
        d = reports.digest(report, policy["fail_on"], policy.get("fail_on_new"), compared)
        d.update(index=index, section=has_section(d, len(host_reports)))
        details.add(report, d)
        groups.add_host(report)
        digests.append(d)
    details.flush()
    probed = dict((d["host"], d["probe_plotted"]) for d in digests)
    plotted = plotted_hosts(probed, probed.get)
    renderer = Sections(policy, len(host_reports), catalog, plotted, *_dspan_records(run_dir, set(plotted)))
    sections = (Markup(renderer.render(r, d)) for r, d in zip(host_reports, digests) if d["section"])
    found = {}
    for report in host_reports:
        for finding in report["findings"]:
            found.setdefault(finding["rule"], finding)
    write_page(out, summary, digests, sections, groups, catalog, run_dir, found, history)


def render(summary, host_reports, catalog=None, run_dir=None, history=None):
    """The page as a string, without its details folder (its hosts' details do not load; the
    report step and write() make both). catalog: the loaded rule catalog (rationale and
    references per rule; a rule missing from it shows what its findings carry). run_dir: where
    the raw probe records (for the d-span CDFs) and kernel_gate.json are, when there are any.
    history: the store's nights before this run (history.rule_nights), for the groups' open since."""
    out = io.StringIO()
    _write_held(out, summary, host_reports, catalog, run_dir, Details(None), history)
    return out.getvalue()


def write(path, summary, host_reports, catalog=None, run_dir=None):
    """Write the page to `path` and its details to report-data/ beside it, each atomically: the
    details are made in a staging folder that replaces the old one, then the page (the report
    step itself goes through Writer, whose details are written in the step's workers)."""
    folder = os.path.dirname(os.path.abspath(path))
    staged = tempfile.mkdtemp(prefix=".report-data-", dir=folder)
    try:
        with reports.atomic_file(path) as out:
            _write_held(out, summary, host_reports, catalog, run_dir, Details(staged))
            put_data_in_place(folder, staged)
    finally:
        shutil.rmtree(staged, ignore_errors=True)


class Writer(writers.GroupsWriter):
    """The report step's page: each host's details go to a chunk of report-data/ in the workers
    (Details, in the staging folder), a shard's part is its findings groups (writers.GroupsWriter);
    the parent merges the groups, moves the details into place and writes the page, with the host
    sections of a small run (has_section) rendered from hosts/ (in place by then)."""

    file = "report.html"
    folder = DATA  # written with the page; removed when a run's formats leave the page out

    def __init__(self, job):
        super().__init__(job)
        self.groups = finding_groups.FindingGroups(job.base is not None)
        self.staged = os.path.join(job.staging, DATA) if job.staging else None
        if self.staged and not os.path.isdir(self.staged):
            os.mkdir(self.staged)  # before the workers fork: each writes its chunks into it
        self.details = Details(self.staged)

    def host(self, report, digest):
        # Kept in the digest: the page's table says which hosts have a section (row)
        digest["section"] = has_section(digest, self.job.hosts)
        self.details.add(report, digest)
        return super().host(report, digest)

    def shard_end(self):
        self.details.flush()
        return super().shard_end()

    def finish(self, out, summary, digests, parts):
        merged = finding_groups.FindingGroups(self.job.base is not None)
        merged.merge_parts(parts)
        if self.staged:
            put_data_in_place(self.job.run_dir, self.staged)
        sections = ()
        if any(d.get("section") for d in digests):
            job = self.job
            renderer = Sections({"fail_on": job.fail_on, "fail_on_new": job.fail_on_new}, job.hosts, job.catalog,
                                job.plotted, job.probes, job.plan)
            reader = host_report.Reader(job.run_dir)
            sections = (Markup(renderer.render(reader.read(reports.host_report_path(job.run_dir, d["host"])), d))
                        for d in digests if d.get("section"))
        write_page(out, summary, digests, sections, merged, self.job.catalog, self.job.run_dir,
                   history=self.job.history)
