"""report.sarif: valid against the SARIF 2.1.0 schema (errata01, as the SARIF Multitool ships it)
and the Multitool's GitHub rules, one result per host x rule x filesystem, fingerprints stable
across runs, locations in the repository, waivers as suppressions."""

import copy
import gzip
import json
import os
import subprocess

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

from conftest import ROOT, SARIF_MULTITOOL
from ext4audit.formats import sarif
from ext4audit.rules import catalog as catalog_mod
from test_baseline import DEFAULTS, NOBARRIER, NODELALLOC_DISCARD, make_run, record
from test_reports import HOSTILE, cli

if SARIF_MULTITOOL is None:
    pytest.skip("the SARIF Multitool is missing: `make test-deps` fetches it into .cache/sarif-multitool",
                allow_module_level=True)
SCHEMA = json.load(open(os.path.join(SARIF_MULTITOOL, "sarif-2.1.0.json")))
VALIDATOR = jsonschema.validators.validator_for(SCHEMA)
EXAMPLE_HOST = "db-01.example.net"  # has inventories/example/host_vars/db-01.example.net.yml


def test_the_schema_is_sarif_2_1_0_with_the_errata():
    VALIDATOR.check_schema(SCHEMA)
    assert SCHEMA["title"] == "Static Analysis Results Format (SARIF) Version 2.1.0 JSON Schema"
    assert "status" in SCHEMA["definitions"]["suppression"]["properties"]  # errata01: was `state`


def schema_errors(doc):
    return ["%s at %s" % (e.message, "/".join(str(p) for p in e.absolute_path)) for e in VALIDATOR(SCHEMA).iter_errors(doc)]


def multitool_errors(path, tmp_path):
    """The SARIF Multitool's complaints about a log (`validate --rule-kind Gh`: the schema and
    GitHub code scanning's rules), one line each."""
    out = tmp_path / ("validation-%s.sarif" % os.path.basename(os.path.dirname(str(path))))
    if out.exists():
        out.unlink()
    result = subprocess.run([os.path.join(SARIF_MULTITOOL, "Sarif.Multitool"), "validate", "--rule-kind", "Gh",
                             "--output", str(out), str(path)],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300,
                            env=dict(os.environ, DOTNET_CLI_TELEMETRY_OPTOUT="1"))
    assert out.exists(), result.stdout.decode()
    return [line for line in result.stdout.decode().splitlines() if ": error " in line or ": warning " in line]


@pytest.fixture
def runs(tmp_path):
    """The same fleet audited twice (two run ids, two report times): a host with a hostile mount
    point, one with host_vars in the example inventory and a waiver, one unreachable."""
    waivers = tmp_path / "waivers.yml"
    waivers.write_text("waivers:\n  - rule: EXT4_ONLINE_DISCARD\n    hosts: [%s]\n"
                       "    justification: the database wants online discard\n    approver: storage-team\n"
                       "    expires: 2099-01-01\n" % EXAMPLE_HOST)
    records = [record("odd \"host\"\n<b>", (HOSTILE, NOBARRIER), ("/srv", DEFAULTS)),
               record(EXAMPLE_HOST, ("/data", NODELALLOC_DISCARD), ("/var/lib/db", NOBARRIER)),
               record("gone", status="unreachable")]
    folders = []
    for name in ("run-1", "run-2"):
        folder = make_run(tmp_path, name, copy.deepcopy(records))
        rc, out, err = cli("report", folder, "--waivers", str(waivers), "--inventory",
                           os.path.join(ROOT, "inventories", "example"))
        assert rc == 2, (out, err)  # an unreachable host: incomplete
        folders.append(folder)
    return folders


def load(folder):
    return json.load(open(os.path.join(folder, "report.sarif"), encoding="utf-8"))


def host_findings(folder):
    found = []
    for name in sorted(os.listdir(os.path.join(folder, "hosts"))):
        report = json.load(open(os.path.join(folder, "hosts", name)))
        found += [(report["host"], f) for f in report["findings"]]
    return found


def located(results):
    """{(host:mountpoint, rule): result} of every location of every result."""
    return dict(((loc["logicalLocations"][0]["fullyQualifiedName"], r["ruleId"]), r)
                for r in results for loc in r["locations"])


