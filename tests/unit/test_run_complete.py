"""A run folder is complete only when the report step wrote its last file, summary.json: gate,
merge and --baseline refuse one whose step stopped before (a later file could not be written, an
earlier complete report of the folder re-reported), whose summary.json is missing or cut short,
or which lacks a host report or facts record its summary lists (a copy cut short); a complete
folder works as before. The report step runs as a real process on a real folder."""

import json
import os
import shutil

import pytest

from test_baseline import DEFAULTS, record
from test_reports import cli, write_run

# Both hosts pass at the default fail_on (high): what an incomplete folder must not turn into.
RECORDS = [record("a", ("/data", DEFAULTS)), record("b", ("/data", DEFAULTS))]


@pytest.fixture
def complete(tmp_path):
    path = str(tmp_path / "reports" / "run-1")
    write_run(path, RECORDS)
    rc, out, err = cli("report", path)
    assert rc == 0 and out.splitlines()[-1].startswith("verdict: pass"), (out, err)
    shutil.copytree(path, path + "-whole")  # kept whole: the run the gate compares with a damaged baseline
    return path


def verdicts(tmp_path, folder):
    """What gate, merge (folder as its one slice) and --baseline (the report step's and the gate's,
    of complete runs) say of folder: [(command, exit code, stderr)]."""
    other = str(tmp_path / "other")
    write_run(other, RECORDS)
    return [("gate",) + cli("gate", folder)[::2],
            ("merge",) + cli("merge", str(tmp_path / "merged"), folder)[::2],
            ("report --baseline",) + cli("report", other, "--baseline", folder)[::2],
            ("gate --baseline",) + cli("gate", folder + "-whole", "--baseline", folder)[::2]]


def cut_short(path):
    text = open(path).read()
    with open(path, "w") as handle:
        handle.write(text[:len(text) // 2])


@pytest.mark.parametrize("damage, gate_says, merge_says", [
    (lambda run: os.unlink(os.path.join(run, "summary.json")), "run folder {run} is incomplete: it has no summary.json",
     "slice {run} is incomplete: it has no summary.json"),
    (lambda run: cut_short(os.path.join(run, "summary.json")), "run folder summary {run}/summary.json is not valid JSON",
     "slice summary {run}/summary.json is not valid JSON"),
    (lambda run: os.unlink(os.path.join(run, "hosts", "b.json")),
     "run folder {run} is incomplete: summary.json lists 2 host(s), hosts/ has 1; no report for 'b'",
     "slice {run} is incomplete: summary.json lists 2 host(s), hosts/ has 1; no report for 'b'"),
])
def test_an_incomplete_folder_is_refused_by_gate_merge_and_baseline(tmp_path, complete, damage, gate_says, merge_says):
    damage(complete)
    said = verdicts(tmp_path, complete)
    assert [rc for _, rc, _ in said] == [2, 2, 2, 2], said
    baseline_says = gate_says.replace("run folder", "baseline")
    for (command, _, err), message in zip(said, [gate_says, merge_says, baseline_says, baseline_says]):
        assert err.startswith("error: " + message.format(run=complete)), (command, err)
    assert not os.path.exists(str(tmp_path / "merged"))  # merge wrote nothing
    assert not os.path.exists(str(tmp_path / "other" / "summary.json"))  # nor did the report step


def test_a_slice_whose_facts_lack_a_host_of_its_summary_is_refused(tmp_path, complete):
    (facts,) = [name for name in os.listdir(os.path.join(complete, "facts"))
                if json.load(open(os.path.join(complete, "facts", name)))["host"] == "b"]
    os.unlink(os.path.join(complete, "facts", facts))
    rc, out, err = cli("merge", str(tmp_path / "merged"), complete)
    assert rc == 2 and err.startswith("error: slice %s is incomplete: its summary.json lists 2 host(s), facts/ has "
                                      "records of 1; no record of 'b'" % complete), err
    assert not os.path.exists(str(tmp_path / "merged"))


def test_a_report_step_that_stops_before_its_last_file_leaves_no_summary(complete):
    """The folder was reported once (complete); a second report of it fails writing report.html
    (a folder is in the way, as ENOSPC would stop it): exit 2, no summary.json, `latest` where it
    was, and the gate refuses the folder, which it passed before."""
    latest = os.path.join(os.path.dirname(complete), "latest")
    os.rename(latest, latest + "-before")  # moved aside: `latest` must not reappear
    os.unlink(os.path.join(complete, "report.html"))
    os.mkdir(os.path.join(complete, "report.html"))
    rc, out, err = cli("report", complete)
    assert rc == 2 and err.startswith("error: run folder %s: its reports could not be written (" % complete), err
    assert "Is a directory" in err and "; it is incomplete (no summary.json), and gate, merge and --baseline refuse it" \
        in err, err
    assert not os.path.exists(os.path.join(complete, "summary.json")) and not os.path.lexists(latest)
    rc, out, err = cli("gate", complete)
    assert rc == 2 and "run folder %s is incomplete: it has no summary.json" % complete in err, (out, err)
    os.rmdir(os.path.join(complete, "report.html"))
    assert cli("report", complete)[0] == 0 and os.path.exists(os.path.join(complete, "summary.json"))


def test_a_complete_folder_is_gated_merged_and_compared_with(tmp_path, complete):
    said = verdicts(tmp_path, complete)
    assert [(rc, err) for _, rc, err in said] == [(0, "")] * 4, said
    assert os.path.exists(str(tmp_path / "merged" / "summary.json"))
