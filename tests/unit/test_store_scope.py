"""The results store, in SQLite and in a real PostgreSQL server, on run folders made by the real
report step: the run's scope (the facts play's hosts pattern and --limit), so that the nightly
diff from the store compares a night with the last night of the same scope; summary.md's finding
groups with their open-since and trend; each host's image; the bulk insert's values."""

import datetime
import json
import os
import re

import pytest

from ext4audit import store as store_pkg
from ext4audit.formats import markdown
from ext4audit.report import finding_groups
from ext4audit.report import reports
from ext4audit.store import history, ingest, schema
from test_store import CLEAN, NIGHTS, NOBARRIER, cli, reported_run, store_url  # noqa: F401  (store_url: the fixture)
from test_html import Page
from test_summary_md import host_reports, real_run, ten_thousand  # noqa: F401  (real_run: the fixture)


def night(base, name, hosts, store, scope_hosts, scope_limit=""):
    """A report step as audit.yml runs it: fail_on_new from the store, the run's scope given."""
    run_dir = os.path.join(str(base), "reports", name)
    os.makedirs(os.path.join(run_dir, "facts"))
    for index, (host, tree) in enumerate(hosts):
        with open(os.path.join(run_dir, "facts", "%d.json" % index), "w") as handle:
            json.dump({"host": host, "groups": [], "status": "audited",
                       "facts": dict(tree, schema="ext4-fleet-audit/facts/v1")}, handle)
    code, out, err = cli("report", run_dir, "--store", store, "--fail-on-new", "true", "--formats", "markdown,html",
                         "--scope-hosts", scope_hosts, "--scope-limit", scope_limit)
    assert code in (0, 1), err
    with open(os.path.join(run_dir, "summary.json")) as handle:
        return code, json.load(handle)["baseline"], run_dir


def test_the_store_diff_compares_nights_of_the_same_scope(tmp_path, store_url):  # noqa: F811
    """Whole nights and --limit web nights in turn: each compares with the last of its own scope."""
    whole = [("db-1", NOBARRIER), ("web-1", CLEAN)]
    code, diff, _ = night(tmp_path, "night-1", whole, store_url, "all")
    assert code == 1 and diff["run_id"].startswith("(none")  # nothing before: every finding new
    code, diff, _ = night(tmp_path, "night-2", [("web-1", CLEAN)], store_url, "all", "web")
    assert code == 0 and diff["run_id"].startswith("(none")  # no web night before; not the whole one
    # the whole night again: compared with night-1, not with the web night (db-1 would be "added")
    code, diff, _ = night(tmp_path, "night-3", whole, store_url, "all")
    assert (code, diff["run_id"], diff["new"], diff["hosts_added"]) == (0, "night-1", [], [])
    # web's own night: web-1's new finding is new since night-2, and db-1 is not "removed"
    code, diff, _ = night(tmp_path, "night-4", [("web-1", NOBARRIER)], store_url, "web")
    assert (code, diff["run_id"], diff["hosts_removed"]) == (1, "night-2", [])
    assert set(e["rule"] for e in diff["new"]) >= {"EXT4_NOBARRIER"}
    code, diff, night5 = night(tmp_path, "night-5", whole, store_url, "*", "all")
    assert (code, diff["run_id"], diff["new"]) == (0, "night-3", [])
    # the gate re-evaluating night-5 takes the scope recorded with it: night-3 again, not night-4
    code, out, err = cli("gate", night5, "--fail-on-new", "true", "--store", store_url)
    assert code == 0, out + err
    with schema.open_store(store_url) as store:
        assert [(r["run_id"], r["scope"]) for r in history.runs(store)] == [
            ("night-5", "all"), ("night-4", "web"), ("night-3", "all"), ("night-2", "web"), ("night-1", "all")]


def test_a_store_of_runs_without_a_scope_is_still_compared(tmp_path, store_url):  # noqa: F811
    """The first night after an upgrade compares with the last night recorded without a scope;
    a report without one (run by hand) compares with the last night of any scope, as before."""
    whole = [("db-1", NOBARRIER), ("web-1", CLEAN)]
    code, diff, _ = night(tmp_path, "night-1", whole, store_url, "")
    assert code == 1 and diff["run_id"].startswith("(none")
    code, diff, _ = night(tmp_path, "night-2", whole, store_url, "all")
    assert (code, diff["run_id"]) == (0, "night-1")
    code, diff, _ = night(tmp_path, "night-3", [("web-1", CLEAN)], store_url, "", "")
    assert (code, diff["run_id"]) == (0, "night-2")


