"""Corrupt, truncated or wrong-schema inputs to `python -m ext4audit report` and `gate`: facts
records, probe files, waiver files, host reports and baselines. Each must give a clear error as
the first line on stderr (naming the file), exit 2 (could not run: never 0 pass or 1 policy
failed), no traceback, and leave the reports folder exactly as it was: every file's bytes and
where `latest` points. The cases call the CLI's main() in this process (a real process costs a
second of imports each); test_a_real_process_exits_2_with_the_error_first runs one as a process."""

import json
import os
import resource
import shutil
import subprocess
import time

import pytest

from conftest import ROOT, VENV_BIN
from ext4audit.cli import commands as cli_mod
from ext4audit.parsers import run_folder
from test_probe_controller import PLAN, audited, record, write_probe
from test_reports import cli, hostile_facts, write_run


@pytest.fixture(scope="module")
def template(tmp_path_factory):
    """reports/run-1 and reports/run-2, each reported (run-1 is the baseline); latest -> run-2."""
    base = tmp_path_factory.mktemp("template") / "reports"
    for name in ("run-1", "run-2"):
        path = str(base / name)
        write_run(path, [audited("db-1"), {"host": "web-2", "groups": ["web"], "status": "audited",
                                           "facts": hostile_facts()}])
        write_probe(path, [PLAN, record("db-1")])
        rc, out, err = cli("report", path, "--fail-on", "critical")
        assert rc == 0, (out, err)
    assert os.readlink(str(base / "latest")) == "run-2"
    return base


@pytest.fixture
def reports_dir(template, tmp_path):
    copy = tmp_path / "reports"
    shutil.copytree(str(template), str(copy), symlinks=True)
    return copy


def main(capsys, *args):
    """The CLI's main() as `python -m ext4audit` runs it: (exit code, stdout, stderr)."""
    capsys.readouterr()
    rc = cli_mod.main(list(args))
    captured = capsys.readouterr()
    return rc, captured.out, captured.err


def snapshot(base):
    files = {}
    for folder, _, names in os.walk(str(base)):
        for name in names:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                files[os.path.relpath(path, str(base))] = "-> " + os.readlink(path)
            else:
                with open(path, "rb") as handle:
                    files[os.path.relpath(path, str(base))] = handle.read()
    return files


def rewrite(path, change):
    with open(path, "rb") as handle:
        data = handle.read()
    with open(path, "wb") as handle:
        handle.write(change(data))


