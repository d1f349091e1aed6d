"""The kernel CNA records: the generator (tools/kernel_records.py), the committed data file it
made (rules/kernel_cna_records.json) and the matching (ext4audit/rules/kernel_records.py).

Fixtures: tests/fixtures/kernel-cna (README there). The full selection, when CI has it beside the
clone: ../shared/data/kernel-cna-ext4-jbd2. Expected fix releases below were read from the
records' own `affected` entries and written here by hand, not computed by the code under test.
"""

import importlib.util
import json
import os
import re
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, FIXTURES
from ext4audit.rules import kernel_records as kr
from ext4audit.parsers import kernel_version as kv

TOOL = os.path.join(ROOT, "tools", "kernel_records.py")
DATA_FILE = os.path.join(ROOT, "rules", "kernel_cna_records.json")
REVIEWED = os.path.join(ROOT, "rules", "kernel_record_classes.yml")
CNA_FIXTURES = os.path.join(FIXTURES, "kernel-cna")
SHARED = os.path.join(os.path.dirname(ROOT), "shared", "data", "kernel-cna-ext4-jbd2")
COMMIT = "d9dda40c8f21126303839427ebc8652167302488"

_spec = importlib.util.spec_from_file_location("kernel_records_tool", TOOL)
gen = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(gen)

SELECTED = {
    "CVE-2021-46945", "CVE-2021-47116", "CVE-2021-47119", "CVE-2021-47342", "CVE-2021-47406",
    "CVE-2022-49409", "CVE-2022-49708", "CVE-2022-50286", "CVE-2022-50436", "CVE-2022-50546",
    "CVE-2022-50782", "CVE-2023-53149", "CVE-2023-53270", "CVE-2023-53526", "CVE-2023-53626",
    "CVE-2023-54153", "CVE-2024-26601", "CVE-2024-26774", "CVE-2024-35807", "CVE-2024-40998",
    "CVE-2024-43828", "CVE-2024-49960", "CVE-2025-22120", "CVE-2025-39782", "CVE-2025-40190",
    "CVE-2025-68820", "CVE-2026-31446", "CVE-2026-43067", "CVE-2026-45892", "CVE-2026-46061",
    "CVE-2026-74358",
}
NOT_SELECTED = {"CVE-2024-41013", "CVE-2021-47256"}  # fs/xfs; "ext4" only in the description


@pytest.fixture(scope="module")
def data():
    return kr.load()


def run_tool(*args):
    return subprocess.run([sys.executable, TOOL] + list(args), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, universal_newlines=True)


def records_of(path):
    with open(path) as handle:
        return json.load(handle)["records"]


def reviewed_table():
    with open(REVIEWED) as handle:
        return yaml.safe_load(handle)


def reviewed_subset(tmp_path, ids=SELECTED, edit=None):
    """The reviewed table reduced to ids (the fixtures' records), after edit(records); its path."""
    doc = reviewed_table()
    doc["records"] = dict((cve, entry) for cve, entry in doc["records"].items() if cve in ids)
    if edit:
        edit(doc["records"])
    path = tmp_path / "classes.yml"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


# --- the generator and the committed data file ---------------------------------------------

def test_fixtures_give_the_committed_entries_and_nothing_else(tmp_path):
    out = tmp_path / "records.json"
    result = run_tool(CNA_FIXTURES, "-o", str(out), "--reviewed", reviewed_subset(tmp_path))
    assert result.returncode == 0, result.stderr
    generated = {record["id"]: record for record in records_of(str(out))}
    assert set(generated) == SELECTED  # the xfs record and the description-only one are left out
    committed = {record["id"]: record for record in records_of(DATA_FILE)}
    assert {cve: committed[cve] for cve in SELECTED} == generated
    # A folder that is not a git checkout records no commit.
    with open(str(out)) as handle:
        assert json.load(handle)["source"]["commit"] is None


