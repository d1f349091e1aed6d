"""The results store (ext4audit/store), on real run folders made by the real report step, in
SQLite and in a real PostgreSQL server (conftest.postgresql): ingest, idempotence, a killed ingest,
slices of one night at once, the migration from schema version 1, and the history's answers on a
scripted sequence of nights."""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time

import msgspec
import pytest
import yaml

from conftest import ROOT, VENV_BIN, load_host_report
from ext4audit import store as store_pkg
from ext4audit.model import contract
from ext4audit.store import history, ingest, schema
from test_rules import facts, with_options

NOBARRIER = facts(options=with_options("nobarrier"), queue={"write_cache": "write back", "rotational": 0})
CLEAN = facts()
NIGHTS = ["2026-11-0%dT03:00:00Z" % day for day in range(1, 6)]


@pytest.fixture(params=["sqlite", "postgresql"])
def store_url(request, tmp_path):
    """A new, empty store of each kind; PGPASSWORD set for the PostgreSQL one (never in the URL)."""
    if request.param == "sqlite":
        yield str(tmp_path / "history.sqlite")
        return
    server = request.getfixturevalue("postgresql")
    name = "t%d_%d" % (os.getpid(), time.monotonic_ns())
    os.environ["PGPASSWORD"] = server["password"]
    import psycopg  # pylint: disable=import-outside-toplevel
    with psycopg.connect(server["url"], autocommit=True) as admin:
        admin.execute("CREATE DATABASE %s" % name)
    yield server["url"].rsplit("/", 1)[0] + "/" + name


def cli(*args, env=None):
    result = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit"] + list(args), cwd=ROOT,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    return result.returncode, result.stdout.decode(), result.stderr.decode()


def reported_run(base, name, hosts, store="off", waivers=None, night=None):
    """A run folder made by the real report step from facts records; night: its generated_at, as if it ran then."""
    run_dir = os.path.join(str(base), "reports", name)
    os.makedirs(os.path.join(run_dir, "facts"))
    for index, (host, tree) in enumerate(hosts):
        record = {"host": host, "groups": [], "status": "audited" if tree else "unreachable",
                  "facts": dict(tree, schema="ext4-fleet-audit/facts/v1") if tree else None,
                  "reason": None if tree else "ssh: connect timed out"}
        with open(os.path.join(run_dir, "facts", "%d.json" % index), "w") as handle:
            json.dump({k: v for k, v in record.items() if v is not None}, handle)
    args = ["report", run_dir, "--store", store, "--formats", "markdown"]
    if waivers:
        path = os.path.join(str(base), name + "-waivers.yml")
        with open(path, "w") as handle:
            yaml.safe_dump({"waivers": waivers}, handle)
        args += ["--waivers", path]
    code, out, err = cli(*args)
    assert code in (0, 1, 2) and os.path.exists(os.path.join(run_dir, "summary.json")), err
    if night:
        path = os.path.join(run_dir, "summary.json")
        with open(path) as handle:
            summary = json.load(handle)
        summary["generated_at"] = night
        with open(path, "w") as handle:
            json.dump(summary, handle)
    return run_dir, out


def count(store, table):
    return store.one("SELECT COUNT(*) FROM %s" % table)[0]


def test_report_step_records_the_run_and_shows_first_seen(tmp_path):
    """`make audit` twice: the second report step's output says since when each finding is known."""
    first, out1 = reported_run(tmp_path, "run-1", [("db-1", NOBARRIER)], store="")
    time.sleep(1.1)  # a second later: another stamp
    _, out2 = reported_run(tmp_path, "run-2", [("db-1", NOBARRIER)], store="")
    with open(os.path.join(first, "summary.json")) as handle:
        seen = json.load(handle)["generated_at"]
    assert os.path.exists(tmp_path / "reports" / "history.sqlite")
    # The host also has kernel findings: every one of them new on the first night, none on the second.
    tonight = re.search(r"(\d+) finding\(s\) tonight, (\d+) new\n", out1)
    assert tonight and tonight.group(1) == tonight.group(2) and "first seen" not in out1
    assert "%s finding(s) tonight, 0 new\n" % tonight.group(1) in out2
    assert "  EXT4_NOBARRIER: 1, first seen %s\n" % seen in out2
    assert out2.splitlines()[-1].startswith("verdict: ")  # the verdict is last, where people look
    with schema.open_store(str(tmp_path / "reports" / "history.sqlite")) as store:
        assert [r["run_id"] for r in history.runs(store)] == ["run-2", "run-1"]


