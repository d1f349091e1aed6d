"""report.sarif: valid against the SARIF 2.1.0 schema (errata01, as the SARIF Multitool ships it)
and the Multitool's GitHub rules, one result per host x rule x filesystem, fingerprints stable
across runs, locations in the repository, waivers as suppressions."""

import copy
import hashlib
import json
import os
import subprocess

import jsonschema
import pytest
from hypothesis import given, settings, strategies as st

from conftest import ROOT, SARIF_MULTITOOL
from ext4audit import sarif
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


def test_sarif_is_valid_and_complete(runs):
    log = load(runs[0])
    errors = schema_errors(log)
    assert not errors, "report.sarif is not valid SARIF 2.1.0: %s" % errors[:5]
    # The vendored schema does catch a broken log (so the check above can fail).
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
    assert len(results) == len(findings) == 12  # with two hosts' KERNEL_EXT4_NO_FIX_IN_BRANCH (6.18.y has no fix for CVE-2026-74307)
    identities = set((r["properties"]["host"], r["ruleId"], r["properties"]["device"], r["properties"]["mountpoint"])
                     for r in results)
    assert identities == set((h, f["rule"], f["device"], f["mountpoint"]) for h, f in findings)
    for result in results:
        assert rules[result["ruleIndex"]]["id"] == result["ruleId"]
    levels = dict(((r["properties"]["host"], r["ruleId"], r["properties"]["mountpoint"]), r["level"]) for r in results)
    assert levels[(EXAMPLE_HOST, "EXT4_NOBARRIER", "/var/lib/db")] == "error"
    assert levels[(EXAMPLE_HOST, "EXT4_ONLINE_DISCARD", "/data")] == "note"

    # Host strings are JSON data, kept exactly.
    hostile = [r for r in results if r["properties"]["mountpoint"] == HOSTILE]
    assert hostile and hostile[0]["locations"][0]["logicalLocations"][0]["fullyQualifiedName"] == \
        "odd \"host\"\n<b>:" + HOSTILE
    assert hostile[0]["message"]["text"].startswith("odd \"host\"\n<b>: /srv/<script>alert(1)</script> | `$(rm")

    # The unreachable host is a notification, and the run did not fully succeed.
    invocation = run["invocations"][0]
    assert invocation["executionSuccessful"] is False
    assert [n["properties"]["host"] for n in invocation["toolExecutionNotifications"]] == ["gone"]
    assert run["properties"]["verdict"] == "incomplete"


def test_locations_point_into_the_repository(runs):
    catalog_lines = open(os.path.join(ROOT, "rules", "catalog.yml")).read().splitlines()
    for result in load(runs[0])["runs"][0]["results"]:
        physical = result["locations"][0]["physicalLocation"]
        uri = physical["artifactLocation"]["uri"]
        assert physical["artifactLocation"]["uriBaseId"] == "%SRCROOT%"
        if result["properties"]["host"] == EXAMPLE_HOST:
            assert uri == "inventories/example/host_vars/%s.yml" % EXAMPLE_HOST
        else:  # no host_vars file: the rule's catalog entry
            assert uri == "rules/catalog.yml"
            line = catalog_lines[physical["region"]["startLine"] - 1]
            assert line.strip() == "- id: " + result["ruleId"], line
        assert os.path.isfile(os.path.join(ROOT, uri))


def test_waived_findings_are_suppressed(runs):
    results = load(runs[0])["runs"][0]["results"]
    suppressed = [r for r in results if r.get("suppressions")]
    assert [(r["properties"]["host"], r["ruleId"]) for r in suppressed] == [(EXAMPLE_HOST, "EXT4_ONLINE_DISCARD")]
    assert suppressed[0]["suppressions"] == [{"kind": "external", "status": "accepted", "justification":
                                              "the database wants online discard (approver storage-team, until 2099-01-01T00:00:00Z)"}]


def test_results_and_fingerprints_are_stable_across_runs(runs):
    first, second = (load(folder)["runs"][0] for folder in runs)
    assert first["automationDetails"] != second["automationDetails"]  # two runs...
    assert first["results"] == second["results"]                      # ...the same results
    prints = [r["partialFingerprints"][sarif.FINGERPRINT] for r in first["results"]]
    assert len(set(prints)) == len(prints)  # one per finding identity
    text = open(os.path.join(runs[0], "report.sarif")).read()
    assert "run-1" not in json.dumps(first["results"]) and text.count("\n") == len(prints)  # not indented


def test_fingerprint_is_the_identity_only():
    finding = {"rule": "R", "device": "/dev/a", "mountpoint": "/x", "severity": "low", "message": "m"}
    same = dict(finding, severity="high", message="other words", waived=True)
    assert sarif.fingerprint("h", finding) == sarif.fingerprint("h", same)
    for other in (("h2", finding), ("h", dict(finding, device="/dev/b")), ("h", dict(finding, mountpoint="/y")),
                  ("h", dict(finding, rule="S"))):
        assert sarif.fingerprint(*other) != sarif.fingerprint("h", finding)
    # parts cannot run into each other
    assert sarif.fingerprint("a:b", dict(finding, mountpoint="c")) != sarif.fingerprint("a", dict(finding, mountpoint="b:c"))


@settings(max_examples=300, deadline=None)
@given(st.text(), st.text(), st.one_of(st.none(), st.text()), st.one_of(st.none(), st.text()))
def test_fingerprint_is_the_one_earlier_runs_made(host, rule, device, mountpoint):
    """Fingerprints are compared across runs: they stay sha256 of json.dumps of the identity
    (any text, lone surrogates and non-BMP characters included)."""
    key = [host, rule, device, mountpoint]
    earlier = hashlib.sha256(json.dumps(key).encode("utf-8")).hexdigest()
    assert sarif.fingerprint(host, {"rule": rule, "device": device, "mountpoint": mountpoint}) == earlier


def test_baseline_state(runs, tmp_path):
    third = make_run(tmp_path, "run-3", [record("odd \"host\"\n<b>", (HOSTILE, NOBARRIER), ("/srv", NOBARRIER)),
                                         record("gone", status="unreachable")])
    rc, out, err = cli("report", third, "--baseline", runs[1])
    assert rc == 2, (out, err)
    log = load(third)
    assert not schema_errors(log)
    states = dict(((r["ruleId"], r["properties"]["mountpoint"]), r["baselineState"]) for r in log["runs"][0]["results"])
    assert states[("EXT4_NOBARRIER", "/srv")] == "new" and states[("EXT4_NOBARRIER", HOSTILE)] == "unchanged"


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