def test_same_checkout_same_bytes_from_work_tree_and_bare_git(tmp_path):
    tree = tmp_path / "vulns"
    shutil.copytree(CNA_FIXTURES, str(tree))
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@example.net",
               GIT_COMMITTER_NAME="t", GIT_COMMITTER_EMAIL="t@example.net",
               GIT_AUTHOR_DATE="2026-08-21T18:32:04+02:00", GIT_COMMITTER_DATE="2026-08-21T18:32:04+02:00")
    for argv in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "records"]):
        subprocess.run(["git", "-C", str(tree)] + argv, check=True, env=env)
    head = subprocess.run(["git", "-C", str(tree), "rev-parse", "HEAD"], check=True,
                          stdout=subprocess.PIPE, universal_newlines=True).stdout.strip()
    outputs, reviewed = [], reviewed_subset(tmp_path)
    for source, extra in ((str(tree), []), (str(tree), []), (str(tree / ".git"), ["--rev", head])):
        out = tmp_path / ("out%d.json" % len(outputs))
        result = run_tool(source, "-o", str(out), "--reviewed", reviewed, *extra)
        assert result.returncode == 0, result.stderr
        outputs.append(out.read_bytes())
    assert outputs[0] == outputs[1] == outputs[2]
    doc = json.loads(outputs[0].decode())
    assert doc["source"]["commit"] == head
    assert doc["source"]["commit_date"] == "2026-08-21T18:32:04+02:00"
    assert {record["id"] for record in doc["records"]} == SELECTED


def test_committed_file_states_its_source_and_its_reviewed_classes():
    with open(DATA_FILE) as handle:
        doc = json.load(handle)
    assert doc["source"] == {"repository": "https://github.com/thefossguy-ciq/kernel-security-vulns",
                             "commit": COMMIT, "commit_date": "2026-08-21T18:32:04+02:00"}
    assert len(doc["records"]) == 157
    # Every record has a reviewed class and reason, and the data file carries exactly those.
    table = reviewed_table()["records"]
    assert sorted(table) == sorted(record["id"] for record in doc["records"])
    for record in doc["records"]:
        entry = table[record["id"]]
        assert entry["class"] in doc["classes"] and entry["reason"].strip(), record["id"]
        assert (record["class"], record["class_reason"], record["needs"]) == \
            (entry["class"], entry["reason"], entry.get("needs")), record["id"]


# Records the review moved (class of the keyword rules before -> class from the record's text).
MOVED = [
    ("CVE-2021-47406", "hang/deadlock"),   # was data corruption: an infinite loop in fc replay
    ("CVE-2023-53270", "crash/BUG"),       # was data corruption: i_disksize > i_size gives a WARNING
    ("CVE-2023-53101", "crash/BUG"),       # was data corruption: a warning on a corrupted image
    ("CVE-2026-31452", "crash/BUG"),       # was data corruption: a BUG_ON in ext4_write_inline_data
    ("CVE-2026-43068", "other"),           # was data corruption: a group already marked corrupt
    ("CVE-2026-45942", "other"),           # was data corruption: bitmap inconsistency reports
    ("CVE-2026-45912", "other"),           # was data corruption: an error in space accounting
    ("CVE-2024-50015", "data corruption"),  # was memory safety: extents beyond i_size, fsck fails
    ("CVE-2022-49414", "crash/BUG"),       # was memory safety ("KASAN" in the oops banner): BUG_ON
    ("CVE-2025-40190", "other"),           # was memory safety: an on-disk refcount underflow
    ("CVE-2021-46945", "other"),           # was crash/BUG: the fix makes errors=panic panic
    ("CVE-2022-49348", "crash/BUG"),       # was other: a crafted s_state triggers a BUG()
]


@pytest.mark.parametrize("cve, expected", MOVED)
def test_reviewed_class_of_moved_records(data, cve, expected):
    assert next(record["class"] for record in data["records"] if record["id"] == cve) == expected