@pytest.mark.parametrize("hosts, limit, scope", [
    ("all", "", "all"), ("*", "", "all"), ("all", "web", "web"), ("web", "", "web"), ("web", "all", "web"),
    ("web:db", "", "db,web"), ("db,web,db", "", "db,web"), ("db:web", "web,db", "db,web"),
    ("all", "!web1:web:&prod", "web,&prod,!web1"), ("all", " web , &prod ", "web,&prod"),
    ("web", "db", "web --limit db"), ("web[1:3]:db", "", "db,web[1:3]"), ("fe80::1", "", "fe80::1"),
])
def test_a_selection_written_two_ways_is_one_scope(hosts, limit, scope):
    assert store_pkg.scope(hosts, limit) == scope


def summary_rows(run_dir, rule):
    """summary.md's rows of the finding groups of `rule`, as lists of cells."""
    with open(os.path.join(run_dir, "summary.md"), encoding="utf-8") as handle:
        table = handle.read().split("### Findings by group")[1].split("###")[0]
    return [[cell.strip() for cell in line.strip("|").split("|")] for line in table.splitlines()
            if line.startswith("| ") and "| %s |" % rule.replace("_", "\\_") in line]


def html_rows(run_dir, rule):
    """report.html's rows of the finding groups of `rule` (the table's head first), as lists of
    cells' text, and the trend cells' titles, as a browser's parser reads the page."""
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as handle:
        page = handle.read()
    table = page[page.index('<table id="group-table"'):]
    parsed = Page(table[:table.index("</table>") + 8])
    titles = [a["title"] for tag, a in parsed.tags if tag == "td" and a.get("class") == "trend"]
    return [parsed.rows[0]] + [row for row in parsed.rows[1:] if row[1].startswith(rule)], titles  # then its marks


def test_summary_md_and_report_html_show_each_group_open_since_and_its_trend(tmp_path, store_url):  # noqa: F811
    """Whole nights, a --limit web night between them: a group's trend and open-since read the
    whole nights only, the stretch broken by the clean night; report.html shows summary.md's."""
    script = [("all", "", [("db-1", NOBARRIER), ("web-1", CLEAN)]), ("all", "web", [("web-1", NOBARRIER)]),
              ("all", "", [("db-1", CLEAN), ("web-1", CLEAN)]), ("all", "", [("db-1", NOBARRIER), ("web-1", NOBARRIER)]),
              ("all", "", [("db-1", NOBARRIER), ("web-1", NOBARRIER)])]
    stamps = ["2026-11-0%dT03:00:00Z" % day for day in range(1, 6)]
    for number, (hosts, limit, fleet) in enumerate(script):
        run_dir = night(tmp_path, "night-%d" % (number + 1), fleet, store_url, hosts, limit)[2]
        with schema.open_store(store_url) as store, store.transaction():  # as if it ran that night
            store.execute("UPDATE runs SET generated_at = ? WHERE run_id = ?", (stamps[number], "night-%d" % (number + 1)))
        if number == 1:
            assert len(summary_rows(run_dir, "EXT4_NOBARRIER")[0]) == 5  # no web night before it: no history
            assert len(html_rows(run_dir, "EXT4_NOBARRIER")[0][1]) == 6 and "Open since" not in open(
                os.path.join(run_dir, "report.html"), encoding="utf-8").read()
    # severity, rule, hosts, finding, on, open since, trend (nights 1, 3, 4; not the web night)
    row = summary_rows(run_dir, "EXT4_NOBARRIER")[0]
    assert (row[0], row[2], row[-2], row[-1]) == ("high", "2", "2026-11-04", "1 0 2")
    # severity, rule, finding, hosts, findings, first hosts, open since, trend
    rows, titles = html_rows(run_dir, "EXT4_NOBARRIER")
    assert rows[0][-2:] == ["open since", "trend"]
    assert (rows[1][0], rows[1][3], rows[1][-2], rows[1][-1]) == ("high", "2", "2026-11-04", "1 0 2")
    assert titles[0] == "2026-11-01: 1; 2026-11-03: 0; 2026-11-04: 2"
    with open(os.path.join(run_dir, "report.html"), encoding="utf-8") as handle:
        assert store_history_note_of(run_dir, store_url) in Page(handle.read()).text
    assert cli("report", run_dir, "--store", "off", "--formats", "markdown,html")[0] in (0, 1)
    with open(os.path.join(run_dir, "summary.md"), encoding="utf-8") as handle:
        assert "open since" not in handle.read()  # no store: no history columns
    assert html_rows(run_dir, "EXT4_NOBARRIER")[0][0][-1] == "first hosts"


