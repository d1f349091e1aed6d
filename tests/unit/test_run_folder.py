"""The run folder's rules (plugins/module_utils/run_folder.py) as the report step and `ext4audit run`
follow them: a run folder is claimed once, also by processes racing for it; the report step refuses
a run folder another user could swap (its reports folder writable by them, or a symbolic link) and
fails a host of the play that has no record; `ext4audit run` exits by the verdict the report step
wrote, never by what the run folder says afterwards; record names do not depend on a host name's
shape; bounds stop at the first one broken."""

import json
import multiprocessing
import os
import stat
import time

import pytest

from ext4audit.cli import run as run_mod
from ext4audit.parsers import run_folder
from test_baseline import DEFAULTS, record
from test_reports import cli, write_run

RECORDS = [record("a", ("/data", DEFAULTS)), record("b", ("/data", DEFAULTS))]


def _claimer(barrier, reports, run_id, results):
    barrier.wait()
    try:
        run_folder.claim(reports, run_id)
        results.put("claimed")
    except run_folder.FolderError as exc:
        results.put(str(exc))


def test_racing_processes_claim_a_run_folder_once(tmp_path):
    reports = str(tmp_path / "reports")
    context = multiprocessing.get_context("fork")
    for pair in range(100):
        barrier, results = context.Barrier(2), context.Queue()
        procs = [context.Process(target=_claimer, args=(barrier, reports, "same-%d" % pair, results))
                 for _ in range(2)]
        for proc in procs:
            proc.start()
        for proc in procs:
            proc.join(30)
        outcomes = sorted((results.get(timeout=5) for _ in procs), key=lambda o: o != "claimed")
        assert outcomes[0] == "claimed" and "exists already" in outcomes[1], (pair, outcomes)
    assert stat.S_IMODE(os.stat(os.path.join(reports, "same-0")).st_mode) == 0o755
    assert sorted(os.listdir(os.path.join(reports, "same-0"))) == ["facts", "probe"]


@pytest.mark.parametrize("run_id", ["../x", "a/b", ".hidden", "latest", "", "-rf", "x" * 129, "tab\there"])
def test_a_run_id_that_is_not_a_plain_name_is_refused(tmp_path, run_id):
    with pytest.raises(run_folder.FolderError, match="not a plain folder name"):
        run_folder.claim(str(tmp_path / "reports"), run_id)
    assert not (tmp_path / "reports").exists() or os.listdir(str(tmp_path / "reports")) == []


def test_record_names_do_not_depend_on_the_host_names_shape():
    names = [run_folder.record_name(host) for host in (".hidden", "../evil", "x" * 300, "a/b", "ü", "", "..")]
    assert all(len(name) <= 80 and "/" not in name and not name.startswith(".") for name in names), names
    assert len(set(names)) == len(names)
    assert run_folder.record_name("web-1.example.com").startswith("web-1.example.com-")


def test_bounds_stop_at_the_first_one_broken():
    assert run_folder.answer_problem({"filesystems": [{"mountpoint": "/"}]}) is None
    started = time.monotonic()
    assert "100000 items" in run_folder.answer_problem({"filesystems": [{}] * 100000})
    assert time.monotonic() - started < 0.1
    assert "nesting deeper" in run_folder.answer_problem(json.loads("[" * 100 + "]" * 100))
    assert "not finite" in run_folder.answer_problem({"block_count": float("nan")})
    assert "not Unicode" in run_folder.answer_problem({"mountpoint": "/srv/\udc80"})
    assert "characters" in run_folder.answer_problem({"x" * 70000: 1})