def test_sarif_is_valid_and_complete(runs):
    log = load(runs[0])
    errors = schema_errors(log)
    assert not errors, "report.sarif is not valid SARIF 2.1.0: %s" % errors[:5]
    # The schema does catch a broken log (so the check above can fail).
    broken = copy.deepcopy(log)
    del broken["runs"][0]["results"][0]["message"]
    broken["runs"][0]["results"][1]["level"] = "fatal"
    assert len(schema_errors(broken)) == 2

    run = log["runs"][0]
    rules = run["tool"]["driver"]["rules"]
    assert len(rules) == len(set(r["id"] for r in rules)) >= 20
    nobarrier = [r for r in rules if r["id"] == "EXT4_NOBARRIER"][0]
    assert nobarrier["helpUri"].startswith("https://") and "Remediation: " in nobarrier["help"]["text"]
    assert nobarrier["shortDescription"]["text"] and nobarrier["fullDescription"]["text"]

    results = run["results"]
    findings = host_findings(runs[0])
    # One result per group: the two hosts' KERNEL_EXT4_NO_FIX_IN_BRANCH (same kernel, same message) are one.
    assert len(findings) == 12 and len(results) == 11
    assert sum(r["properties"]["hosts"] for r in results) == len(findings)
    shared = [r for r in results if r["properties"]["hosts"] == 2]
    assert [r["ruleId"] for r in shared] == ["KERNEL_EXT4_NO_FIX_IN_BRANCH"] and shared[0]["message"]["text"].endswith("(2 hosts)")
    where = located(results)
    assert set(where) == set((h + (":" + f["mountpoint"] if f["mountpoint"] else ""), f["rule"]) for h, f in findings)
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
        assert result["properties"]["hosts_listed"] == len(result["locations"])
    assert where[(EXAMPLE_HOST + ":/var/lib/db", "EXT4_NOBARRIER")]["level"] == "error"
    assert where[(EXAMPLE_HOST + ":/data", "EXT4_ONLINE_DISCARD")]["level"] == "note"

    # Host strings are JSON data, kept exactly.
    hostile = where[("odd \"host\"\n<b>:" + HOSTILE, "EXT4_NOBARRIER")]
    assert hostile["message"]["text"].startswith("/srv/<script>alert(1)</script> | `$(rm")

    # The unreachable host is a notification, and the run did not fully succeed.
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert [n["properties"]["host"] for n in invocation["toolExecutionNotifications"]] == ["gone"]
    assert run["properties"]["verdict"] == "incomplete" and run["properties"]["cut"] is None


def test_locations_point_into_the_repository(runs):
    catalog_lines = open(os.path.join(ROOT, "rules", "catalog.yml")).read().splitlines()
    for result in load(runs[0])["runs"][0]["results"]:
        for location in result["locations"]:
            physical = location["physicalLocation"]
            uri = physical["artifactLocation"]["uri"]
            assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
            if location["logicalLocations"][0]["fullyQualifiedName"].split(":")[0] == EXAMPLE_HOST:
                assert uri == "inventories/example/host_vars/%s.yml" % EXAMPLE_HOST
            else:  # no host_vars file: the rule's catalog entry
                assert uri == "rules/catalog.yml"
                line = catalog_lines[physical["region"]["startLine"] - 1]
                assert line.strip() == "- id: " + result["ruleId"], line
            assert os.path.isfile(os.path.join(ROOT, uri))


def test_waived_findings_are_suppressed(runs):
    results = load(runs[0])["runs"][0]["results"]
    suppressed = [r for r in results if r.get("suppressions")]
    assert [(r["locations"][0]["logicalLocations"][0]["fullyQualifiedName"], r["ruleId"]) for r in suppressed] == [
        (EXAMPLE_HOST + ":/data", "EXT4_ONLINE_DISCARD")]
    assert suppressed[0]["suppressions"] == [{"kind": "external", "status": "accepted", "justification":
                                              "the database wants online discard (approver storage-team, until 2099-01-01T00:00:00Z)"}]


def test_results_and_fingerprints_are_stable_across_runs(runs):
    first, second = (load(folder)["runs"][0] for folder in runs)
    assert first["automationDetails"] != second["automationDetails"]  # two runs...
    assert first["results"] == second["results"]                      # ...the same results
    prints = [r["partialFingerprints"][sarif.FINGERPRINT] for r in first["results"]]
    assert len(set(prints)) == len(prints)  # one per group
    text = open(os.path.join(runs[0], "report.sarif")).read()
    assert "run-1" not in json.dumps(first["results"]) and text.count("\n") == len(prints)  # not indented


def test_fingerprint_is_the_groups_identity_only():
    assert sarif.group_fingerprint("R", "m", False) == sarif.group_fingerprint("R", "m", False)
    for other in (("S", "m", False), ("R", "n", False), ("R", "m", True)):
        assert sarif.group_fingerprint(*other) != sarif.group_fingerprint("R", "m", False)
    # parts cannot run into each other
    assert sarif.group_fingerprint("a", "b c", False) != sarif.group_fingerprint("a b", "c", False)