def test_data_corruption_only_where_a_healthy_filesystem_loses_data(data):
    assert sorted(record["id"] for record in data["records"] if record["class"] == "data corruption") == [
        "CVE-2023-53526", "CVE-2024-26601", "CVE-2024-35807", "CVE-2024-50015", "CVE-2026-45858",
        "CVE-2026-45892", "CVE-2026-45899", "CVE-2026-45985"]


# A record whose text speaks of fast commit (its replay, its ext4_fc_/jbd2_fc_ functions, the
# ext4_ext_replay_ helpers of the replay) needs fast_commit, but for these, read one by one:
FAST_COMMIT_TEXT = re.compile(r"fast[_ -]?commit|\bfc[_ ]replay|ext4_fc_|jbd2_fc_|fc_do_one_pass|ext4_ext_replay_", re.I)
NAMES_FAST_COMMIT_BUT_NEEDS_NONE_OF_IT = {
    "CVE-2022-49348",  # a crafted superblock sets EXT4_FC_REPLAY in s_state of any filesystem
    "CVE-2022-49408",  # ext4_fc_free() frees the mount's fs_context, not fast-commit state
    "CVE-2022-50436",  # the ext4_fc_track_* change only widened a transaction: needs encryption
    "CVE-2023-53317",  # its log quotes the data=journal warning that names fast_commit
}


@pytest.mark.parametrize("folder", [CNA_FIXTURES, pytest.param(SHARED, marks=pytest.mark.skipif(
    not os.path.isdir(SHARED), reason="no ../shared/data/kernel-cna-ext4-jbd2 beside the clone"))])
def test_records_that_speak_of_fast_commit_need_it(data, folder):
    needs = dict((record["id"], record["needs"]) for record in data["records"])
    checked = 0
    for path in _record_files(folder):
        with open(path) as handle:
            doc = json.load(handle)
        if not gen.selected(doc, path):
            continue
        cna = doc["containers"]["cna"]
        text = "\n".join([cna["title"]] + [d["value"] for d in cna.get("descriptions", [])])
        speaks = bool(FAST_COMMIT_TEXT.search(text)) and doc["cveMetadata"]["cveId"] not in \
            NAMES_FAST_COMMIT_BUT_NEEDS_NONE_OF_IT
        assert speaks == (needs[doc["cveMetadata"]["cveId"]] == "fast_commit"), doc["cveMetadata"]["cveId"]
        checked += speaks
    assert checked >= (4 if folder == CNA_FIXTURES else 19)


@pytest.mark.parametrize("edit, message", [
    (lambda records: records.pop("CVE-2024-26601"),
     r"classes\.yml: CVE-2024-26601 \(.*CVE-2024-26601\.json\) has no reviewed class"),
    (lambda records: records.update({"CVE-2099-0001": {"class": "leak", "reason": "x"}}),
     r"classes\.yml: CVE-2099-0001: no such record among the source's selected ones"),
    (lambda records: records["CVE-2024-26601"].update({"class": "data loss"}),
     r"classes\.yml: records\.CVE-2024-26601\.class 'data loss' is not one of data corruption"),
    (lambda records: records["CVE-2024-26601"].update({"needs": "fc"}),
     r"classes\.yml: records\.CVE-2024-26601\.needs 'fc' is not one of bigalloc, casefold"),
    (lambda records: records["CVE-2024-26601"].pop("reason"),
     r"classes\.yml: records\.CVE-2024-26601: needs class and reason"),
    (lambda records: records["CVE-2024-26601"].update({"reason": " "}),
     r"classes\.yml: records\.CVE-2024-26601\.reason is not a sentence"),
], ids=["missing", "unknown", "bad class", "bad needs", "no reason", "empty reason"])
def test_reviewed_table_errors_name_the_file_and_the_id(tmp_path, edit, message):
    out = tmp_path / "records.json"
    result = run_tool(CNA_FIXTURES, "-o", str(out), "--reviewed", reviewed_subset(tmp_path, edit=edit))
    assert result.returncode == 1 and not out.exists()
    assert re.search(message, result.stderr), result.stderr


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="no ../shared/data/kernel-cna-ext4-jbd2 beside the clone")
def test_all_157_shared_records_give_exactly_the_committed_file():
    with open(DATA_FILE) as handle:
        committed = handle.read()
    source = json.loads(committed)["source"]
    assert gen.render(gen.collect(gen.read_tree(SHARED), gen.read_reviewed(REVIEWED)), source) == committed


