"""Hostile mount point names, end to end: real loop-mounted ext4 filesystems at paths with spaces,
tabs, newlines, carriage returns, U+2028, backslashes, markup, quotes, $(...), backticks, Jinja
syntax and bytes that are not UTF-8, audited by the real playbook (facts, probe, report step).

Every name is audited (its findings, its fstab drift), kept exactly in the JSON (bytes that are not
UTF-8 as \\xNN; the JSON stays valid UTF-8), escaped in Markdown, JUnit, HTML and SARIF (the
Prometheus file still parses), and never reaches a shell or a template: the command substitutions, backticks and
pipe lookups in the names would send this test process a signal, which it records.
"""

import glob
import html.parser
import json
import os
import re
import signal
import xml.etree.ElementTree as ET

import pytest
from prometheus_client.parser import text_string_to_metric_families

from conftest import ansible_playbook, load_json, needs_root, run
from ext4audit.formats import junit as junit_mod, markdown as markdown_mod

pytestmark = needs_root

# A name that reached a shell or a template would run its `kill`: each name has its own real-time
# signal, so the failure names the culprit. No '/' in it: it fits in one path component.
SIGNALS = dict((key, signal.SIGRTMIN + number) for number, key in enumerate(
    ("shell", "jinja", "combo")))


def canary(key):
    return "kill -%d %d" % (SIGNALS[key], os.getpid())


# Each name is one directory under the test's folder, as bytes; '/' splits a name across two levels.
NAMES = {
    "spaces": b"two  spaces\tand tab",
    "newline": b"new\nline",
    "cr-ls": b"cr\rform\x0cfeed ls\xe2\x80\xa8sep",  # str.splitlines() cut mountinfo here
    "markup": b"<script>alert(1)</script><img src=x onerror=alert(2)>",
    "quotes": b"q'uo\"te & amp;",
    "shell": ("$(%s) `%s` ;%s|%s" % ((canary("shell"),) * 4)).encode(),
    "jinja": ("{{ lookup('pipe', '%s') }} {%% if true %%}x{%% endif %%}" % canary("jinja")).encode(),
    "not-utf8": b"bad\xff\xfe name \xe2\x82 \x80 end",
    "backslash": b"back\\slash \\040 \\x41",
    # everything at once; the probe replicates this one
    "combo": ("all <b>'\"$(%s)`%s`\n{{ lookup('pipe', '%s') }}\\" % ((canary("combo"),) * 3)).encode() + b"\xff",
}
IN_FSTAB = ("combo", "cr-ls", "not-utf8")  # fstab asks for errors=remount-ro: drift on each


def shown(raw):
    """The documented text form of a name: UTF-8, bytes that are not UTF-8 as \\xNN."""
    return raw.decode("utf-8", "backslashreplace")


def fstab_escape(raw):
    return b"".join(b"\\%03o" % c if c in b" \t\n\\" else bytes([c]) for c in raw)


@pytest.fixture
def signals():
    """The names whose command ran (see SIGNALS)."""
    received = []
    names = dict((number, key) for key, number in SIGNALS.items())
    previous = dict((number, signal.signal(number, lambda signum, frame: received.append(names[signum])))
                    for number in names)
    try:
        yield received
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)


class ScriptTags(html.parser.HTMLParser):
    """The attributes and text of every <script> element and on* attribute of a page."""

    def __init__(self):
        html.parser.HTMLParser.__init__(self)
        self.found, self.inside = [], False

    def handle_starttag(self, tag, attrs):
        self.found += ["%s=%s" % (k, v) for k, v in attrs if k.startswith("on")]
        if tag == "script":
            self.inside = True
            self.found.append(repr(attrs))

    def handle_endtag(self, tag):
        self.inside = self.inside and tag != "script"

    def handle_data(self, data):
        if self.inside:
            self.found.append(data)


def mount_snapshot():
    with open("/proc/self/mountinfo", "rb") as handle:
        return sorted(b" ".join(line.split(b" ")[2:]) for line in handle)


