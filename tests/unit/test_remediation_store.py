"""The remediation's input from the results store: a run folder made by the real report step,
recorded with `ext4audit history ingest`, gives from the store the same plan as from the folder,
host by host (superblock-dependent fixes included); the night is the latest complete one unless
named, and a bad store or night is a clear error."""

import json
import os

import pytest

from conftest import fixture_text
from ext4audit.parsers.ext4_parsers.superblock import parse_dumpe2fs
from test_rules import facts, with_options
from test_store import cli, reported_run, store_url  # noqa: F401  (the store fixture, SQLite and PostgreSQL)

SMALL_SB = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-small-journal-inode128.txt"))
# mke2fs -t ext3 -I 128: no flex_bg, so tune2fs -I can grow its inodes (the fixture's are 256 bytes)
EXT3_SB = dict(parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-ext3.txt")), inode_size=128)
HOSTS = [("db-1", facts(options=with_options("nobarrier", "commit=120", "data=writeback"), sb=SMALL_SB)),
         ("db-2", facts(options=with_options("nobarrier", "discard"), sb=EXT3_SB)),
         ("web-1", facts(options=with_options("nobarrier"))),
         ("down-1", None)]
WAIVERS = [{"rule": "EXT4_NOBARRIER", "hosts": ["web-1"], "justification": "battery-backed cache",
            "approver": "test", "expires": "2099-01-01"}]
SELECTIONS = [("[]", "low"), ("[]", "medium"), ('["superblock", "EXT4_NOBARRIER"]', "critical")]


def plan(host, source, rules="[]", min_severity="medium"):
    code, out, err = cli("remediate-plan", host, *source, "--rules", rules, "--min-severity", min_severity)
    assert code == 0, err
    return json.loads(out)


@pytest.fixture(name="night")
def recorded_night(tmp_path):
    """A night's run folder and the SQLite store it was recorded into by `history ingest`."""
    run_dir, _ = reported_run(tmp_path, "night-1", HOSTS, waivers=WAIVERS, night="2026-11-27T03:00:00Z")
    store = str(tmp_path / "reports" / "history.sqlite")
    code, out, err = cli("history", "ingest", run_dir, "--store", store)
    assert code == 0, err
    return run_dir, store


def test_the_store_gives_the_folders_plan_for_the_same_night(night):
    run_dir, store = night
    planned = set()
    for host, tree in HOSTS[:3]:
        for rules, min_severity in SELECTIONS:
            from_folder = plan(host, ["--run-dir", run_dir], rules, min_severity)
            assert plan(host, ["--store", store], rules, min_severity) == from_folder, (host, rules, min_severity)
            planned |= set((host, item["rule"], item["class"], item["choice"]) for item in from_folder)
    # the superblock's facts reach the plan from the store: the journal's size, the inode fix by features
    assert ("db-1", "EXT4_SMALL_JOURNAL", "offline", "journal_default_size") in planned
    assert ("db-1", "EXT4_INODE_128", "rebuild", "mkfs_inode_size") in planned
    assert ("db-2", "EXT4_INODE_128", "offline", "tune2fs_inode_size") in planned
    assert not [item for item in planned if item[:2] == ("web-1", "EXT4_NOBARRIER")]  # waived
    journal = [i for i in plan("db-1", ["--store", store], min_severity="low") if i["rule"] == "EXT4_SMALL_JOURNAL"]
    assert journal[0]["commands"][-1][-2].startswith("size=") and journal[0]["commands"][-1][-2] != "size="
    assert plan("down-1", ["--store", store]) == plan("down-1", ["--run-dir", run_dir]) == []


def test_the_same_plan_from_either_database(tmp_path, store_url):
    """In PostgreSQL as in SQLite (the password from PGPASSWORD, never in the URL)."""
    run_dir, _ = reported_run(tmp_path, "night-1", HOSTS[:1], night="2026-11-27T03:00:00Z")
    assert cli("history", "ingest", run_dir, "--store", store_url)[0] == 0
    assert plan("db-1", ["--store", store_url], min_severity="low") == plan("db-1", ["--run-dir", run_dir],
                                                                            min_severity="low") != []


def test_the_night_is_the_latest_complete_one_unless_named(night, tmp_path):
    run_dir, store = night
    code, out, err = cli("remediate-night", "--store", store)
    assert (code, out.strip()) == (0, os.path.basename(run_dir)), err
    later, _ = reported_run(tmp_path, "night-2", [("db-1", facts())], night="2026-11-28T03:00:00Z")
    assert cli("history", "ingest", later, "--store", store)[0] == 0
    assert cli("remediate-night", "--store", store)[1].strip() == "night-2"
    assert plan("db-1", ["--store", store]) == []  # the latest night: db-1 was fixed
    assert plan("db-1", ["--store", store, "--store-run", "night-1"]) == plan("db-1", ["--run-dir", run_dir])
    unfinished = tmp_path / "reports" / "night-3"
    (unfinished / "hosts").mkdir(parents=True)
    assert cli("history", "ingest", str(unfinished), "--store", store)[0] == 0
    assert cli("remediate-night", "--store", store)[1].strip() == "night-2"  # never an incomplete night


@pytest.mark.parametrize("args,error", [
    (["--store", "{tmp}/none.sqlite"], "ext4_remediate_store: {tmp}/none.sqlite is not a file"),
    (["--store", "{store}", "--store-run", "night-9"], "ext4_remediate_store_run: night-9 is no run in {store}"),
])
def test_a_bad_store_or_night_is_a_clear_error(night, tmp_path, args, error):
    _, store = night
    fill = {"tmp": str(tmp_path), "store": store}
    code, out, err = cli("remediate-night", *[a.format(**fill) for a in args])
    assert code == 2 and error.format(**fill) in err and not out
    code, out, err = cli("remediate-plan", "db-1", *[a.format(**fill) for a in args])
    assert code == 2 and error.format(**fill) in err and not os.path.exists(str(tmp_path / "none.sqlite"))


def test_a_host_the_night_did_not_list(night):
    _, store = night
    code, _, err = cli("remediate-plan", "db-9", "--store", store)
    assert code == 2 and "night-1: no host db-9" in err
