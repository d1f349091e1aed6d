"""Which confirmation probes the probe runs (the job's confirm_scope, chopper_probe_confirm_scope),
without root: `own` runs a probe only where the replica already mounts every option its risky side
adds, and says why it skipped the others; `all` runs every one; a bad scope is a bad job."""

import json
import subprocess
import sys
import types

import pytest

from ext4audit.parsers.ext4_parsers import common
from ext4audit.parsers.ext4_probe.base import ProbeError
from ext4audit.parsers.ext4_probe.confirmations import Confirmations
from ext4audit.parsers.ext4_probe import job as probe_job
from ext4audit.parsers.ext4_probe.job import JOB_SCHEMA, load_job
from unit.test_probe_target import PROBE_PATH

# The replica's mount options as the probe has them (the host's, plus its own noinit_itable).
DEFAULTS = ["rw", "data=ordered", "delalloc", "auto_da_alloc", "dioread_nolock", "barrier", "noinit_itable"]
NODELALLOC = ["rw", "data=ordered", "nodelalloc", "auto_da_alloc", "dioread_nolock", "noinit_itable"]
NO_JOURNAL = ["rw", "delalloc", "auto_da_alloc", "dioread_nolock", "noinit_itable"]  # no data= without a journal
OLD_KERNEL_NODELALLOC = ["rw", "data=ordered", "nodelalloc", "auto_da_alloc", "dioread_lock", "noinit_itable"]
NOAUTO_DA_ALLOC = ["rw", "data=ordered", "delalloc", "noauto_da_alloc", "dioread_nolock", "noinit_itable"]


class Measured(Confirmations):
    """Confirmations whose probes record that they ran instead of mounting anything: the
    measurement's own option lists are built as the real probes build them (compare is stubbed)."""

    def __init__(self, options, scope="own", named_options=False, netfs=()):
        images = types.SimpleNamespace(options=options, mkfs={"journal_bytes": 16 << 20, "inode_size": 256})
        scratch = types.SimpleNamespace(path=lambda *parts: "/nonexistent/" + "/".join(parts))
        super().__init__(scratch, images, list(netfs), 1, float("inf"), scope, "/", named_options)
        self.ran, self.said = [], []

    def compare(self, entry, risky, safe, workload, pick=None):
        self.ran.append(entry["id"])
        return entry

    def netfs_mkdir_existing(self):
        self.ran.append("netfs_mkdir_existing")
        return [self.entry("netfs_mkdir_existing", "mkdir", "nfs", [], "local ext4", self.options)]

    def results(self, wanted=Confirmations.PROBES):
        return dict((entry["id"], entry) for entry in self.run(list(wanted), self.said.append))


@pytest.mark.parametrize("options, skipped", [
    (DEFAULTS, {"buffered_write_fsync": "nodelalloc"}),
    (NODELALLOC, {"rename_over_existing": "delalloc"}),
    (NO_JOURNAL, {"rename_over_existing": "data=ordered", "buffered_write_fsync": "nodelalloc"}),
    (OLD_KERNEL_NODELALLOC, {"rename_over_existing": "delalloc", "buffered_write_fsync": "dioread_nolock"}),
    (NOAUTO_DA_ALLOC, {"rename_over_existing": "auto_da_alloc", "buffered_write_fsync": "nodelalloc"}),
], ids=["defaults", "nodelalloc", "no-journal", "dioread_lock", "noauto_da_alloc"])
def test_own_runs_only_the_probes_of_the_replicas_option_set(options, skipped):
    confirmations = Measured(options)
    by_id = confirmations.results()
    assert confirmations.ran == [p for p in Confirmations.PROBES if p not in skipped]
    assert "xattr_set" in confirmations.ran and "netfs_mkdir_existing" in confirmations.ran  # the host's own, always
    for probe_id, missing in skipped.items():
        assert by_id[probe_id]["status"] == "skipped"
        assert by_id[probe_id]["reason"] == ("not your configuration: the replica of / does not use %s (set "
                                             "chopper_probe_confirm_scope: all to measure it)" % missing)
        assert "confirmation %s skipped: not your configuration (no %s)" % (probe_id, missing) in confirmations.said
    assert [line for line in confirmations.said if line.endswith(" done")] == [
        "confirmation %s done" % p for p in confirmations.ran]


@pytest.mark.parametrize("options", [DEFAULTS, NODELALLOC, NO_JOURNAL, OLD_KERNEL_NODELALLOC, NOAUTO_DA_ALLOC])
def test_all_runs_every_probe_listed(options):
    confirmations = Measured(options, scope="all")
    by_id = confirmations.results()
    assert confirmations.ran == list(Confirmations.PROBES)
    assert all(entry["status"] == "measured" for entry in by_id.values())
    assert not [line for line in confirmations.said if "skipped" in line]


def test_a_probe_in_scope_measures_the_replicas_own_options():
    """One list for each probe's risky side: where `own` runs it, its risky mount is the replica's
    own option set, and its safe mount differs from it in the one option the probe compares."""
    for options, probe_id, safe_change in ((DEFAULTS, "rename_over_existing", ("auto_da_alloc", "noauto_da_alloc")),
                                           (NODELALLOC, "buffered_write_fsync", ("nodelalloc", "delalloc"))):
        confirmations = Measured(options)
        assert confirmations.not_in_effect(probe_id) == []
        entry = confirmations.results([probe_id])[probe_id]
        risky, safe = entry["risky"]["options"].split(","), entry["safe"]["options"].split(",")
        assert sorted(risky) == sorted(options)
        assert sorted(safe) == sorted([o for o in options if o != safe_change[0]] + [safe_change[1]])