def _broken_copy(tmp_path, edit):
    tree = tmp_path / "vulns"
    shutil.copytree(CNA_FIXTURES, str(tree))
    path = tree / "cve" / "published" / "2024" / "CVE-2024-26601.json"
    doc = json.loads(path.read_text())
    edit(doc)
    path.write_text(json.dumps(doc))
    return tree, path


def test_unknown_version_entry_names_file_and_field_and_leaves_output_alone(tmp_path):
    def edit(doc):
        doc["containers"]["cna"]["affected"][1]["versions"][2]["versionType"] = "rpm"
    tree, path = _broken_copy(tmp_path, edit)
    out = tmp_path / "records.json"
    out.write_text("previous\n")
    result = run_tool(str(tree), "-o", str(out), "--reviewed", reviewed_subset(tmp_path))
    assert result.returncode == 1
    assert str(path) in result.stderr and "containers.cna.affected[1].versions[2]" in result.stderr
    assert out.read_text() == "previous\n"
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".kernel_records")] == []


def test_bad_release_and_oversized_record_are_clear_errors(tmp_path):
    def edit(doc):
        doc["containers"]["cna"]["affected"][1]["versions"][2]["version"] = "5.10.x"
    tree, path = _broken_copy(tmp_path, edit)
    reviewed = reviewed_subset(tmp_path)
    result = run_tool(str(tree), "-o", str(tmp_path / "a.json"), "--reviewed", reviewed)
    assert result.returncode == 1 and "containers.cna.affected[1].versions[2].version" in result.stderr
    path.write_bytes(b" " * (gen.MAX_RECORD_BYTES + 1))
    result = run_tool(str(tree), "-o", str(tmp_path / "a.json"), "--reviewed", reviewed)
    assert result.returncode == 1 and "larger than" in result.stderr
    assert not (tmp_path / "a.json").exists()


# --- the data's model agrees with the records' own semantics -------------------------------

def _series(version):
    return ".".join(version.split(".")[:2])


def _covers(entry, version):
    """Does one CVE JSON 5 version entry cover a release (semver ranges as the CNA writes them)?"""
    start, below, upto = entry["version"], entry.get("lessThan"), entry.get("lessThanOrEqual")
    at_or_after = start == "0" or kv.compare_upstream(version, start) >= 0
    if below is not None:
        if start == "0" and below.count(".") == 2 and _series(version) != _series(below):
            # "affected 0 lessThan 5.10.246" is 5.10's range up to its fix: read literally it
            # would cover every older branch too, against the record's own 5.4 fix entry.
            return False
        return at_or_after and kv.compare_upstream(version, below) < 0
    if upto == "*":
        return at_or_after
    if upto is not None:
        return at_or_after and _series(version) == upto[:-2]
    return False  # a bare introducing version: the unaffected ranges beside it say the rest


def cve_says_affected(doc, version):
    """CVE JSON 5 semantics straight from the record: affected if any entry says so."""
    for entry in doc["containers"]["cna"]["affected"]:
        ranges = [v for v in entry["versions"] if v.get("versionType") != "git"]
        if entry["defaultStatus"] == "affected":
            if not any(v["status"] == "unaffected" and _covers(v, version) for v in ranges):
                return True
        elif any(v["status"] == "affected" and _covers(v, version) for v in ranges):
            return True
    return False