def test_hostile_names_are_audited_escaped_and_never_run(loopfs, tmp_path, signals):
    made = {}
    for key, raw in NAMES.items():
        target = os.fsencode(loopfs.base) + b"/mnt/" + key.encode() + b"/" + raw
        made[key] = loopfs.make(key, size="64M", mountpoint=os.fsdecode(target))
        made[key]["shown"] = shown(target)
    fstab = tmp_path / "fstab"
    fstab.write_bytes(b"# hostile names, octal-escaped as fstab wants\n" + b"".join(
        b"%s %s ext4 defaults,errors=remount-ro 0 2\n" % (made[k]["device"].encode(),
                                                          fstab_escape(os.fsencode(made[k]["mountpoint"])))
        for k in IN_FSTAB))
    # Ansible renders templates in values given with -e (the operator's own input): a name taken
    # from a host goes in marked !unsafe, as Ansible documents for untrusted strings.
    extra = tmp_path / "vars.yml"
    extra.write_text("chopper_probe_mountpoint: !unsafe %s\nchopper_probe_confirmations: []\n"
                     % json.dumps(made["combo"]["shown"]))
    before = mount_snapshot()
    reports_dir = tmp_path / "reports"
    rc, out = ansible_playbook(
        "playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports_dir,
        "-e", "ext4_audit_fstab_path=%s" % fstab, "-e", "ext4_audit_fail_on=critical",
        "-e", "chopper_probe_scratch_dir=/dev/shm/ext4-audit-probe-hostile-%d" % os.getpid(),
        "-e", "chopper_probe_poll_s=1", "-e", "chopper_probe_runs=16", "-e", "chopper_probe_keep_cache=false",
        "-e", "@%s" % extra)
    assert rc == 0, out[-8000:]
    assert signals == [], "a name's command ran (it sent its signal): %s" % signals
    assert mount_snapshot() == before, "the audit changed the mounts"
    run_dir = os.path.realpath(str(reports_dir / "latest"))

    # JSON: valid UTF-8 (no lone surrogates), every name kept in its text form, audited
    for path in glob.glob(os.path.join(run_dir, "facts", "*.json")) + glob.glob(os.path.join(run_dir, "*.json")):
        with open(path, "rb") as handle:
            json.loads(handle.read().decode("utf-8"))  # strict: raises on invalid UTF-8
    report = load_json(os.path.join(run_dir, "hosts", "localhost.json"))
    json.dumps(report, ensure_ascii=False).encode("utf-8")  # raises on a lone surrogate
    filesystems = dict((fs["mountpoint"], fs) for fs in report["filesystems"])
    found = {}
    for finding in report["findings"]:
        found.setdefault(finding["mountpoint"], set()).add(finding["rule"])
    for key, fs in made.items():
        assert fs["shown"] in filesystems, "%s not audited; filesystems: %s" % (key, sorted(filesystems))
        audited = filesystems[fs["shown"]]
        assert audited["device"] == fs["device"] and audited["superblock"]["block_size"] > 0, key
        assert "EXT4_ERRORS_CONTINUE" in found.get(fs["shown"], set()), (key, found.get(fs["shown"]))
        if key in IN_FSTAB:  # the fstab entry (octal escapes, bytes not UTF-8) matched the mount
            assert audited["fstab_drift"] == [{"option": "errors=remount-ro", "wanted": "remount-ro",
                                               "effective": "continue"}], (key, audited["fstab"])
            assert "EXT4_FSTAB_DRIFT" in found[fs["shown"]], key
    assert not [e for e in report["errors"] if "mountinfo" in e["where"]], report["errors"]

    # the probe replicated the combo filesystem: its name went to the host as JSON data
    probe = report["probe"]
    assert probe["status"] == "ran" and probe["mountpoint"] == made["combo"]["shown"], (probe["reason"], probe)
    assert probe["sweep"]["runs_completed"] == 16

    markdown = open(os.path.join(run_dir, "summary.md"), encoding="utf-8").read()
    assert "<script>" not in markdown and "<img" not in markdown and "<b>" not in markdown
    for key, fs in made.items():  # in each finding's message (where runs of white space are one space)
        assert markdown_mod.md(" ".join(fs["shown"].split())) in markdown, key
    assert "\\$\\(kill" in markdown and "\\`kill" in markdown

    tree = ET.parse(os.path.join(run_dir, "junit.xml"))  # a case per group, its text naming host [mount]
    texts = "".join(tree.find("testsuite[@name='EXT4_ERRORS_CONTINUE']").itertext())
    for key, fs in made.items():  # (a reader ends lines in element text with \n: XML 1.0, 2.11)
        read = junit_mod.xml_text(fs["shown"]).replace("\r\n", "\n").replace("\r", "\n")
        assert " [%s]" % read in texts, key
    junit = open(os.path.join(run_dir, "junit.xml"), encoding="utf-8").read()
    assert "<script>" not in junit and "<img" not in junit

    page = open(os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    assert "<script>alert" not in page and "<img src=x" not in page and "<b>'" not in page
    assert "&lt;script&gt;alert(1)&lt;/script&gt;&lt;img src=x onerror=alert(2)&gt;" in page
    scripts = ScriptTags()
    scripts.feed(page)
    # ("alert(": the page's own script uses the class name "alert")
    assert not [text for text in scripts.found if "alert(" in text or "kill -" in text], "a name became a script"
    # the on-demand detail: report-data/'s chunk is one call of the page's function with JSON
    # data, where each name is a string, exactly (the page's script sets it as text)
    strings = []
    for chunk in glob.glob(os.path.join(run_dir, "report-data", "hosts-*.js")):
        text = open(chunk, encoding="utf-8").read()
        call = re.fullmatch(r"ext4auditHosts\(\d+, (\{.*\})\);\n", text, re.S)
        assert call, text[:200]
        strings += json.loads(call.group(1))["s"]
    for key, fs in made.items():
        assert fs["shown"] in strings, key

    sarif = load_json(os.path.join(run_dir, "report.sarif"))
    mountpoints = set(loc["logicalLocations"][0]["name"] for run_ in sarif["runs"] for r in run_["results"]
                      for loc in r["locations"])
    for key, fs in made.items():
        assert fs["shown"] in mountpoints, key

    with open(os.path.join(run_dir, "ext4audit.prom"), encoding="utf-8") as handle:
        families = list(text_string_to_metric_families(handle.read()))
    labels = set(value for family in families for sample in family.samples for value in sample.labels.values())
    assert "localhost" in labels  # it parses (its labels are hosts and rules, not mount points)
