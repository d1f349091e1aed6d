"""Report writers as plug-ins: the registry, report.tap read back by tappy (a TAP consumer not
ours), the choice of formats (--formats, ext4_audit_formats) and summary.json on stdout."""

import importlib
import json
import os

import pytest
import yaml
from hypothesis import given, settings, strategies as st
from tap.parser import Parser

from conftest import ROOT
from ext4audit.formats import tap
from ext4audit.formats import writers
from test_reports import HOSTILE, cli, hostile_facts, write_run
from test_rules import facts

# A host name that would skip its own failing test point, and add a passing one, if it reached
# a TAP line as it is (tappy takes everything after the first "#" as the directive).
SKIPPER = "evil # SKIP waived\nok 99 - fine"
REASON = "ssh: connect timed out\n  ...\nnot ok 7 - x # SKIP"  # would end a YAML block and skip a test
FILES = {"junit": "junit.xml", "markdown": "summary.md", "sarif": "report.sarif", "prometheus": "ext4audit.prom",
         "tap": "report.tap", "html": "report.html"}


def fleet_run(path):
    audited = facts()
    audited["schema"] = "ext4-fleet-audit/facts/v1"
    write_run(path, [
        {"host": "db-1", "groups": ["tikv"], "status": "audited", "facts": hostile_facts()},  # nobarrier: high
        {"host": SKIPPER, "groups": [], "status": "audited", "facts": hostile_facts()},
        {"host": "ok-1", "groups": [], "status": "audited", "facts": audited},  # nothing at or above high
        {"host": "web/<2>", "groups": [], "status": "unreachable", "reason": REASON},
    ])
    return path


@pytest.fixture
def run_dir(tmp_path):
    return fleet_run(str(tmp_path / "reports" / "run-1"))


def test_every_registered_format_is_a_writer_with_its_own_file():
    assert list(writers.FORMATS) == list(FILES)
    for name, file in FILES.items():
        writer = writers.writer_class(name)
        assert issubclass(writer, writers.Writer) and writer.file == file, name
    assert writers.names("all") == list(FILES) and writers.names("tap, junit") == ["junit", "tap"]
    with pytest.raises(writers.FormatError, match=r"unknown report format 'xml'"):
        writers.names("junit,xml")


def test_tap_is_one_module_and_one_registration_line():
    """The TAP format touches nothing but its module and its line in writers.FORMATS."""
    module = importlib.import_module("ext4audit.formats.tap")
    lines = [line for line in open(writers.__file__).read().splitlines() if "tap" in line]
    assert lines == ['    "tap": "tap",'] and module.Writer.file == "report.tap"


def test_report_tap_parses_with_one_test_point_per_host(run_dir):
    rc, out, err = cli("report", run_dir)
    assert rc == 2, (out, err)
    summary = json.load(open(os.path.join(run_dir, "summary.json")))
    lines = list(Parser().parse_file(os.path.join(run_dir, "report.tap")))
    assert [(line.category, getattr(line, "version", None)) for line in lines[:1]] == [("version", 13)]
    assert lines[1].category == "plan" and lines[1].expected_tests == 4
    tests = [line for line in lines if line.category == "test"]
    assert [line.category for line in lines if line.category not in ("test", "plan", "version")] == []
    assert [t.number for t in tests] == [1, 2, 3, 4]
    assert not any(t.skip or t.todo for t in tests)  # the host named "... # SKIP" is not skipped
    # In run order (facts/0.json, 1.json, ...): the gate's outcome for each host.
    assert [t.ok for t in tests] == [False, False, True, False]
    by_host = dict((t.yaml_block["host"], t.yaml_block) for t in tests if not t.ok)
    assert set(by_host) == {"db-1", SKIPPER, "web/<2>"}  # the names themselves, in the YAML blocks
    assert by_host["web/<2>"] == {"host": "web/<2>", "status": "unreachable", "reason": REASON}
    failing = by_host[SKIPPER]["findings"]
    assert [(f["rule"], f["severity"], f["mountpoint"]) for f in failing] == [("EXT4_NOBARRIER", "high", HOSTILE)]
    assert by_host[SKIPPER]["message"] == "1 finding(s) fail the policy (fail_on=high)"
    assert sum(not t.ok for t in tests) == len(summary["hosts_not_audited"]) + sum(
        1 for h in summary["hosts"] if h["failing"])
    # The test lines name the hosts as hosts/ does: no "#" and no newline of a host reaches them
    text = open(os.path.join(run_dir, "report.tap")).read()
    assert "not ok 2 - evil%20%23%20SKIP%20waived%0Aok%2099%20-%20fine\n" in text
    assert os.path.exists(os.path.join(run_dir, "hosts", "evil%20%23%20SKIP%20waived%0Aok%2099%20-%20fine.json"))


