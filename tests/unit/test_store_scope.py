"""The run's scope in the results store (the facts play's hosts pattern and --limit): the nightly
diff from the store compares a night with the last night of the same scope, in SQLite and in a real
PostgreSQL server, on run folders made by the real report step."""

import json
import os

import pytest

from ext4audit import store as store_pkg
from ext4audit.store import history, schema
from test_store import CLEAN, NOBARRIER, cli, store_url  # noqa: F401  (store_url: the fixture)


def night(base, name, hosts, store, scope_hosts, scope_limit=""):
    """A report step as audit.yml runs it: fail_on_new from the store, the run's scope given."""
    run_dir = os.path.join(str(base), "reports", name)
    os.makedirs(os.path.join(run_dir, "facts"))
    for index, (host, tree) in enumerate(hosts):
        with open(os.path.join(run_dir, "facts", "%d.json" % index), "w") as handle:
            json.dump({"host": host, "groups": [], "status": "audited",
                       "facts": dict(tree, schema="ext4-fleet-audit/facts/v1")}, handle)
    code, out, err = cli("report", run_dir, "--store", store, "--fail-on-new", "true", "--formats", "markdown",
                         "--scope-hosts", scope_hosts, "--scope-limit", scope_limit)
    assert code in (0, 1), err
    with open(os.path.join(run_dir, "summary.json")) as handle:
        return code, json.load(handle)["baseline"]


def test_the_store_diff_compares_nights_of_the_same_scope(tmp_path, store_url):  # noqa: F811
    """Whole nights and --limit web nights in turn: each compares with the last of its own scope."""
    whole = [("db-1", NOBARRIER), ("web-1", CLEAN)]
    code, diff = night(tmp_path, "night-1", whole, store_url, "all")
    assert code == 1 and diff["run_id"].startswith("(none")  # nothing before: every finding new
    code, diff = night(tmp_path, "night-2", [("web-1", CLEAN)], store_url, "all", "web")
    assert code == 0 and diff["run_id"].startswith("(none")  # no web night before; not the whole one
    # the whole night again: compared with night-1, not with the web night (db-1 would be "added")
    code, diff = night(tmp_path, "night-3", whole, store_url, "all")
    assert (code, diff["run_id"], diff["new"], diff["hosts_added"]) == (0, "night-1", [], [])
    # web's own night: web-1's new finding is new since night-2, and db-1 is not "removed"
    code, diff = night(tmp_path, "night-4", [("web-1", NOBARRIER)], store_url, "web")
    assert (code, diff["run_id"], diff["hosts_removed"]) == (1, "night-2", [])
    assert set(e["rule"] for e in diff["new"]) >= {"EXT4_NOBARRIER"}
    code, diff = night(tmp_path, "night-5", whole, store_url, "*", "all")
    assert (code, diff["run_id"], diff["new"]) == (0, "night-3", [])
    with schema.open_store(store_url) as store:
        assert [(r["run_id"], r["scope"]) for r in history.runs(store)] == [
            ("night-5", "all"), ("night-4", "web"), ("night-3", "all"), ("night-2", "web"), ("night-1", "all")]


def test_a_store_of_runs_without_a_scope_is_still_compared(tmp_path, store_url):  # noqa: F811
    """The first night after an upgrade compares with the last night recorded without a scope;
    a report without one (run by hand) compares with the last night of any scope, as before."""
    whole = [("db-1", NOBARRIER), ("web-1", CLEAN)]
    code, diff = night(tmp_path, "night-1", whole, store_url, "")
    assert code == 1 and diff["run_id"].startswith("(none")
    code, diff = night(tmp_path, "night-2", whole, store_url, "all")
    assert (code, diff["run_id"]) == (0, "night-1")
    code, diff = night(tmp_path, "night-3", [("web-1", CLEAN)], store_url, "", "")
    assert (code, diff["run_id"]) == (0, "night-2")


@pytest.mark.parametrize("hosts, limit, scope", [
    ("all", "", "all"), ("*", "", "all"), ("all", "web", "web"), ("web", "", "web"), ("web", "all", "web"),
    ("web:db", "", "db,web"), ("db,web,db", "", "db,web"), ("db:web", "web,db", "db,web"),
    ("all", "!web1:web:&prod", "web,&prod,!web1"), ("all", " web , &prod ", "web,&prod"),
    ("web", "db", "web --limit db"), ("web[1:3]:db", "", "db,web[1:3]"), ("fe80::1", "", "fe80::1"),
])
def test_a_selection_written_two_ways_is_one_scope(hosts, limit, scope):
    assert store_pkg.scope(hosts, limit) == scope