def _probe_versions(doc):
    """Every release a record names, one patch level either side, and each series' ends."""
    series = ["3.%d" % n for n in range(20)] + ["4.%d" % n for n in range(21)] + \
        ["5.%d" % n for n in range(20)] + ["6.%d" % n for n in range(20)] + ["7.%d" % n for n in range(3)]
    versions = {s + ".0" for s in series} | {s + ".999" for s in series}
    for entry in doc["containers"]["cna"]["affected"]:
        for v in entry["versions"]:
            for value in (v.get("version"), v.get("lessThan")):
                if v.get("versionType") == "git" or value in (None, "0") or value.startswith("2."):
                    continue
                parts = [int(p) for p in value.split(".")] + [0]
                major, minor, patch = parts[:3]
                versions |= {"%d.%d.%d" % (major, minor, p) for p in (patch - 1, patch, patch + 1) if p >= 0}
    return sorted(versions, key=lambda v: [int(p) for p in v.split(".")])


def _record_files(folder):
    return sorted(os.path.join(root, name) for root, _, names in os.walk(folder)
                  for name in names if name.endswith(".json"))


def _check_model(paths):
    checked = 0
    for path in paths:
        with open(path) as handle:
            doc = json.load(handle)
        if not gen.selected(doc, path):
            continue
        record = gen.summarise(doc, path)
        for version in _probe_versions(doc):
            assert (kr.judge(record, version) is not None) == cve_says_affected(doc, version), \
                (record["id"], version)
            checked += 1
    return checked


def test_model_matches_record_semantics_on_fixtures():
    assert _check_model(_record_files(CNA_FIXTURES)) > 3000


@pytest.mark.skipif(not os.path.isdir(SHARED), reason="no ../shared/data/kernel-cna-ext4-jbd2 beside the clone")
def test_model_matches_record_semantics_on_all_157():
    assert _check_model(_record_files(SHARED)) > 15000


# --- matching a host's kernel ---------------------------------------------------------------

def item_for(data, cve, kernel):
    items = kr.open_records(data, kernel)
    found = [item for item in items if item["id"] == cve]
    return found[0] if found else None


def mainline(version):
    return kv.identify(version)


