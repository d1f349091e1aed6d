"""Host reports of schema v2 (issue 28 §1): small, referring to the run's shared file and facts
record, resolved back to the full report; the v1 reports of earlier runs still read everywhere."""

import glob
import json
import os
import shutil
import statistics
import sys

import pytest

from conftest import ROOT, load_host_report
from test_reports import cli

from ext4audit.model import contract, times
from ext4audit.report import baseline, host_report, reports
from ext4audit.rules import catalog as catalog_mod, waivers as waivers_mod
from ext4audit.steps import fleet
from ext4audit.store import ingest

sys.path.insert(0, os.path.join(ROOT, "bench"))
import aggregate  # noqa: E402  (the benchmark's fleet: real fixtures, parsed by the real parsers)

TYPICAL_MAX = 10 * 1024  # issue 28: a typical host's JSON at most about 10 KB (v1: about 53 KB)
HOSTS = 60


@pytest.fixture(scope="module")
def fleet_runs(tmp_path_factory):
    """Two nights of the benchmark's fleet (real fixtures), reported: (earlier, later, waivers)."""
    folder = tmp_path_factory.mktemp("fleet")
    waivers = str(folder / "waivers.json")
    earlier, later = str(folder / "reports" / "run-1"), str(folder / "reports" / "run-2")
    aggregate.write_run(earlier, aggregate.fleet(HOSTS, 7, True))
    aggregate.write_run(later, aggregate.fleet(HOSTS, 7, False))
    aggregate.write_waivers(waivers, aggregate.fleet(HOSTS, 7, False))
    for run, base in ((earlier, []), (later, ["--baseline", earlier])):
        rc, out, err = cli("report", run, "--fail-on", "high", "--waivers", waivers, "--store", "off", *base)
        assert rc in (1, 2), err
    return earlier, later, waivers


def audited_reports(run):
    paths = sorted(glob.glob(os.path.join(run, "hosts", "*.json")))
    return [p for p in paths if json.load(open(p))["status"] == "audited"]


def test_a_typical_host_report_is_at_most_about_10_kb(fleet_runs):
    _, later, _ = fleet_runs
    sizes = [os.path.getsize(path) for path in audited_reports(later)]
    # the fleet's hosts have 3 to 9 filesystems, about 25 findings and kernel record findings
    assert len(sizes) > HOSTS * 0.9 and statistics.median(sizes) <= TYPICAL_MAX, sorted(sizes)
    assert max(sizes) <= 2 * TYPICAL_MAX, sorted(sizes)
    doc = json.load(open(audited_reports(later)[0]))
    assert doc["schema"] == contract.HOST_REPORT_SCHEMA and doc["shared"] == host_report.SHARED_FILE
    assert doc["facts"].startswith("facts/") and os.path.isfile(os.path.join(later, doc["facts"]))


def test_the_full_report_resolves_from_a_v2_file_as_the_step_built_it(fleet_runs):
    """compact then resolve gives back the very report the step built in memory (rule texts,
    kernel records, filesystems, passed rules), for every host of the fleet."""
    earlier, later, waivers = fleet_runs
    catalog = catalog_mod.load()
    rules = waivers_mod.load(waivers, set(catalog.by_id))
    shared = host_report.Shared(catalog)
    now = times.utc_now()
    kernel_findings = 0
    for path in sorted(glob.glob(os.path.join(later, "facts", "*.json"))):
        full = fleet.build_host_report(fleet.read_record(path), catalog, rules, "run-2", now)
        doc = json.loads(reports.dump_compact(host_report.compact(full, os.path.relpath(path, later), shared)))
        host_report.check(doc, path)
        assert host_report.resolve(doc, later, json.loads(reports.dump_compact(shared.document("run-2")))) == \
            json.loads(reports.dump_compact(full))
        kernel_findings += sum("kernel_records" in f["evidence"] for f in full["findings"])
    assert kernel_findings > HOSTS / 2
    # what the step wrote resolves too, through the shared file it wrote once
    report = load_host_report(audited_reports(later)[0])
    contract.check(report, contract.HostReport, "resolved")
    assert all(f["title"] and f["remediation"]["steps"] for f in report["findings"])
    assert report["filesystems"] and report["passed"] and all("mountpoint" in p for p in report["passed"])
    assert any(isinstance(r, dict) and r.get("id") for f in report["findings"]
               for r in f["evidence"].get("kernel_records") or [])