def test_ingest_is_idempotent(tmp_path, store_url):
    run_dir, _ = reported_run(tmp_path, "night-1", [("db-1", NOBARRIER), ("web-1", CLEAN), ("gone", None)])
    with schema.open_store(store_url) as store:
        assert ingest.ingest(store, run_dir)["changed"]
        before = [count(store, t) for t in ingest.SLICE_TABLES + ("runs",)]
        assert not ingest.ingest(store, run_dir)["changed"]
        assert [count(store, t) for t in ingest.SLICE_TABLES + ("runs",)] == before
        assert before[1] == 3 and before[-2:] == [1, 1]
        run = history.runs(store)[0]
        assert (run["verdict"], run["complete"], run["hosts"], run["hosts_audited"]) == ("incomplete", True, 3, 2)
        kernel = store.one("SELECT kernel FROM hosts WHERE host = 'db-1'")[0]
        assert kernel == NOBARRIER["kernel"]["release"]


KILLED_INGEST = """
import os, sys, time
from ext4audit.store import ingest, schema
update = ingest._update_run
def stalled(*args):
    update(*args)  # every row of the slice written, not committed
    open(sys.argv[3], "w").close()
    time.sleep(600)
ingest._update_run = stalled
with schema.open_store(sys.argv[1]) as store:
    ingest.ingest(store, sys.argv[2])
"""