# (record, kernel just before the fix in a branch, the branch's fix release): read from each
# record's `lessThanOrEqual: "x.y.*"` entries (or semver `affected` range ends).
FIX_BOUNDARIES = [
    ("CVE-2021-46945", "5.11.19", "5.11.20"), ("CVE-2021-46945", "5.12.2", "5.12.3"),
    ("CVE-2021-47116", "5.10.42", "5.10.43"), ("CVE-2021-47116", "5.12.9", "5.12.10"),
    ("CVE-2021-47119", "5.10.42", "5.10.43"),
    ("CVE-2021-47342", "5.10.76", "5.10.77"),
    ("CVE-2021-47406", "5.10.70", "5.10.71"), ("CVE-2021-47406", "5.14.9", "5.14.10"),
    ("CVE-2022-49409", "5.4.276", "5.4.277"), ("CVE-2022-49409", "5.15.45", "5.15.46"),
    ("CVE-2022-49708", "4.9.319", "4.9.320"), ("CVE-2022-49708", "4.19.248", "4.19.249"),
    ("CVE-2022-50286", "4.19.270", "4.19.271"), ("CVE-2022-50286", "6.1.3", "6.1.4"),
    ("CVE-2022-50436", "5.10.162", "5.10.163"), ("CVE-2022-50436", "6.0.17", "6.0.18"),
    ("CVE-2022-50546", "5.10.163", "5.10.164"), ("CVE-2022-50546", "5.15.86", "5.15.87"),
    ("CVE-2022-50782", "5.4.228", "5.4.229"), ("CVE-2022-50782", "6.1.3", "6.1.4"),
    ("CVE-2023-53149", "6.2.15", "6.2.16"), ("CVE-2023-53149", "6.3.2", "6.3.3"),
    ("CVE-2023-53270", "5.15.110", "5.15.111"), ("CVE-2023-53270", "6.1.27", "6.1.28"),
    ("CVE-2023-53526", "5.15.131", "5.15.132"), ("CVE-2023-53526", "6.1.53", "6.1.54"),
    ("CVE-2023-53526", "6.5.3", "6.5.4"),
    ("CVE-2023-53626", "5.4.237", "5.4.238"), ("CVE-2023-53626", "6.2.7", "6.2.8"),
    ("CVE-2023-54153", "6.1.39", "6.1.40"), ("CVE-2023-54153", "6.4.4", "6.4.5"),
    ("CVE-2024-26601", "5.10.210", "5.10.211"), ("CVE-2024-26601", "6.1.77", "6.1.78"),
    ("CVE-2024-26601", "6.7.4", "6.7.5"),
    ("CVE-2024-26774", "6.1.79", "6.1.80"), ("CVE-2024-26774", "6.6.18", "6.6.19"),
    ("CVE-2024-35807", "4.19.311", "4.19.312"), ("CVE-2024-35807", "6.8.2", "6.8.3"),
    ("CVE-2024-40998", "6.6.35", "6.6.36"), ("CVE-2024-40998", "6.9.6", "6.9.7"),
    ("CVE-2024-43828", "5.10.223", "5.10.224"), ("CVE-2024-43828", "6.10.2", "6.10.3"),
    ("CVE-2024-49960", "5.10.236", "5.10.237"), ("CVE-2024-49960", "6.11.2", "6.11.3"),
    ("CVE-2025-22120", "6.6.88", "6.6.89"), ("CVE-2025-22120", "6.12.25", "6.12.26"),
    ("CVE-2025-39782", "5.4.296", "5.4.297"), ("CVE-2025-39782", "6.16.3", "6.16.4"),
    ("CVE-2025-40190", "5.4.300", "5.4.301"), ("CVE-2025-40190", "6.17.3", "6.17.4"),
    ("CVE-2025-68820", "6.1.159", "6.1.160"), ("CVE-2025-68820", "6.18.2", "6.18.3"),
    ("CVE-2026-31446", "5.15.202", "5.15.203"), ("CVE-2026-31446", "6.19.10", "6.19.11"),
    ("CVE-2026-43067", "6.1.167", "6.1.168"), ("CVE-2026-43067", "6.19.10", "6.19.11"),
    ("CVE-2026-45892", "6.1.167", "6.1.168"),
    ("CVE-2026-46061", "6.12.85", "6.12.86"), ("CVE-2026-46061", "7.0.3", "7.0.4"),
    ("CVE-2026-74358", "6.18.39", "6.18.40"), ("CVE-2026-74358", "7.1.4", "7.1.5"),
]


@pytest.mark.parametrize("cve, before, fixed", FIX_BOUNDARIES)
def test_kernel_just_before_and_at_each_fix(data, cve, before, fixed):
    item = item_for(data, cve, mainline(before))
    assert item is not None, "%s not reported open on %s" % (cve, before)
    assert (item["fixed_in"], item["reason"], item["advisory"]) == \
        (fixed, "fixed in %s; host runs %s" % (fixed, before), False)
    assert item["link"] == "https://nvd.nist.gov/vuln/detail/" + cve
    assert item_for(data, cve, mainline(fixed)) is None


def test_classes_of_the_boundary_records(data):
    classes = {record["id"]: record["class"] for record in data["records"] if record["id"] in SELECTED}
    assert set(classes.values()) == {"data corruption", "crash/BUG", "hang/deadlock", "memory safety",
                                     "leak", "other"}
    assert (classes["CVE-2024-26601"], classes["CVE-2021-47116"], classes["CVE-2023-53149"],
            classes["CVE-2024-49960"], classes["CVE-2022-49708"], classes["CVE-2023-53626"]) == \
        ("data corruption", "leak", "hang/deadlock", "memory safety", "crash/BUG", "other")