def test_the_measured_option_sets_and_labels_are_unchanged():
    """What the report and the kernel gate read: the same risky and safe options as before the
    option lists were shared with the scope (the host's options with the probe's added last)."""
    host = ["rw", "nodelalloc", "noauto_da_alloc", "commit=5", "noinit_itable"]
    by_id = Measured(host, scope="all").results(["rename_over_existing", "buffered_write_fsync"])
    rename, buffered = by_id["rename_over_existing"], by_id["buffered_write_fsync"]
    assert (rename["risky"]["label"], rename["safe"]["label"]) == ("auto_da_alloc", "noauto_da_alloc")
    assert rename["risky"]["options"] == "rw,commit=5,noinit_itable,data=ordered,delalloc,auto_da_alloc"
    assert rename["safe"]["options"] == "rw,commit=5,noinit_itable,data=ordered,delalloc,noauto_da_alloc"
    assert (buffered["risky"]["label"], buffered["safe"]["label"]) == ("dioread_nolock,nodelalloc",
                                                                       "dioread_nolock,delalloc")
    assert buffered["risky"]["options"] == "rw,noauto_da_alloc,commit=5,noinit_itable,dioread_nolock,nodelalloc"
    assert buffered["safe"]["options"] == "rw,noauto_da_alloc,commit=5,noinit_itable,dioread_nolock,delalloc"
    assert (rename["seed"], buffered["seed"]) == ("000", "001")


def test_a_skipped_entry_has_the_keys_of_a_measured_one():
    """The scope's skip and netfs's (no network mount) are one shape, the shape of a measurement."""
    scratch = types.SimpleNamespace(path=lambda *parts: "/nonexistent")
    images = types.SimpleNamespace(options=DEFAULTS, mkfs={})
    confirmations = Confirmations(scratch, images, [], 1, float("inf"), "own", "/")
    by_id = dict((e["id"], e) for e in confirmations.run(["buffered_write_fsync", "netfs_mkdir_existing"],
                                                         lambda line: None))
    measured = confirmations.entry("buffered_write_fsync", "m", "r", [], "s", [])
    for entry in by_id.values():
        assert set(entry) == set(measured)
        assert entry["status"] == "skipped" and entry["ratio"] is None and entry["repetitions"] == 0
        assert entry["risky"] is None and entry["safe"] is None
    assert (by_id["buffered_write_fsync"]["seed"], by_id["netfs_mkdir_existing"]["seed"]) == ("001", "002")
    assert by_id["netfs_mkdir_existing"]["reason"] == "no network filesystem is mounted on this host"


def test_a_named_option_set_is_not_called_your_configuration():
    confirmations = Measured(DEFAULTS, named_options=True)
    entry = confirmations.results(["buffered_write_fsync"])["buffered_write_fsync"]
    assert entry["reason"] == ("not the job's option set: the replica of / with the job's mount options does not use "
                               "nodelalloc (set chopper_probe_confirm_scope: all to measure it)")
    assert confirmations.said == ["confirmation buffered_write_fsync skipped: not the job's option set (no nodelalloc)"]


def test_the_scopes_are_shared_with_the_controller():
    assert probe_job.CONFIRM_SCOPES is common.CONFIRM_SCOPES == ("own", "all")


# ------------------------------------------------------------------ the job's confirm_scope
def write_job(tmp_path, **fields):
    job = {"schema": JOB_SCHEMA, "filesystem": {"mountpoint": "/"}}
    job.update(fields)
    path = tmp_path / "job.json"
    path.write_text(json.dumps(job))
    return str(path)


def test_a_job_without_a_scope_runs_every_confirmation_as_before(tmp_path):
    """An older controller sends no confirm_scope: it meant every probe it listed."""
    assert load_job(write_job(tmp_path))["confirm_scope"] == "all"
    for scope in common.CONFIRM_SCOPES:
        assert load_job(write_job(tmp_path, confirm_scope=scope))["confirm_scope"] == scope


@pytest.mark.parametrize("scope", ["mine", "", "OWN", None, ["own"], 1])
def test_an_unknown_scope_is_a_bad_job(tmp_path, scope):
    with pytest.raises(ProbeError, match=r"the job's confirm_scope is .*, not one of own, all$"):
        load_job(write_job(tmp_path, confirm_scope=scope))


def test_the_probe_exits_2_on_an_unknown_scope(tmp_path):
    """Before anything is made or mounted (no root needed to get there), and no result is written."""
    out = tmp_path / "out.json"
    job = write_job(tmp_path, confirm_scope="everything")
    proc = subprocess.run([sys.executable, PROBE_PATH, "run", job, str(out)],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True, timeout=60)
    assert proc.returncode == 2, proc.stderr
    assert 'cannot read the job: the job\'s confirm_scope is "everything", not one of own, all' in proc.stderr
    assert not out.exists()


def test_a_probe_with_nothing_to_measure_says_skipped_and_why_not_done():
    """No network mount: netfs_mkdir_existing's entry is skipped, and so is its progress line."""
    scratch = types.SimpleNamespace(path=lambda *parts: "/nonexistent/" + "/".join(parts))
    real = Confirmations(scratch, types.SimpleNamespace(options=DEFAULTS), [], 1,
                               float("inf"), "own", "/")
    said = []
    entries = real.run(["netfs_mkdir_existing"], said.append)
    assert [e["status"] for e in entries] == ["skipped"]
    assert said == ["confirmation netfs_mkdir_existing skipped: no network filesystem is mounted on this host"]