def test_a_killed_ingest_leaves_the_previous_state(tmp_path, store_url):
    night1, _ = reported_run(tmp_path, "night-1", [("db-1", NOBARRIER)])
    night2, _ = reported_run(tmp_path, "night-2", [("db-1", CLEAN), ("db-2", NOBARRIER)])
    with schema.open_store(store_url) as store:
        ingest.ingest(store, night1)
        before = [count(store, t) for t in ("runs", "slices", "hosts", "findings")]
    marker = str(tmp_path / "stalled")
    child = subprocess.Popen([sys.executable, "-c", KILLED_INGEST, store_url, night2, marker], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not os.path.exists(marker):
        assert child.poll() is None and time.monotonic() < deadline, "the ingest did not reach its last write"
        time.sleep(0.05)
    child.send_signal(signal.SIGKILL)
    child.wait()
    with schema.open_store(store_url) as store:
        assert [count(store, t) for t in ("runs", "slices", "hosts", "findings")] == before
        assert [r["run_id"] for r in history.runs(store)] == ["night-1"]
        assert ingest.ingest(store, night2)["changed"]  # nothing left locked
        assert [r["run_id"] for r in history.runs(store)] == ["night-2", "night-1"]


def test_four_slices_ingest_at_once_and_the_gate_reads_the_night(tmp_path, store_url):
    folders = [reported_run(tmp_path, "slice-%d" % n, [("s%d-host-%d" % (n, i), NOBARRIER if n == 3 and i == 0 else CLEAN)
                                                        for i in range(3)])[0] for n in range(4)]
    with schema.open_store(store_url):
        pass  # the schema first: four new controllers at once would each try to create it (schema.migrate locks)
    children = [subprocess.Popen([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "history", "--store", store_url,
                                  "ingest", folder, "--slice", "s%d" % n, "--run-id", "night-1"], cwd=ROOT,
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE) for n, folder in enumerate(folders)]
    for child in children:
        out, err = child.communicate(timeout=120)
        assert child.returncode == 0, err.decode()
    with schema.open_store(store_url) as store:
        assert count(store, "runs") == 1 and count(store, "slices") == 4 and count(store, "hosts") == 12
    code, out, _ = cli("gate", "--store", store_url, "--run", "night-1", "--slices", "s0,s1,s2,s3")
    assert code == 1, out  # the failing finding is in slice s3
    assert "4 slice(s) reported (s0, s1, s2, s3), 12 host(s), 12 audited" in out and "slice s3: fail" in out
    code, out, _ = cli("gate", "--store", store_url, "--run", "night-1", "--slices", "s0,s1,s2,s3,s4")
    assert code == 2 and "no report from slice(s) s4" in out
    code, out, _ = cli("gate", "--store", store_url, "--run", "night-1", "--slice-count", "5")
    assert code == 2 and "4 slice(s) reported" in out and "5 slice(s) expected" in out
    code, out, err = cli("gate", "--store", store_url, "--run", "night-2")
    assert code == 2 and "has no run 'night-2'" in err


def test_an_incomplete_run_is_recorded_and_never_passes(tmp_path, store_url):
    clean, _ = reported_run(tmp_path, "night-1", [("db-1", CLEAN)])
    stopped = str(tmp_path / "reports" / "night-1b")
    os.makedirs(os.path.join(stopped, "facts"))  # the report step never finished there
    with schema.open_store(store_url) as store:
        ingest.ingest(store, clean, "a", "night-1")
        ingest.ingest(store, stopped, "b", "night-1")
        verdict, reason, _ = history.gate(store, "night-1")
        assert verdict == "incomplete" and "slice b: incomplete" in reason
        assert history.nights(store) == []  # an incomplete night is no night of history


def test_migration_from_the_first_schema_version(tmp_path, store_url):
    store = store_pkg.backends.connect(store_url)
    with store:
        schema.migrate(store, target=1)
        with store.transaction():
            store.execute("INSERT INTO runs VALUES ('old', '2026-10-01T03:00:00Z', '2026-10-01T03:05:00Z', 'high', 0, 1, "
                          "'fail', 'r', 1, 1, 1, 1, 0, 'h')")
            store.execute("INSERT INTO hosts VALUES ('old', 'db-1', 'audited', NULL, '6.1.0', NULL, NULL, '[]', 'high', "
                          "1, 1, 0)")
            store.execute("INSERT INTO findings VALUES ('old', 'db-1', 'EXT4_NOBARRIER', 'high', '/dev/loop0', '/data', "
                          "0, NULL, NULL)")
    with schema.open_store(store_url) as store:
        assert schema.version_of(store) == schema.VERSION == 5
        assert history.gate(store, "old")[0] == "fail"
        assert [t["findings"] for t in history.trend(store, "EXT4_NOBARRIER")] == [1]  # counted by the migration
        assert [(t["findings"], t["hosts"]) for t in history.trend(store)] == [(1, 1)]
        night, _ = reported_run(tmp_path, "new", [("db-1", NOBARRIER)], night="2026-10-02T03:00:00Z")
        ingest.ingest(store, night)
        assert [e["first_seen"] for e in history.episodes(store, "db-1", "EXT4_NOBARRIER")] == ["2026-10-01T03:00:00Z"]
        store.execute("UPDATE store_meta SET value = '99' WHERE key = 'schema_version'")
    with pytest.raises(store_pkg.StoreError, match="schema version 99; this ext4audit knows versions up to 5"):
        schema.open_store(store_url)


def test_history_of_a_finding_that_appears_persists_is_waived_fixed_and_comes_back(tmp_path, store_url):
    waiver = {"rule": "EXT4_NOBARRIER", "justification": "battery-backed cache", "approver": "storage-team",
              "expires": "2099-01-01"}
    script = [NOBARRIER, NOBARRIER, NOBARRIER, CLEAN, NOBARRIER]
    with schema.open_store(store_url) as store:
        for number, (tree, night) in enumerate(zip(script, NIGHTS), 1):
            run_dir, _ = reported_run(tmp_path, "night-%d" % number, [("db-1", tree), ("web-1", CLEAN)],
                                      waivers=[waiver] if number == 3 else None, night=night)
            ingest.ingest(store, run_dir)
        found = history.episodes(store, rule="EXT4_NOBARRIER")
        assert [(e["first_seen"], e["last_seen"], e["resolved"], e["nights"], e["waived"]) for e in found] == [
            (NIGHTS[0], NIGHTS[2], NIGHTS[3], 3, True), (NIGHTS[4], NIGHTS[4], None, 1, False)]
        assert [(t["findings"], t["hosts"], t["waived"]) for t in history.trend(store, "EXT4_NOBARRIER")] == [
            (1, 1, 0), (1, 1, 0), (0, 0, 1), (0, 0, 0), (1, 1, 0)]
        assert [d["rule"] for d in history.regressed(store, "2026-11-04")[0]["findings"]] == ["EXT4_NOBARRIER"]
        assert history.regressed(store, "2026-11-02") == []  # present then and now
        fixes = [f for f in history.time_to_fix(store) if f["rule"] == "EXT4_NOBARRIER"]
        assert fixes == [{"rule": "EXT4_NOBARRIER", "severity": "high", "fixed": 1, "median_days": 3.0,
                          "max_days": 3.0, "open": 1}]
        line = history.timeline(store, "db-1")
        assert [[f["rule"] for f in n["findings"]].count("EXT4_NOBARRIER") for n in line] == [1, 1, 1, 0, 1]
    code, out, _ = cli("history", "--store", store_url, "findings", "--rule", "EXT4_NOBARRIER", "--json")
    assert code == 0 and [e["resolved"] for e in json.loads(out)] == [NIGHTS[3], None]
    code, out, _ = cli("history", "--store", store_url, "trend", "--rule", "EXT4_NOBARRIER")
    assert code == 0 and out.splitlines()[0].split() == ["generated_at", "run_id", "findings", "hosts", "waived",
                                                          "hosts_audited"]
    code, out, _ = cli("history", "--store", store_url, "prune", "--keep-days", "0")
    assert code == 0 and "removed_runs: 5" in out


def test_the_password_comes_from_the_environment_never_the_url(postgresql, tmp_path):
    env = dict(os.environ)
    env.pop("PGPASSWORD", None)
    code, _, err = cli("history", "--store", postgresql["url"], env=env)
    assert code == 2 and "cannot connect" in err and postgresql["password"] not in err
    passfile = tmp_path / "pgpass"
    passfile.write_text("127.0.0.1:%d:*:ext4audit:%s\n" % (postgresql["port"], postgresql["password"]))
    passfile.chmod(0o600)
    code, out, err = cli("history", "--store", postgresql["url"], env=dict(env, PGPASSFILE=str(passfile)))
    assert code == 0, err
    assert store_pkg.display("postgresql://u:secret@h/db") == "postgresql://u@h/db"


def test_the_nightly_diff_from_the_store_is_the_diff_from_folders(tmp_path):
    """fail_on_new without --baseline: new since the last complete run in the store; the same
    answer as --baseline with that run's folder."""
    errors_continue = facts(options=with_options("nobarrier", "errors=continue"),
                            queue={"write_cache": "write back", "rotational": 0})
    night1, _ = reported_run(tmp_path, "night-1", [("db-1", NOBARRIER), ("db-2", NOBARRIER), ("web-1", CLEAN)],
                             store="")
    tonight = [("db-1", errors_continue), ("db-2", CLEAN), ("web-1", NOBARRIER), ("new-1", NOBARRIER)]
    by_folder, _ = reported_run(tmp_path / "folders", "night-2", tonight)
    code_folder, _, _ = cli("report", by_folder, "--baseline", night1, "--fail-on-new", "true", "--store", "off",
                            "--formats", "markdown")
    by_store, _ = reported_run(tmp_path, "night-2", tonight, store="off")
    code_store, out, err = cli("report", by_store, "--fail-on-new", "true", "--formats", "markdown")
    assert code_store == code_folder == 1, err
    diffs = []
    for folder in (by_folder, by_store):
        with open(os.path.join(folder, "summary.json")) as handle:
            summary = json.load(handle)
        diffs.append((summary["verdict"], {k: v for k, v in summary["baseline"].items() if k != "path"}))
    assert diffs[0] == diffs[1]
    assert diffs[1][1]["run_id"] == "night-1" and diffs[1][1]["new"] and diffs[1][1]["resolved"]


HISTORY_DASHBOARD = os.path.join(ROOT, "monitoring", "grafana", "ext4-audit-history.json")


def test_the_grafana_history_panels_answer_from_a_real_postgresql_store(tmp_path, postgresql):
    """Each panel's SQL, its $__timeFilter macro as Grafana expands it, run on a store of two nights."""
    os.environ["PGPASSWORD"] = postgresql["password"]
    import psycopg  # pylint: disable=import-outside-toplevel
    url = postgresql["url"].rsplit("/", 1)[0] + "/grafana_%d" % os.getpid()
    with psycopg.connect(postgresql["url"], autocommit=True) as admin:
        admin.execute("DROP DATABASE IF EXISTS grafana_%d" % os.getpid())
        admin.execute("CREATE DATABASE grafana_%d" % os.getpid())
    with schema.open_store(url) as store:
        for number, night in enumerate(NIGHTS[:2], 1):
            ingest.ingest(store, reported_run(tmp_path, "night-%d" % number, [("db-1", NOBARRIER)], night=night)[0])
    with open(HISTORY_DASHBOARD) as handle:
        dashboard = json.load(handle)
    assert dashboard["templating"]["list"][0]["query"] == "grafana-postgresql-datasource"
    with psycopg.connect(url) as connection:
        for panel in dashboard["panels"]:
            assert panel["datasource"]["type"] == "grafana-postgresql-datasource"
            sql = re.sub(r"\$__timeFilter\((.*?::timestamptz)\)", r"\1 BETWEEN '2026-10-01' AND '2026-12-01'",
                         panel["targets"][0]["rawSql"])
            rows = connection.execute(sql).fetchall()
            assert rows, panel["title"]
            if panel["targets"][0]["format"] == "time_series":
                assert all(row[0].year == 2026 for row in rows), panel["title"]
        oldest = connection.execute(re.sub(r"\$__timeFilter\(.*?::timestamptz\)", "TRUE",
                                           dashboard["panels"][3]["targets"][0]["rawSql"])).fetchall()
        assert ("EXT4_NOBARRIER", "high", 1) == oldest[[r[0] for r in oldest].index("EXT4_NOBARRIER")][:3]
        assert oldest[[r[0] for r in oldest].index("EXT4_NOBARRIER")][3].isoformat().startswith("2026-11-01T03:00")


@pytest.mark.parametrize("given, shown", [
    ("", "{reports}/history.sqlite"), ("off", ""), ("/srv/store.sqlite", "/srv/store.sqlite"),
    ("postgresql://audit:secret@db.example/ext4", "postgresql://audit@db.example/ext4"),
])
def test_where_names_the_store_as_the_report_step_uses_it_and_opens_nothing(tmp_path, given, shown):
    """`history where` (the playbook's artifact_data) says the store of a reports folder without
    creating it, and never prints a password."""
    reports = tmp_path / "reports"
    out = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "history", "--store", given, "where",
                          str(reports)], cwd=ROOT, stdout=subprocess.PIPE, check=True, universal_newlines=True).stdout
    assert out == shown.format(reports=reports) + "\n"
    assert not reports.exists()