def store_history_note_of(run_dir, store_url):  # noqa: F811
    """The note above the groups, as the pages print it for the nights before run_dir's."""
    with schema.open_store(store_url) as store:
        data = history.rule_nights(store, "all")
    data["nights"] = [n for n in data["nights"] if n[0] != os.path.basename(run_dir)]
    return history.group_history_note(data)


def test_group_history_waived_groups_new_rules_and_a_store_without_nights():
    groups = finding_groups.FindingGroups(False, 5)
    waiver = {"justification": "ok", "approver": "a", "expires": "2099-01-01", "status": "active"}
    for host, findings in (("h1", [("R_OLD", False), ("R_NEW", False)]), ("h2", [("R_OLD", True)])):
        groups.add_host({"host": host, "findings": [
            {"rule": rule, "severity": "high", "message": "m", "waived": waived, "waiver": waiver if waived else None}
            for rule, waived in findings]})
    data = {"nights": [("n%d" % n, "2026-11-%02dT03:00:00Z" % n) for n in range(1, 10)],
            "rules": {"R_OLD": dict(("n%d" % n, (n % 5, 1 if n > 6 else 0)) for n in range(1, 10))}}
    past = history.group_history(data, groups)
    by_rule = dict(((key[0], finding_groups.is_waived(key)), value) for key, value in past.items())
    assert by_rule["R_OLD", False] == {"open_since": "2026-11-06T03:00:00Z", "trend": [
        ("2026-11-%02dT03:00:00Z" % n, n % 5) for n in range(3, 10)]}
    assert by_rule["R_OLD", True]["open_since"] == "2026-11-07T03:00:00Z"
    assert by_rule["R_NEW", False]["open_since"] is None and [c for _, c in by_rule["R_NEW", False]["trend"]] == [0] * 7
    assert all(v == {"open_since": None, "trend": []} for v in history.group_history(
        {"nights": [], "rules": {}}, groups).values())


def test_summary_md_with_a_month_of_history_at_10000_hosts_stays_within_its_budget(real_run):
    """Thousands of groups, each with its open-since and a 7-night trend: still within BUDGET."""
    _, templates = host_reports(real_run)
    fleet = ten_thousand(templates)
    summary = reports.summarize(fleet, "night", "high", True, datetime.datetime(2026, 11, 29, 3, 0))
    rules = set(f["rule"] for report in fleet for f in report["findings"])
    data = {"nights": [("n%d" % n, "2026-10-%02dT03:00:00Z" % n) for n in range(1, 31)],
            "rules": dict((rule, dict(("n%d" % n, (100000 + n, 1000)) for n in range(1, 31))) for rule in rules)}
    text = markdown.document(summary, fleet, None, data)
    assert len(text.encode("utf-8")) <= markdown.BUDGET + 4096  # the cut notes come on top
    assert "| 2026-10-01 | 100,024 100,025 100,026 100,027 100,028 100,029 100,030 |" in text
    assert re.search(r"^\.\.\. [\d,]+ more group\(s\)", text, re.M)


def test_bulk_insert_keeps_every_value_as_given(store_url):  # noqa: F811
    """Store.insert (PostgreSQL: COPY) round-trips the characters that end a COPY value or row, a
    backslash, the text \\N, NULL, non-ASCII text and integers: a guard for a faster bulk path."""
    values = ["a\tb", "line\nbreak\r", "back\\slash", "\\N", "", None, "h\u00f6st-\u65e5\u672c", "<b>|x</b>"]
    with schema.open_store(store_url) as store, store.transaction():
        store.execute("CREATE TABLE t (n INTEGER, v TEXT)")
        store.insert("t", ("n", "v"), ((number, value) for number, value in enumerate(values)))
        assert store.rows("SELECT n, v FROM t ORDER BY n") == list(enumerate(values))


def on_image(tree, **os_release):
    """Facts of a host whose /etc/os-release says os_release (ext4_facts keeps it with the kernel)."""
    return dict(tree, kernel=dict(tree["kernel"], os_release=os_release))