@pytest.mark.parametrize("cve, version, reason", [
    # 5.11 got the bug by a backport (5.11.11) and reached end of life before the fix.
    ("CVE-2021-47116", "5.11.15", "no fix in this branch (5.11); fixed in 5.13; host runs 5.11.15"),
    # 6.2 is after the introduction (5.11) and the record names no 6.2 fix.
    ("CVE-2024-26601", "6.2.16", "no fix in this branch (6.2); fixed in 6.8; host runs 6.2.16"),
    ("CVE-2024-26774", "5.19.12", "no fix in this branch (5.19); fixed in 6.8; host runs 5.19.12"),
    ("CVE-2022-49708", "3.2.89", "no fix in this branch (3.2); fixed in 5.19; host runs 3.2.89"),
    # Only stable releases carried it, and 5.15 has no fix.
    ("CVE-2026-43067", "5.15.210", "no fix in this branch (5.15); host runs 5.15.210"),
    ("CVE-2023-53149", "6.1.192", "no fix in this branch (6.1); fixed in 6.4; host runs 6.1.192"),
])
def test_no_fix_in_this_branch(data, cve, version, reason):
    item = item_for(data, cve, mainline(version))
    assert (item["fixed_in"], item["reason"], item["advisory"]) == (None, reason, False)


@pytest.mark.parametrize("cve, version", [
    ("CVE-2024-26601", "5.10.180"),   # 5.10 got the bug in 5.10.181
    ("CVE-2024-26601", "5.4.250"),    # 5.4 never did: introduced in 5.11
    ("CVE-2024-26774", "5.19.11"),    # backported into 5.19.12
    ("CVE-2022-49708", "3.2.88"),     # backported into 3.2.89
    ("CVE-2021-47406", "5.9.16"),     # introduced in 5.10
    ("CVE-2026-43067", "6.1.166"),    # stable-only: 6.1.167 had it
    ("CVE-2026-43067", "7.0.1"),      # stable-only: no mainline release had it
    ("CVE-2024-26601", "6.8.0"),      # mainline fix release
    ("CVE-2024-26601", "6.10.5"),     # after the mainline fix
])
def test_not_affected_before_introduction_or_after_mainline_fix(data, cve, version):
    assert item_for(data, cve, mainline(version)) is None


def test_release_candidates_sort_before_their_release(data):
    assert kv.compare_upstream("6.8.0-rc7", "6.8") < 0 < kv.compare_upstream("6.8.0-rc1", "6.7.12")
    # Fixed in mainline 6.8 (some rc of it): an rc of 6.8 may or may not have it, so advisory.
    item = item_for(data, "CVE-2024-26601", mainline("6.8.0-rc3"))
    assert item["advisory"] and item["fixed_in"] is None
    assert item["reason"] == ("advisory (the fix landed during the 6.8 release candidates; which rc"
                              " is not recorded): no fix in this branch (6.8); fixed in 6.8;"
                              " judged as 6.8.0-rc3")
    # Introduced in mainline 6.16: an rc of 6.16 may have it (advisory); 6.15 does not.
    item = item_for(data, "CVE-2026-74358", mainline("6.16.0-rc2"))
    assert item["advisory"] and "came in during the 6.16 release candidates" in item["reason"]
    assert item_for(data, "CVE-2026-74358", mainline("6.15.11")) is None
    # An rc of a stable branch's x.y is simply before that branch's fix.
    item = item_for(data, "CVE-2022-50286", mainline("6.1.0-rc8"))
    assert (item["fixed_in"], item["advisory"]) == ("6.1.4", False)


PV_DEBIAN = "Linux version 6.1.0-17-amd64 (gcc-12) #1 SMP PREEMPT_DYNAMIC Debian 6.1.69-1 (2023-12-30)"


@pytest.mark.parametrize("kernel, judged_as", [
    (kv.identify("6.1.0-17-amd64", PV_DEBIAN), "6.1.69"),
    (kv.identify("5.10.201-191.748.amzn2.x86_64"), "5.10.201"),
    (kv.identify("5.15.0-1034-aws", "", "Ubuntu 5.15.0-1034.38-aws 5.15.94"), "5.15.94"),
    (kv.identify("6.1.70"), "6.1.70"),
])
def test_exact_for_kernels_with_an_upstream_version(data, kernel, judged_as):
    items = kr.open_records(data, kernel)
    assert items and not any(item["advisory"] for item in items)
    assert all(item["reason"].endswith("host runs " + judged_as) for item in items)