def test_an_unreachable_server_is_waited_for_once(tmp_path):
    """The report step reads the store's history, then records the run: a server that does not
    answer (a loopback port that accepts and never speaks) costs one connect timeout, not two; a
    closed port fails at once. Either way the run folder is complete and the error says so."""
    fleet = [("db-1", NOBARRIER), ("web-1", CLEAN)]
    start = time.monotonic()
    reported_run(tmp_path, "plain", fleet)
    plain = time.monotonic() - start  # the same report without a store
    with socket.socket() as closed:
        closed.bind(("127.0.0.1", 0))
        port = closed.getsockname()[1]  # closed again before the report: refused
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    accepted = []
    threading.Thread(target=lambda: [accepted.append(silent.accept()[0]) for _ in range(8)], daemon=True).start()
    timeout = 3
    env = dict(os.environ, PGCONNECT_TIMEOUT=str(timeout), PGPASSWORD="unused")
    try:
        for name, url, bound in (("closed", "postgresql://u@127.0.0.1:%d/db" % port, plain + 2),
                                 ("silent", "postgresql://u@127.0.0.1:%d/db" % silent.getsockname()[1],
                                  plain + 1.5 * timeout)):
            run_dir = reported_run(tmp_path, name, fleet)[0]
            start = time.monotonic()
            code, _, err = cli("report", run_dir, "--store", url, "--formats", "markdown", env=env)
            took = time.monotonic() - start
            assert code == 2 and "cannot connect" in err and "history ingest %s" % run_dir in err, err
            assert os.path.exists(os.path.join(run_dir, "summary.json"))
            assert took < bound, (name, took, plain)
        assert len(accepted) == 1  # the silent server was asked once
    finally:
        silent.close()
        for connection in accepted:
            connection.close()