def test_how_many_hosts_still_run_an_image(tmp_path, store_url):  # noqa: F811
    """Hosts move from Debian 11 to 12 over three nights; a host built from a named image says so."""
    old = {"ID": "debian", "VERSION_ID": "11", "PRETTY_NAME": "Debian GNU/Linux 11 (bullseye)"}
    new = {"ID": "debian", "VERSION_ID": "12", "PRETTY_NAME": "Debian GNU/Linux 12 (bookworm)"}
    golden = dict(new, IMAGE_ID="golden-db", IMAGE_VERSION="2026.03")
    script = [[old, old], [new, old], [new, new]]
    with schema.open_store(store_url) as store:
        for number, releases in enumerate(script):
            fleet = [("web-%d" % n, on_image(CLEAN, **release)) for n, release in enumerate(releases)]
            fleet += [("db-1", on_image(NOBARRIER, **golden)), ("gone", None)]
            run_dir, _ = reported_run(tmp_path, "night-%d" % number, fleet, night="2026-11-0%dT03:00:00Z" % (number + 1))
            ingest.ingest(store, run_dir)
        assert [(n["generated_at"][:10], n["hosts"]) for n in history.images(store, old["PRETTY_NAME"])] == [
            ("2026-11-01", 2), ("2026-11-02", 1), ("2026-11-03", 0)]
        assert [(n["image"], n["hosts"]) for n in history.images(store) if n["run_id"] == "night-1"] == [
            ("", 1), ("Debian GNU/Linux 11 (bullseye)", 1), ("Debian GNU/Linux 12 (bookworm)", 1),
            ("golden-db 2026.03", 1)]
        assert store.one("SELECT image FROM hosts WHERE run_id = 'night-2' AND host = 'web-0'")[0] == new["PRETTY_NAME"]
    code, out, _ = cli("history", "--store", store_url, "images", "--image", "golden-db 2026.03", "--nights", "2")
    assert code == 0 and [line.split()[-3:] for line in out.splitlines()[1:]] == [["1", "golden-db", "2026.03"]] * 2


def test_a_store_of_schema_version_3_gets_images_unknown(tmp_path, store_url):  # noqa: F811
    """The migration to version 4: the hosts recorded before have no image (counted as unknown)."""
    run = ingest.read_run(reported_run(tmp_path, "old", [("db-1", CLEAN), ("web-1", CLEAN)])[0])
    store = store_pkg.backends.connect(store_url)
    with store:
        schema.migrate(store, target=3)
        with store.transaction():  # a night as version 3 recorded it: hosts without an image
            store.execute("INSERT INTO runs (run_id, generated_at, ingested_at, verdict, complete, hosts, hosts_audited, "
                          "findings, waived, content_hash) VALUES ('old', '2026-10-01T03:00:00Z', 'x', 'pass', 1, 2, 2, "
                          "0, 0, '')")
            store.insert("hosts", ingest.HOST_COLUMNS[:-1], (("old", "") + row[:-1] for row, _ in run["hosts"]))
    with schema.open_store(store_url) as store:
        assert history.images(store) == [{"run_id": "old", "generated_at": "2026-10-01T03:00:00Z", "image": "",
                                          "hosts": 2}]


def test_history_trend_images_and_regressed_count_nights_of_one_scope(tmp_path, store_url):  # noqa: F811
    """Whole nights with a --limit web night between them: `history trend`, `images` and
    `regressed` count the nights of the last night's scope (or of the one asked for), as the
    nightly diff compares them, never the web night among the whole fleet's."""
    script = [("", [("db-1", NOBARRIER), ("web-1", CLEAN)]), ("web", [("web-1", CLEAN)]),
              ("", [("db-1", NOBARRIER), ("web-1", NOBARRIER)])]
    for number, (limit, fleet) in enumerate(script):
        run_dir, _ = reported_run(tmp_path, "night-%d" % (number + 1), fleet, night=NIGHTS[number])
        code, _, err = cli("history", "--store", store_url, "ingest", run_dir, "--scope-hosts", "all",
                           "--scope-limit", limit)
        assert code == 0, err

    def ask(*question):
        code, out, err = cli("history", "--store", store_url, "--json", *question)
        assert code == 0, err
        return json.loads(out)

    assert [n["run_id"] for n in ask("trend")] == ["night-1", "night-3"]
    assert [(n["run_id"], n["hosts"]) for n in ask("trend", "--rule", "EXT4_NOBARRIER")] == [
        ("night-1", 1), ("night-3", 2)]
    assert [n["run_id"] for n in ask("trend", "--scope-limit", "web")] == ["night-2"]
    assert sorted(set(n["run_id"] for n in ask("images"))) == ["night-1", "night-3"]
    assert [(n["run_id"], n["hosts"]) for n in ask("images", "--scope-hosts", "web")] == [("night-2", 1)]
    # since night-2's date: compared with night-1 (db-1 had its finding then), not the web night
    assert [(h["host"], h["since_run"]) for h in ask("regressed", "--since", NIGHTS[1][:10])] == [
        ("web-1", "night-1")]
    assert ask("regressed", "--since", NIGHTS[1][:10], "--scope-limit", "web") == []