def test_a_reference_that_does_not_resolve_is_named(fleet_runs, tmp_path):
    _, later, _ = fleet_runs
    path = audited_reports(later)[0]
    doc = json.load(open(path))
    ref = next(f for f in doc["findings"] if f.get("shared_evidence"))
    shared = json.load(open(os.path.join(later, host_report.SHARED_FILE)))
    for key in list(ref["shared_evidence"]):
        shared["evidence"].pop(ref["shared_evidence"][key])
    with pytest.raises(reports.ReportError, match=r"\$\.findings\[\d+\]\.shared_evidence\.kernel_\w+ '\w+' is not in"):
        host_report.resolve(doc, later, shared, path)
    with pytest.raises(contract.ContractError, match=r"\$\.shared"):
        host_report.check(dict(doc, shared="../../etc/x.json"), path)
    with pytest.raises(contract.ContractError, match=r"\$\.facts"):
        host_report.check(dict(doc, facts="/etc/passwd"), path)


def write_v1(run, folder):
    """A copy of run as the previous version wrote it: each host report in full (schema v1),
    no shared file, no findings index (an older version's baseline reads hosts/)."""
    os.makedirs(os.path.join(folder, "hosts"))
    for name in ("summary.json",):
        with open(os.path.join(run, name), "rb") as src, open(os.path.join(folder, name), "wb") as out:
            out.write(src.read())
    os.symlink(os.path.join(run, "facts"), os.path.join(folder, "facts"))
    for path in glob.glob(os.path.join(run, "hosts", "*.json")):
        full = load_host_report(path)
        assert full["schema"] == contract.FULL_HOST_REPORT_SCHEMA
        with open(os.path.join(folder, "hosts", os.path.basename(path)), "wb") as out:
            out.write(reports.dump_compact(full))
    return folder


def test_v1_host_reports_of_an_earlier_run_still_read(fleet_runs, tmp_path):
    """A baseline, a gate and the store's ingest over a run folder of the previous version (v1
    host reports in full) get what they get from the same run in v2."""
    earlier, later, waivers = fleet_runs
    old_earlier = write_v1(earlier, str(tmp_path / "v1" / "run-1"))
    old_later = write_v1(later, str(tmp_path / "v1" / "run-2"))
    # baseline: the host reports of each version give the same findings
    for host in json.load(open(os.path.join(earlier, "summary.json")))["hosts"][:20]:
        new, old = baseline.load(earlier), baseline.load(old_earlier)
        assert old.index is None
        assert old.host_report_findings(host["host"]) == new.host_report_findings(host["host"])
    # the gate over either version: the same verdict and table
    gate = [cli("gate", run, "--fail-on", "high", "--table") for run in (later, old_later)]
    assert gate[0][0] == gate[1][0] and gate[0][1] == gate[1][1], gate
    # the store's ingest: the same rows (evidence keys too), whichever version it reads
    new, old = ingest.read_run(later), ingest.read_run(old_later)
    assert new["hosts"] == old["hosts"] and new["filesystems"] == old["filesystems"]
    # and a script's read of one host
    path = audited_reports(later)[0]
    assert load_host_report(path) == load_host_report(os.path.join(old_later, "hosts", os.path.basename(path)))


def test_the_command_prints_a_host_in_full(fleet_runs):
    _, later, _ = fleet_runs
    path = audited_reports(later)[0]
    rc, out, err = cli("host-report", path)
    assert rc == 0, err
    assert json.loads(out) == load_host_report(path)


def test_the_gate_needs_no_facts_records(fleet_runs, tmp_path):
    """The verdict reads findings, not filesystems: a run folder copied without facts/ gates alike."""
    _, later, _ = fleet_runs
    copy = str(tmp_path / "reports" / "run-2")
    shutil.copytree(later, copy, ignore=shutil.ignore_patterns("facts"))
    gate = [cli("gate", run, "--fail-on", "high", "--table") for run in (later, copy)]
    assert gate[0][0] in (1, 2) and gate[0] == gate[1], gate