@pytest.mark.parametrize("kernel, reason_start, judged_as", [
    (kv.identify("4.18.0-513.5.1.el8_9.x86_64"),
     "advisory (rhel kernel 4.18.0-513.5.1.el8_9.x86_64 backports fixes under its own release"
     " numbers; judged by its upstream base 4.18.0)", "4.18.0"),
    (kv.identify("5.10.134-16.al8.x86_64"), "advisory (alibaba kernel 5.10.134-16.al8.x86_64", "5.10.134"),
    (kv.identify("5.14.21-150500.55.39-default"), "advisory (suse kernel 5.14.21-150500.55.39-default",
     "5.14.21"),
    (kv.identify("5.15.0-1034-aws"), "advisory (upstream version of ubuntu kernel 5.15.0-1034-aws unknown"
     " (Ubuntu kernel without /proc/version_signature", "5.15.0"),
])
def test_advisory_for_backporting_vendors(data, kernel, reason_start, judged_as):
    items = kr.open_records(data, kernel)
    assert items and all(item["advisory"] for item in items)
    assert all(item["reason"].startswith(reason_start) for item in items)
    assert all(item["reason"].endswith("judged as " + judged_as) for item in items)


def test_advisory_item_keeps_the_branch_fix(data):
    item = item_for(data, "CVE-2022-50436", kv.identify("5.10.134-16.al8.x86_64"))
    assert (item["fixed_in"], item["advisory"]) == ("5.10.163", True)
    assert item["reason"].endswith("fixed in 5.10.163; judged as 5.10.134")


def test_unreadable_release_is_undetermined_not_clean(data):
    assert kr.open_records(data, kv.identify("foo")) is None


@pytest.mark.parametrize("content, message", [
    (b"{", "not JSON"),
    (json.dumps({"schema": "other", "classes": [], "records": []}).encode(),
     r"\$\.schema 'other' is not a ext4-fleet-audit/kernel-cna-records/v1 document"),
    (b" " * (kr.MAX_DATA_BYTES + 1), "larger than"),
], ids=["truncated", "other schema", "oversized"])
def test_load_rejects_bad_files(tmp_path, content, message):
    path = tmp_path / "records.json"
    path.write_bytes(content)
    with pytest.raises(kr.RecordsError, match=message) as info:
        kr.load(str(path))
    assert str(path) in str(info.value)


@pytest.mark.parametrize("field, value, message", [
    ("fixed", {"6.1": "6.2.3"}, r"records\[0\]\.fixed\[6\.1\]: '6\.2\.3' is not in that branch"),
    ("fixed", {"6.1": "6.1.x"}, r"records\[0\]\.fixed\[6\.1\]"),
    ("fixed_mainline", "six", r"records\[0\]\.fixed_mainline"),
    ("class", "bad", r"records\[0\]\.class 'bad'"),
    ("needs", "fastcommit", r"records\[0\]\.needs 'fastcommit' is not one of bigalloc, casefold"),
    # the shapes, through contract.KernelRecords
    ("id", "GHSA-1", r"\$\.records\[0\]\.id: Expected `str` that is a CVE id"),
    ("title", "", r"\$\.records\[0\]\.title: Expected `str` of length >= 1"),
    ("fixed", ["6.1.2"], r"\$\.records\[0\]\.fixed: Expected `object`, got `array`"),
    ("introduced", 6.1, r"\$\.records\[0\]\.introduced: Expected `str \| null`, got `float`"),
])
def test_load_names_the_bad_field(tmp_path, field, value, message):
    with open(DATA_FILE) as handle:
        doc = json.load(handle)
    doc["records"][0][field] = value
    path = tmp_path / "records.json"
    path.write_text(json.dumps(doc))
    with pytest.raises(kr.RecordsError, match=message):
        kr.load(str(path))