def test_baseline_state(runs, tmp_path):
    third = make_run(tmp_path, "run-3", [record("odd \"host\"\n<b>", (HOSTILE, NOBARRIER), ("/srv", NOBARRIER)),
                                         record("gone", status="unreachable")])
    rc, out, err = cli("report", third, "--baseline", runs[1])
    assert rc == 2, (out, err)
    log = load(third)
    assert not schema_errors(log)
    where = located(log["runs"][0]["results"])
    assert where[("odd \"host\"\n<b>:/srv", "EXT4_NOBARRIER")]["baselineState"] == "new"
    assert where[("odd \"host\"\n<b>:" + HOSTILE, "EXT4_NOBARRIER")]["baselineState"] == "unchanged"


CATALOG = catalog_mod.load()


def fleet_groups(hosts, rules=1, first=0):
    """sarif.Groups over synthetic hosts first..hosts-1, each with `rules` findings its own (a
    distinct message each) and one finding every host shares."""
    groups = sarif.Groups(CATALOG)
    for n in range(first, hosts):
        findings = [{"rule": "EXT4_NOBARRIER", "severity": "high", "message": "shared", "mountpoint": "/"}]
        findings += [{"rule": "EXT4_LONG_COMMIT", "severity": ("info", "low")[k % 2], "mountpoint": "/d%d" % k,
                      "message": "host %d, filesystem %d" % (n, k)} for k in range(rules)]
        groups.add_host({"host": "host-%06d.example.org" % n, "findings": findings})
    return groups


def test_a_large_fleet_stays_within_githubs_limits_cutting_the_least_severe_first():
    groups = fleet_groups(2000, rules=13)  # 26,000 distinct findings and one shared by 2,000 hosts
    results, cut = groups.results()
    assert len(results) == sarif.MAX_RESULTS
    assert results[0]["properties"]["hosts"] == 2000 and len(results[0]["locations"]) == sarif.LOCATIONS_PER_RESULT
    assert cut["results_left_out"] == 26001 - sarif.MAX_RESULTS and cut["worst_left_out"] == "info"
    assert [r["properties"]["severity"] for r in results].count("low") == 12000  # every low kept, infos cut
    assert len(gzip.compress("\n".join(json.dumps(r) for r in results).encode())) <= sarif.MAX_GZIP_BYTES


def test_over_the_gzip_limit_fewer_hosts_are_listed_and_the_cut_says_so(monkeypatch):
    full, _ = fleet_groups(2000).results()
    size = len(gzip.compress("\n".join(json.dumps(r) for r in full).encode()))
    monkeypatch.setattr(sarif, "MAX_GZIP_BYTES", size // 3)
    results, cut = fleet_groups(2000).results()
    assert cut["hosts_listed_per_result"] == 1 and cut["results_left_out"] == len(full) - len(results) > 0
    assert results[0]["properties"]["hosts"] == 2000 and len(results[0]["locations"]) == 1  # the worst is kept
    assert cut["worst_left_out"] in ("low", "info")
    assert len(gzip.compress("\n".join(json.dumps(r) for r in results).encode())) <= size // 3


def test_over_the_gzip_limit_a_wide_group_lists_fewer_hosts_first(monkeypatch):
    full, _ = fleet_groups(2000, rules=0).results()  # one finding on 2,000 hosts: 1,000 listed
    size = len(gzip.compress("\n".join(json.dumps(r) for r in full).encode()))
    monkeypatch.setattr(sarif, "MAX_GZIP_BYTES", size // 3)
    results, cut = fleet_groups(2000, rules=0).results()
    assert cut["results_left_out"] == 0 and 1 < cut["hosts_listed_per_result"] < sarif.LOCATIONS_PER_RESULT
    assert len(results[0]["locations"]) == results[0]["properties"]["hosts_listed"] == cut["hosts_listed_per_result"]


def test_shards_merge_into_the_same_groups():
    """The report step's workers each group a shard; the parent's merge gives what one pass gives."""
    merged = sarif.Groups(CATALOG)
    for shard in (fleet_groups(10, rules=2), fleet_groups(30, rules=2, first=10)):
        merged.merge(shard.dump())
    assert merged.results() == fleet_groups(30, rules=2).results()


def test_the_multitool_and_githubs_rules_accept_the_log(runs, tmp_path):
    """A waived finding's suppression included: `state` (the pre-errata name) was refused here."""
    path = os.path.join(runs[0], "report.sarif")
    assert multitool_errors(path, tmp_path) == []
    doc = load(runs[0])
    for result in doc["runs"][0]["results"]:
        for suppression in result.get("suppressions") or []:
            suppression["state"] = suppression.pop("status")
    old = tmp_path / "old" / "report.sarif"
    old.parent.mkdir()
    old.write_text(json.dumps(doc))
    assert any("suppressions[0].state" in line for line in multitool_errors(str(old), tmp_path))