def test_fail_on_new_decides_the_tap_outcome_as_it_decides_the_gate(run_dir, tmp_path):
    assert cli("report", run_dir)[0] == 2
    second = fleet_run(str(tmp_path / "reports" / "run-2"))
    rc, out, err = cli("report", second, "--baseline", run_dir, "--fail-on-new", "true",
                       "--unreachable-incomplete", "false")
    assert rc == 0, (out, err)  # nothing new since run-1
    tests = [line for line in Parser().parse_file(os.path.join(second, "report.tap")) if line.category == "test"]
    assert [t.ok for t in tests] == [True, True, True, False]  # the unreachable host still is no pass


def test_formats_choose_the_files_and_the_contract_files_are_always_written(run_dir):
    rc, out, err = cli("report", run_dir, "--formats", "tap,junit")
    assert rc == 2, (out, err)
    # (the findings index is no format: a later run's --baseline reads it)
    assert sorted(os.listdir(run_dir)) == ["facts", "findings-index.json", "hosts", "junit.xml", "report.tap",
                                           "summary.json"]
    assert len(os.listdir(os.path.join(run_dir, "hosts"))) == 4
    # Reported again with every format, then with fewer: the run folder holds the formats chosen last.
    assert cli("report", run_dir)[0] == 2
    assert set(FILES.values()) <= set(os.listdir(run_dir))
    assert cli("report", run_dir, "--formats", "markdown")[0] == 2
    assert sorted(os.listdir(run_dir)) == ["facts", "findings-index.json", "hosts", "summary.json", "summary.md"]


def test_an_unknown_format_is_an_error_naming_it_and_writes_nothing(run_dir):
    for command in ("report", "check"):
        rc, out, err = cli(command, *([run_dir] if command == "report" else []), "--formats", "junit,xml,sarif")
        assert rc == 2 and "argument --formats: unknown report format 'xml': the formats are junit, markdown, sarif, " \
                              "prometheus, tap, html, or all" in err, (command, out, err)
    assert sorted(os.listdir(run_dir)) == ["facts"]


def test_print_json_prints_summary_json(run_dir):
    rc, out, err = cli("report", run_dir, "--print", "json", "--formats", "junit")
    assert rc == 2, err
    assert out == open(os.path.join(run_dir, "summary.json")).read()
    assert json.loads(out)["verdict"] == "incomplete"


CONTROLLER_ACTION = "ext4audit.fleet.ext4_audit_controller"  # runs the controller's commands


def test_the_role_passes_ext4_audit_formats_to_the_controller():
    role = os.path.join(ROOT, "roles", "ext4_audit")
    defaults = yaml.safe_load(open(os.path.join(role, "defaults", "main.yml")))
    assert defaults["ext4_audit_formats"] == [writers.ALL]  # the argument specs': test_role_variables.py
    for task in ("prepare", "report"):  # the preflight checks the names, the report step writes them
        argv = yaml.safe_load(open(os.path.join(role, "tasks", task + ".yml")))
        # argv as a list, or built from list variables of the task (plus the site rule options)
        commands = [value for t in argv for module in (CONTROLLER_ACTION, "ansible.builtin.command") if module in t
                    for value in [t[module]["argv"]] + list((t.get("vars") or {}).values())
                    if isinstance(value, list)]
        assert any(c[c.index("--formats") + 1] == "{{ ext4_audit_formats_list }}" for c in commands
                   if "--formats" in c), task


_TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=80) | st.sampled_from([HOSTILE, SKIPPER, REASON])
_WHY = st.fixed_dictionaries({
    "host": _TEXT, "status": _TEXT, "reason": st.none() | _TEXT,
    "findings": st.lists(st.fixed_dictionaries({"rule": _TEXT, "severity": _TEXT, "mountpoint": st.none() | _TEXT,
                                                "message": _TEXT}), max_size=3)})


@settings(max_examples=300, deadline=None)
@given(_WHY)
def test_tap_yaml_blocks_are_the_bytes_pyyamls_own_emitter_writes(why):
    """report.tap's YAML block comes from libyaml (tap._QuotedDumper, for speed): the same bytes as
    PyYAML's pure-Python safe_dump, hostile strings and nulls included, and it reads back as it was."""
    fast = yaml.dump(why, Dumper=tap._QuotedDumper, default_style='"', sort_keys=False, allow_unicode=False, width=-1)
    assert fast == yaml.safe_dump(why, default_style='"', sort_keys=False, allow_unicode=False, width=float("inf"))
    assert yaml.safe_load(fast) == why


_ESCAPED = st.text(st.sampled_from("&<>\"'\r\n\t\\`*_[]{}()#+!|~$-;a é\x00\ud800"), max_size=40) | _TEXT


@settings(max_examples=500, deadline=None)
@given(_ESCAPED)
def test_summary_md_escapes_as_a_per_character_table_does(text):
    """summary.md escapes with str.replace in order (writers.replace_all, for speed): the same
    text as one lookup per character would give. (junit.xml is ElementTree's.)"""
    from ext4audit.formats import markdown

    table = str.maketrans(dict({"&": "&amp;", "<": "&lt;", ">": "&gt;"}, **{c: "\\" + c for c in "\\`*_[]{}()#+!|~$-"}))
    assert markdown.md(text) == markdown._MD_BREAKS.sub(" ", text.translate(table))