def test_a_night_is_written_without_a_check_a_row_and_pruned_whole(tmp_path, postgresql):
    """Schema version 5 drops PostgreSQL's per-row foreign-key checks of hosts, findings and
    filesystems (the ingest's COPY); ingest and prune still keep every row with its night."""
    os.environ["PGPASSWORD"] = postgresql["password"]
    import psycopg  # pylint: disable=import-outside-toplevel
    url = postgresql["url"].rsplit("/", 1)[0] + "/fk%d" % time.monotonic_ns()
    with psycopg.connect(postgresql["url"], autocommit=True) as admin:
        admin.execute("CREATE DATABASE %s" % url.rsplit("/", 1)[1])
    checks = ("SELECT conrelid::regclass::text FROM pg_constraint WHERE contype = 'f' AND confrelid = 'runs'::regclass "
              "ORDER BY 1")
    with store_pkg.backends.connect(url) as store:
        schema.migrate(store, target=4)
        assert "findings" in [r[0] for r in store.rows(checks)]
    night, _ = reported_run(tmp_path, "night-1", [("db-1", NOBARRIER), ("web-1", CLEAN)], night=NIGHTS[0])
    with schema.open_store(url) as store:
        assert [r[0] for r in store.rows(checks)] == ["image_counts", "kernel_groups", "rule_counts", "slices"]
        ingest.ingest(store, night)
        assert count(store, "findings") and count(store, "filesystems") and count(store, "hosts") == 2
        assert history.prune(store, 0) == 1
        assert [count(store, table) for table in ingest.SLICE_TABLES + ("runs",)] == [0] * 8