def truncate(data):
    return data[:len(data) // 2]


def edit_json(change):
    def edit(data):
        doc = json.loads(data)
        change(doc)
        return json.dumps(doc).encode()
    return edit


def replace_with(content):
    return lambda data: content


FACTS = "run-2/facts/0.json"
PROBE = "run-2/probe/1.json"
PLAN_FILE = "run-2/probe/0.json"
HOST = "run-2/hosts/db-1.json"
BASE_SUMMARY = "run-1/summary.json"
BASE_HOST = "run-1/hosts/db-1.json"
BASE_INDEX = "run-1/findings-index.json"

# (id, file to corrupt, how, what the error names)
REPORT_CASES = [
    # a record that names no host, in a folder without the play's host list: no host to fail
    ("facts-truncated", FACTS, truncate, "names no host: facts record 0.json is not valid JSON"),
    ("facts-not-utf8", FACTS, replace_with(b'{"host": "\xff"}'), "names no host: facts record 0.json is not valid JSON"),
    ("facts-a-list", FACTS, replace_with(b"[]"), "names no host"),
    ("probe-truncated", PROBE, truncate, "is not valid JSON"),
    ("probe-schema", PROBE, edit_json(lambda d: d["result"].update(schema="other/v9")), "is not a ext4-fleet-audit/probe"),
    ("plan-truncated", PLAN_FILE, truncate, "is not valid JSON"),
    ("baseline-summary-truncated", BASE_SUMMARY, truncate, "is not valid JSON"),
    ("baseline-summary-schema", BASE_SUMMARY, edit_json(lambda d: d.update(schema="x")), "is not a ext4-fleet-audit/summary"),
    ("baseline-index-truncated", BASE_INDEX, truncate, "findings-index.json is not valid JSON"),
    ("baseline-index-findings", BASE_INDEX, edit_json(lambda d: d["hosts"]["db-1"].update(findings="none")),
     "(host 'db-1'): $.findings: Expected `array`, got `str`"),
    # a baseline reported before findings-index.json existed: its host reports are read
    ("baseline-host-truncated", BASE_HOST, truncate, "is not valid JSON"),
    ("baseline-host-schema", BASE_HOST, edit_json(lambda d: d.update(findings="none")), "findings"),
]

WAIVER_CASES = [
    ("truncated", b"waivers:\n  - rule: EXT4_NOBARRIER\n    justification: 'battery", "cannot read waiver file"),
    ("not-utf8", b"waivers:\n  - rule: EXT4_NOBARRIER\n    justification: \xff\xfe\n", "cannot read waiver file"),
    ("no-such-date", b"waivers:\n  - {rule: EXT4_NOBARRIER, justification: j, approver: a, expires: 2027-02-30}\n",
     "waiver #1 (EXT4_NOBARRIER): expires '2027-02-30' is not a date (day is out of range for month)"),
    ("rule-a-list", b"waivers:\n  - {rule: [EXT4_NOBARRIER], justification: j, approver: a, expires: 2027-01-01}\n",
     "rule must be a rule id"),
    ("nested", b"[" * 3000, "cannot read waiver file"),
    # closed, so that libyaml parses it: its composer would recurse 200,000 deep and crash the process
    ("nested-closed", b"[" * 200000 + b"]" * 200000, "cannot read waiver file"),
    ("a-list", b"- rule: EXT4_NOBARRIER\n", "expected a mapping with a 'waivers' list"),
    ("no-approver", b"waivers:\n  - {rule: EXT4_NOBARRIER, justification: j, expires: 2027-01-01}\n", "has no approver"),
    ("year-0999", b"waivers:\n  - {rule: EXT4_NOBARRIER, justification: j, approver: a, expires: 0999-01-01}\n",
     "waiver #1 (EXT4_NOBARRIER): expires 0999-01-01 is not a year from 2000 to 2100"),
    ("justification-a-mapping", b"waivers:\n  - {rule: EXT4_NOBARRIER, justification: {a: 1}, approver: a, "
                                b"expires: 2027-01-01}\n", "(EXT4_NOBARRIER): justification must be text"),
    ("approver-a-list", b"waivers:\n  - {rule: EXT4_NOBARRIER, justification: j, approver: [1, 2], expires: 2027-01-01}\n",
     "(EXT4_NOBARRIER): approver must be text"),
    ("mountpoints-not-names", b"waivers:\n  - {rule: EXT4_NOBARRIER, justification: j, approver: a, "
                              b"mountpoints: [1, null], expires: 2027-01-01}\n", "mountpoints must be a list of names"),
    ("alias", b"globs: &g ['/data*']\nwaivers:\n  - {rule: EXT4_NOBARRIER, justification: j, approver: a, "
              b"mountpoints: *g, expires: 2027-01-01}\n", "found the alias *g"),
]

# A facts record of one host that is corrupt, of the wrong shape or past a bound: that host is failed
# with the reason (the file and the field), every other host is reported, the verdict is
# incomplete (exit 2). Before, each stopped the report step for the whole fleet.
# (id, how, what the host's reason says)
HOST_CASES = [
    ("truncated", truncate, "is not valid JSON"),
    ("empty", replace_with(b""), "is not valid JSON"),
    ("not-utf8", replace_with(b'{"host": "\xff"}'), "is not valid JSON"),
    ("a-list", replace_with(b"[]"), "names host None"),
    ("status", edit_json(lambda d: d.update(status="exploded")), "status 'exploded' is not one of"),
    ("no-host", edit_json(lambda d: d.pop("host")), "names host None"),
    ("another-host", edit_json(lambda d: d.update(host="web-2")), "is the file of host 'db-1' but names host 'web-2'"),
    ("groups", edit_json(lambda d: d.update(groups="web")), "(host 'db-1'): $.groups: Expected `array | null`, got `str`"),
    ("kernel", edit_json(lambda d: d["facts"].pop("kernel")), "$.facts: Object missing required field `kernel`"),
    ("filesystems", edit_json(lambda d: d["facts"].update(filesystems="x")), "$.facts.filesystems: Expected `array`, got `str`"),
    ("mountpoint", edit_json(lambda d: d["facts"]["filesystems"][0].update(mountpoint=7)),
     "$.facts.filesystems[0].mountpoint: Expected `str`, got `int`"),
    ("superblock", edit_json(lambda d: d["facts"]["filesystems"][0]["superblock"].update(block_size="4k")),
     "$.facts.filesystems[0].superblock.block_size: Expected `int | null`, got `str`"),
    ("superblock-nan", edit_json(lambda d: d["facts"]["filesystems"][0]["superblock"].update(block_count=float("nan"))),
     "a number that is not finite (nan)"),
    ("errors", edit_json(lambda d: d["facts"].update(errors=["x"])), "$.facts.errors[0]: Expected `object`, got `str`"),
    ("lone-surrogate", edit_json(lambda d: d["facts"]["filesystems"][0].update(mountpoint="/srv/\udc80")),
     "text that is not Unicode"),
    ("nested", replace_with(b'{"host": "db-1", "x": ' + b"[" * 10000 + b"]" * 10000 + b"}"), "is not valid JSON"),
    ("policy", edit_json(lambda d: d.update(policy={"fail_on": "sometimes"})), "its record's policy is not valid"),
    ("too-many-filesystems", edit_json(lambda d: d["facts"].update(filesystems=d["facts"]["filesystems"] * 5000)),
     "a list of 5000 items (at most 4096)"),
    ("too-long-string", edit_json(lambda d: d["facts"]["filesystems"][0].update(device="x" * 70000)),
     "a string of 70000 characters (at most 65536)"),
]


@pytest.mark.parametrize("case", HOST_CASES, ids=[c[0] for c in HOST_CASES])
def test_a_bad_facts_record_fails_its_host_and_the_others_are_reported(reports_dir, capsys, case):
    name, change, fragment = case
    run = reports_dir / "run-2"
    # as the role writes them: each record named by run_folder.record_name, and the play's host list
    for number, host in enumerate(("db-1", "web-2")):
        os.rename(str(run / "facts" / ("%d.json" % number)), str(run / "facts" / run_folder.record_name(host)))
    (run / run_folder.PLAY_HOSTS).write_text(json.dumps({"hosts": ["db-1", "web-2"]}))
    rewrite(str(run / "facts" / run_folder.record_name("db-1")), change)
    rc, out, err = main(capsys, "report", str(run), "--fail-on", "critical")
    assert rc == 2 and "Traceback" not in err, (out, err)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verdict"] == "incomplete" and summary["counts"]["hosts"] == 2, summary
    [failed] = summary["hosts_not_audited"]
    assert failed["host"] == "db-1" and failed["status"] == "failed", failed
    assert fragment in failed["reason"], failed["reason"]
    assert name == "policy" or run_folder.record_name("db-1") in failed["reason"], failed["reason"]  # the file
    assert json.loads((run / "hosts" / "web-2.json").read_text())["status"] == "audited"


GATE_CASES = [
    ("host-truncated", HOST, truncate, "is not valid JSON"),
    ("host-not-utf8", HOST, replace_with(b"\xff\xfe{}"), "is not valid JSON"),
    ("host-schema", HOST, edit_json(lambda d: d.update(schema="ext4-fleet-audit/host-report/v0")),
     "is not a ext4-fleet-audit/host-report/v1"),
    ("host-findings", HOST, edit_json(lambda d: d.update(findings={})), "$.findings: Expected `array`, got `object`"),
    ("host-severity", HOST, edit_json(lambda d: d["findings"][0].update(severity="catastrophic")),
     "(host 'db-1'): $.findings[0].severity 'catastrophic' is not one of info, low, medium, high, critical"),
    ("host-waiver", HOST, edit_json(lambda d: d["findings"][0].update(waived=True, waiver=None)),
     "$.findings[0]: waived is true but there is no waiver"),
    ("host-probe", HOST, edit_json(lambda d: d.update(probe="ran")), "$.probe: Expected `object | null`, got `str`"),
    ("host-status", HOST, edit_json(lambda d: d.update(status=None)), "$.status: Expected `str`, got `null`"),
    ("host-waiver-expiry", HOST, edit_json(lambda d: d["findings"][0].update(waived=True, waiver={
        "rule": d["findings"][0]["rule"], "justification": "j", "approver": "a", "expires": "999-01-01T00:00:00Z",
        "status": "active"})), "$.findings[0].waiver.expires: Expected `str` that is a moment in UTC"),
    ("baseline-summary-truncated", BASE_SUMMARY, truncate, "is not valid JSON"),
    ("baseline-host-truncated", BASE_HOST, truncate, "is not valid JSON"),
]


def check_refused(base, args, fragment, run=None):
    before = snapshot(base)
    rc, out, err = run(*args)
    first = err.splitlines()[0] if err else ""
    assert rc == 2, "exit %d, expected 2 (could not run)\nstderr: %s\nstdout: %s" % (rc, err, out)
    assert first.startswith("error: ") and fragment in first, "the first stderr line is not the clear error:\n" + err
    assert "Traceback" not in err, err
    assert "verdict: pass" not in out
    after = snapshot(base)
    changed = sorted(k for k in set(before) | set(after) if before.get(k) != after.get(k))
    assert changed == [], "the refused run changed files: %s" % changed


@pytest.mark.parametrize("case", REPORT_CASES, ids=[c[0] for c in REPORT_CASES])
def test_report_refuses_corrupt_input_and_overwrites_nothing(reports_dir, capsys, case):
    name, target, change, fragment = case
    if target == BASE_HOST:
        os.unlink(str(reports_dir / BASE_INDEX))
    rewrite(str(reports_dir / target), change)
    args = ["report", str(reports_dir / "run-2")]
    if target.startswith("run-1/"):
        args += ["--baseline", str(reports_dir / "run-1")]
    check_refused(reports_dir, args, fragment, run=lambda *a: main(capsys, *a))


@pytest.mark.parametrize("case", WAIVER_CASES, ids=[c[0] for c in WAIVER_CASES])
@pytest.mark.parametrize("command", ["report", "gate"])
def test_bad_waiver_files_are_refused(reports_dir, tmp_path, capsys, command, case):
    name, content, fragment = case
    waivers = tmp_path / "waivers.yml"
    waivers.write_bytes(content)
    check_refused(reports_dir, [command, str(reports_dir / "run-2"), "--waivers", str(waivers)], fragment,
                  run=lambda *a: main(capsys, *a))


@pytest.mark.parametrize("case", GATE_CASES, ids=[c[0] for c in GATE_CASES])
def test_gate_refuses_corrupt_reports(reports_dir, capsys, case):
    name, target, change, fragment = case
    rewrite(str(reports_dir / target), change)
    args = ["gate", str(reports_dir / "latest")]
    if target.startswith("run-1/"):
        args += ["--baseline", str(reports_dir / "run-1")]
    check_refused(reports_dir, args, fragment, run=lambda *a: main(capsys, *a))


def test_a_baseline_that_is_missing_or_cut_short_is_refused(reports_dir, capsys):
    os.unlink(str(reports_dir / BASE_HOST))  # a copied artifact that lost a host report
    run = lambda *a: main(capsys, *a)  # noqa: E731
    check_refused(reports_dir, ["report", str(reports_dir / "run-2"), "--baseline", str(reports_dir / "run-1")],
                  "is incomplete", run)
    check_refused(reports_dir, ["gate", str(reports_dir / "run-2"), "--baseline", str(reports_dir / "nope")],
                  "not found", run)


def test_a_real_process_exits_2_with_the_error_first(reports_dir):
    rewrite(str(reports_dir / FACTS), truncate)
    check_refused(reports_dir, ["report", str(reports_dir / "run-2")], "names no host", run=cli)


def test_the_untouched_folders_still_report_and_gate(reports_dir, capsys):
    """The fixture itself is sound: the same commands on intact files succeed."""
    assert main(capsys, "report", str(reports_dir / "run-2"), "--fail-on", "critical",
                "--baseline", str(reports_dir / "run-1"))[0] == 0
    assert main(capsys, "gate", str(reports_dir / "latest"), "--fail-on", "critical")[0] == 0


# A billion laughs under mountpoints: 9 levels of 9 aliases, 9**9 (387 million) strings once expanded.
BILLION_LAUGHS = ("laughs:\n  l0: &l0 [lol, lol, lol, lol, lol, lol, lol, lol, lol]\n" + "".join(
    "  l%d: &l%d [%s]\n" % (n, n, ", ".join(["*l%d" % (n - 1)] * 9)) for n in range(1, 9)) +
    "waivers:\n  - {rule: EXT4_NOBARRIER, justification: j, approver: a, expires: 2027-01-01, mountpoints: [*l8]}\n")
MEMORY_CAP = 2 << 30  # the process's address space: an expanding bomb hits it instead of the machine


def test_an_alias_bomb_fails_fast_with_file_and_line(reports_dir, tmp_path):
    bomb = tmp_path / "waivers.yml"
    bomb.write_text(BILLION_LAUGHS)
    started = time.monotonic()
    result = subprocess.run(
        [os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "gate", str(reports_dir / "run-2"), "--waivers", str(bomb)],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300,
        preexec_fn=lambda: resource.setrlimit(resource.RLIMIT_AS, (MEMORY_CAP, MEMORY_CAP)))
    elapsed, err = time.monotonic() - started, result.stderr.decode()
    assert result.returncode == 2 and err.splitlines()[0] == (
        "error: cannot read waiver file %s: found the alias *l0: aliases (and << merges) are not allowed in this file"
        % bomb), err
    assert '  in "%s", line 3, column 12' % bomb in err and "Traceback" not in err, err
    assert elapsed < 10, "took %.1f s" % elapsed