# Texts at and around every bound, and the escapes that hide what a text holds.
HOSTILE_TEXTS = [
    '{"host": "a", "filesystems": [{"mountpoint": "/"}]}', '{"x": NaN}', '{"x": -Infinity}', '{"x": 1e999}',
    '{"x": 1.5e3}', '{"m": "/srv/\\udc80"}', '{"m": "/srv/\\ud83d\\ude00"}', '{"m": "\\\\ud800"}',
    '{"m": "\\uDBFF"}', json.dumps({"x" * 70000: 1}), json.dumps({"x": "y" * 65536}), json.dumps({"x": "y" * 65000}),
    json.dumps({"l": [0] * 4096}), json.dumps({"l": [0] * 4097}), json.dumps({"d": {str(i): i for i in range(4097)}}),
    "[" * 16 + "]" * 16, "[" * 17 + "]" * 17, '{"a":' * 16 + "1" + "}" * 16, '{"a":' * 17 + "1" + "}" * 17,
    json.dumps([[0] * 4000] * 300), '"just a string"', "17",
]


@pytest.mark.parametrize("text", HOSTILE_TEXTS, ids=lambda text: "%s..%d" % (text[:20], len(text)))
def test_a_record_file_is_judged_as_its_decoded_answer_would_be(text):
    """decode_answer skips what a text cannot hold; it must refuse exactly what answer_problem does."""
    data = text.encode("utf-8")
    try:
        expected = run_folder.answer_problem(json.loads(data))
    except ValueError:
        expected = "not JSON"
    value, problem = run_folder.decode_answer(data)
    assert (problem is None) == (expected is None), (problem, expected)
    if expected is None:
        assert value == json.loads(data)


def test_the_report_step_refuses_a_run_folder_another_user_could_swap(tmp_path):
    reports = tmp_path / "reports"
    run = str(reports / "run-1")
    write_run(run, RECORDS)
    reports.chmod(0o777)
    rc, out, err = cli("report", run)
    assert rc == 2 and "refused" in err and "can be written by other users (mode 0777)" in err, err
    assert sorted(os.listdir(run)) == ["facts"]
    reports.chmod(0o755)
    os.chown(str(reports), 65534, -1)  # nobody's
    rc, out, err = cli("report", run)
    assert rc == 2 and "belongs to uid 65534" in err, err
    os.chown(str(reports), 0, -1)
    os.rename(run, run + "-real")
    os.symlink("run-1-real", run)
    rc, out, err = cli("report", run)
    assert rc == 2 and "is a symbolic link" in err, err
    assert sorted(os.listdir(run + "-real")) == ["facts"]


def test_a_host_of_the_play_without_a_record_is_failed(tmp_path):
    run = tmp_path / "reports" / "run-1"
    write_run(str(run), RECORDS)
    (run / run_folder.PLAY_HOSTS).write_text(json.dumps({"hosts": ["a", "b", "gone"]}))
    rc, out, err = cli("report", str(run))
    assert rc == 2, (out, err)
    summary = json.loads((run / "summary.json").read_text())
    assert summary["verdict"] == "incomplete" and summary["counts"]["hosts"] == 3
    assert [(h["host"], h["status"]) for h in summary["hosts_not_audited"]] == [("gone", "failed")]
    assert "no facts record" in summary["hosts_not_audited"][0]["reason"]


def test_ext4audit_run_exits_by_the_report_steps_verdict_not_the_folder(tmp_path):
    """The report step writes its verdict to run's private file; a summary.json changed afterwards
    (here: one that says pass where the step said fail) does not change the exit code."""
    run = tmp_path / "reports" / "run-1"
    write_run(str(run), RECORDS)
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    verdict_file = private / "verdict.json"
    rc, out, err = cli("report", str(run), "--fail-on", "info", "--verdict-file", str(verdict_file))
    assert rc == 1, (out, err)
    written = json.loads(verdict_file.read_text())
    assert written["verdict"] == "fail" and written["run_dir"] == str(run)
    assert stat.S_IMODE(verdict_file.stat().st_mode) == 0o600
    summary = json.loads((run / "summary.json").read_text())
    (run / "summary.json").write_text(json.dumps(dict(summary, verdict="pass")))
    assert run_mod.verdict_code(2, str(verdict_file)) == (1, None)
    verdict_file.write_text(json.dumps({"run_dir": str(run)}))  # a record without a verdict: not a pass
    assert run_mod.verdict_code(0, str(verdict_file))[0] == 2