def test_a_host_report_the_store_cannot_read_is_named_with_its_field(tmp_path):
    """The store decodes only the fields it keeps, by their types: a wrong one is still an error
    naming the file and the field, never a row."""
    night, _ = reported_run(tmp_path, "night-1", [("db-1", NOBARRIER)])
    path = os.path.join(night, "hosts", "db-1.json")
    with open(path) as handle:
        report = json.load(handle)
    report["findings"][0]["severity"] = "dire"
    with open(path, "w") as handle:
        json.dump(report, handle)
    with schema.open_store(str(tmp_path / "history.sqlite")) as store:
        with pytest.raises(Exception, match=r"host report .*db-1\.json\b.*findings\[0\]\.severity"):
            ingest.ingest(store, night)
        assert count(store, "runs") == 0


def test_the_store_keeps_what_the_whole_host_report_says(tmp_path):
    """The store's partial decoder against the contract's whole one, on a real run: the same
    evidence keys (hashed from the report's bytes), superblocks, kernels and counts."""
    night, _ = reported_run(tmp_path, "night-1", [("db-1", NOBARRIER), ("web-1", CLEAN), ("gone", None)])
    run = ingest.read_run(night)
    for row, findings in run["hosts"]:
        report = msgspec.convert(load_host_report(os.path.join(night, "hosts", row[0] + ".json")),
                                 type=contract.HostReport)  # either schema version, in full
        assert [f[-1] for f in findings] == [ingest.evidence_key(f.evidence) for f in report.findings]
        assert all(f[-1] for f in findings) and row[3:6] == (
            (report.kernel.release, report.kernel.upstream, report.kernel.vendor) if report.kernel else (None,) * 3)
        superblocks = dict((fs.mountpoint, fs.superblock) for fs in report.filesystems or [])
        for host, mountpoint, _device, text in run["filesystems"]:
            if host == row[0]:
                assert json.loads(text) == msgspec.to_builtins(superblocks[mountpoint])
    assert len(run["hosts"]) == 3 and len(run["filesystems"]) == 2  # db-1 and web-1 each have findings
