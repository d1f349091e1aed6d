"""The probe's controller side: plans, the sweep analysis on data with known answers, and probe
records through `python -m ext4audit report` (run as a real process)."""

import collections
import hashlib
import itertools
import json
import os
import re
import subprocess
import sys

import pytest
import yaml

from ext4audit.probe import analysis as probe
from ext4audit.rules import catalog as catalog_mod
from conftest import ROOT
from test_reports import HOSTILE, cli, write_run
from test_rules import facts


def key(value):
    return json.dumps(value)


# ------------------------------------------------------------------ plans
@pytest.mark.parametrize("level_set", ["short", "paper"])
def test_every_level_of_every_factor_is_hit_evenly(level_set):
    plan = probe.make_plan(runs=256, level_set=level_set)
    assert [t["id"] for t in plan["treatments"]] == list(range(256))
    assert list(plan["factors"]) == probe.factor_names()
    for name, levels in plan["factors"].items():
        counts = collections.Counter(key(t[name]) for t in plan["treatments"])
        hits = [counts[key(level)] for level in levels]
        assert sum(hits) == 256, name  # every treatment takes one of the listed levels
        assert max(hits) - min(hits) <= 1, (name, hits)


def test_same_seed_same_plan_other_seed_other_plan():
    plan = probe.make_plan(seed=7, runs=64)
    assert plan == probe.make_plan(seed=7, runs=64)
    assert plan["treatments"] != probe.make_plan(seed=8, runs=64)["treatments"]
    assert probe.make_plan()["seed"] == probe.DEFAULT_SEED and probe.make_plan()["runs"] == probe.DEFAULT_RUNS
    assert json.loads(json.dumps(plan)) == plan  # plain JSON types, no numpy scalars


# sha256 of `ext4audit plan --seed S --runs N --levels L --out FILE`, as written by the code that
# drew the plan with scipy.stats.qmc.LatinHypercube (commit 119e714, scipy 1.17.1, numpy 2.4.6):
# plans made before and after compare treatment by treatment only if they are the same bytes.
SCIPY_PLAN_FILES = {
    (20150216, 256, "short"): "afb6c4311508ca6303a856d1bf726fe36edc655baac25bec84a6169bdb99fd0e",
    (7, 64, "short"): "9b30db326410cea8ce5f171f7ee4c895b85f47f75162f218e4abe8bdc22527be",
    (5, 16, "paper"): "cd2d5b5f5c4009bd6b51496f3107f5d0d35a9d7620b5e3ced9489d96362caabd",
    (1, 1, "short"): "37f35bd0c4e3a658812a48ebca17ea311252d3607346951d9a063b1aacfa94bd",
    (20150216, 256, "paper"): "eaeb025402e07ea50d2b8e9ffb33c9e9a2546260bde80212b47db93a69ae1da1",
    (4294967295, 1000, "short"): "a191a827a5ebeea425567ff2fdba06596415caf24e69f53676dd9b65fa072c7b",
}


@pytest.mark.parametrize("seed, runs, level_set", sorted(SCIPY_PLAN_FILES))
def test_plan_file_is_byte_for_byte_the_scipy_plan(tmp_path, seed, runs, level_set):
    out = tmp_path / "plan.json"
    assert cli("plan", "--seed", str(seed), "--runs", str(runs), "--levels", level_set, "--out", str(out))[0] == 0
    assert hashlib.sha256(out.read_bytes()).hexdigest() == SCIPY_PLAN_FILES[(seed, runs, level_set)]


@pytest.mark.parametrize("seed, runs, dims", [(0, 1, 1), (3, 7, 12), (20150216, 256, 12), (2 ** 63, 50, 3),
                                              (99, 4096, 12)])
def test_lhs_draws_scipys_numbers_without_scipy(seed, runs, dims):
    from scipy.stats import qmc
    expected = qmc.LatinHypercube(d=dims, scramble=False, rng=seed).random(runs)
    assert probe.lhs_centres(seed, runs, dims).tolist() == expected.tolist()


def test_making_a_plan_does_not_import_scipy(tmp_path):
    """scipy's import took 0.6 s of every `make audit` (issue 17)."""
    code = ("import sys; from ext4audit.cli import commands as cli; rc = cli.main(['plan', '--out', sys.argv[1]]); "
            "print(rc, sorted(m for m in sys.modules if m.split('.')[0] == 'scipy')[:3])")
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "plan.json")], stdout=subprocess.PIPE,
                         universal_newlines=True, check=True, cwd=ROOT, env=dict(os.environ, PYTHONPATH=ROOT))
    assert out.stdout.split("\n")[-2] == "0 []"


def test_generated_levels_match_itertools_and_index_lazily():
    paper = probe.levels("paper")
    assert list(paper["ChunkOrder"]) == [list(p) for p in itertools.permutations(range(4))]
    assert list(paper["Fsync"]) == [list(p) for p in itertools.product([False, True], repeat=4)]
    assert list(paper["Sync"]) == [list(p) + [True] for p in itertools.product([False, True], repeat=3)]
    assert list(paper["FileSize"]) == [x * 1024 for x in range(8, 257, 8)]
    assert list(probe.levels("short")["FileSize"]) == [x * 1024 for x in range(32, 257, 32)]
    # 16 chunks (where Chopper ran out of memory): the last of 16! orders, without the others.
    orders = probe._levels({"permutations": 16}, "test")
    assert len(orders) == 20922789888000 and orders[len(orders) - 1] == list(range(15, -1, -1))
    for treatment in probe.make_plan(runs=256, level_set="paper")["treatments"]:
        assert sorted(treatment["ChunkOrder"]) == [0, 1, 2, 3]
        assert len(treatment["Fsync"]) == len(treatment["Sync"]) == 4 and treatment["Sync"][-1] is True


@pytest.mark.parametrize("spec, message", [
    ({"eval": "__import__('os')"}, "neither a list"),
    ({"range": [1, 2]}, "range needs"),
    ({"range": [0.5, 2, 1]}, "must be integers"),
    ({"permutations": 3, "append": True}, "neither a list"),
    ([], "has no levels"),
])
def test_level_specs_are_data_not_code(spec, message):
    with pytest.raises(probe.ProbeError, match=message):
        probe._levels(spec, "test")


def test_level_labels():
    assert probe.level_label("FileSize", 262144) == "256 KiB"
    assert probe.level_label("DiskSize", 268435456) == "256 MiB"
    assert probe.level_label("DiskSize", 64 << 30) == "64 GiB"
    assert probe.level_label("UsedRatio", 0.4) == "0.4"
    assert probe.level_label("ChunkOrder", [2, 0, 3, 1]) == "[2, 0, 3, 1]"
    assert probe.level_label("Sync", [True, False, False, True]) == "1001"
    assert probe.level_label("DirectorySpan", 12) == "12"


def test_plan_command(tmp_path):
    out = str(tmp_path / "plan.json")
    rc, stdout, err = cli("plan", "--seed", "5", "--runs", "16", "--levels", "paper", "--out", out)
    assert rc == 0, err
    assert stdout == "plan: 16 runs, seed 5, level set paper -> %s\n" % out
    assert json.load(open(out)) == probe.make_plan(5, 16, "paper")
    rc, stdout, err = cli("plan", "--levels", "huge", "--out", out)
    assert rc == 2 and "unknown level set 'huge'" in err
    rc, stdout, err = cli("plan", "--runs", "0", "--out", out)
    assert rc == 2 and "runs must be a positive integer" in err
    assert json.load(open(out))["runs"] == 16  # a failed plan command leaves the old file alone


# ------------------------------------------------------------------ analysis with known answers
def factorial(factors, response, replicates=1, ideal=lambda t: 1):
    """A plan over the full factorial of `factors` and a sweep result with Y = response(treatment)."""
    names = list(factors)
    treatments = [dict(zip(names, combo)) for _ in range(replicates)
                  for combo in itertools.product(*factors.values())]
    for number, treatment in enumerate(treatments):
        treatment["id"] = number
    runs = [{"id": t["id"], "dspan": response(t), "ideal": ideal(t)} for t in treatments]
    return {"factors": factors, "treatments": treatments}, {"sweep": {"runs": runs}}


def shares(analysis):
    main = dict((e["factor"], e["s"]) for e in analysis["prioritization"])
    pairs = dict((tuple(e["factors"]), e["s"]) for e in analysis["interactions"])
    return main, pairs


def test_a_factor_that_alone_decides_explains_everything():
    plan, result = factorial({"FileSize": [8192, 16384, 32768], "CPUCount": [1, 2]},
                             lambda t: 3 * t["FileSize"], replicates=2)
    analysis = probe.analyze(plan, result)
    main, pairs = shares(analysis)
    assert [e["factor"] for e in analysis["prioritization"]] == ["FileSize", "CPUCount"]
    assert main["FileSize"] == pytest.approx(1) and main["CPUCount"] == pytest.approx(0, abs=1e-12)
    assert pairs[("CPUCount", "FileSize")] == pytest.approx(0, abs=1e-12)
    assert analysis["runs_planned"] == analysis["runs_completed"] == 12


@pytest.mark.parametrize("response, s_a, s_b, s_ab", [
    # additive: Var(a) = 1, Var(b) = 9 over the balanced 2 x 2 design
    (lambda t: 100 + {1: 0, 2: 2}[t["FileCount"]] + {1: 0, 2: 6}[t["CPUCount"]], 0.1, 0.9, 0.0),
    # pure interaction (XOR): no main effect, all of the variance in the pair
    (lambda t: 1 + (t["FileCount"] == t["CPUCount"]), 0.0, 0.0, 1.0),
])
def test_shares_are_analytic(response, s_a, s_b, s_ab):
    plan, result = factorial({"CPUCount": [1, 2], "FileCount": [1, 2]}, response, replicates=3)
    main, pairs = shares(probe.analyze(plan, result))
    assert main["FileCount"] == pytest.approx(s_a, abs=1e-12)
    assert main["CPUCount"] == pytest.approx(s_b, abs=1e-12)
    assert pairs[("CPUCount", "FileCount")] == pytest.approx(s_ab, abs=1e-12)


def test_tail_mapping_and_quantiles_by_construction():
    # 20 runs: Y = 100 when DirectorySpan = 10 (2 runs), 1 otherwise. p90 (R type 7) = 1 + 0.1 * 99.
    plan, result = factorial({"DirectorySpan": list(range(1, 11)), "FileCount": [1, 2]},
                             lambda t: 100 if t["DirectorySpan"] == 10 else 1, ideal=lambda t: 0.5)
    analysis = probe.analyze(plan, result)
    assert analysis["dspan"] == {"p50": 1.0, "p90": pytest.approx(10.9), "p99": 100.0}
    assert analysis["tail_vs_ideal"] == {"p50": 2.0, "p90": pytest.approx(21.8), "p99": 200.0}
    mapping = analysis["mapping"]
    assert mapping["threshold"] == pytest.approx(10.9) and mapping["tail_runs"] == 2
    assert mapping["factors"]["DirectorySpan"]["10"] == {"runs": 2, "tail_share": 1.0}
    assert mapping["factors"]["DirectorySpan"]["3"] == {"runs": 2, "tail_share": 0.0}
    assert mapping["factors"]["FileCount"] == {"1": {"runs": 10, "tail_share": 0.1},
                                                "2": {"runs": 10, "tail_share": 0.1}}
    assert shares(analysis)[0]["DirectorySpan"] == pytest.approx(1)


def test_equal_responses_give_zero_shares_and_say_so():
    plan, result = factorial({"CPUCount": [1, 2], "FileCount": [1, 2]}, lambda t: 4096, replicates=3)
    analysis = probe.analyze(plan, result)
    assert [e["s"] for e in analysis["prioritization"] + analysis["interactions"]] == [0.0, 0.0, 0.0]
    assert any("Var(Y) = 0" in note for note in analysis["notes"])
    assert analysis["mapping"]["tail_runs"] == 12


def test_few_runs_give_quantiles_only_and_garbage_is_ignored():
    plan, result = factorial({"CPUCount": [1, 2], "FileCount": [1, 2]}, lambda t: 10 * t["id"])
    result["sweep"]["runs"] += [{"id": 99, "dspan": 5, "ideal": 1}, {"id": 0, "dspan": 7, "ideal": 1},
                                {"id": 1, "dspan": "big", "ideal": 1}, "not a run"]
    analysis = probe.analyze(plan, result)
    assert analysis["runs_completed"] == 4 and analysis["dspan"]["p50"] == 15.0
    assert analysis["prioritization"] == [] and analysis["mapping"] is None
    assert any("4 run entries ignored" in note for note in analysis["notes"])
    assert any("too few for factor analysis" in note for note in analysis["notes"])
    empty = probe.analyze(plan, {"sweep": {"runs": []}})
    assert empty["runs_completed"] == 0 and empty["dspan"] == {"p50": None, "p90": None, "p99": None}


# ------------------------------------------------------------------ the catalog's confirmation blocks
@pytest.mark.parametrize("confirmation, message", [
    ({"probe": "rename_over_existing", "confirmed_at": 0.5, "escalate_to": "medium"}, "ratio above 1"),
    ({"probe": "rename_over_existing", "confirmed_at": 2.0, "escalate_to": "urgent"}, "escalate_to"),
    ({"probe": "rename_over_existing", "confirmed_at": 2.0}, "confirmation has no escalate_to"),
    ({"probe": "$(reboot)", "confirmed_at": 2.0, "escalate_to": "medium"},
     r"confirmation.probe '\$\(reboot\)' is not one of rename_over_existing, "),
])
def test_catalog_validates_confirmations(tmp_path, confirmation, message):
    doc = yaml.safe_load(open(os.path.join(catalog_mod.RULES_DIR, "catalog.yml")))
    doc["rules"][0]["confirmation"] = confirmation
    (tmp_path / "catalog.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "kernel_issues.yml").write_text(open(os.path.join(catalog_mod.RULES_DIR, "kernel_issues.yml")).read())
    with pytest.raises(catalog_mod.CatalogError, match=message):
        catalog_mod.load(str(tmp_path))


# ------------------------------------------------------------------ probe records in the reports
PLAN = probe.make_plan(runs=32)


def measured(probe_id, ratio, mountpoint=None, status="measured", reason=None):
    return {"id": probe_id, "seed": "000", "status": status, "reason": reason, "metric": "latency p50", "unit": "s",
            "mountpoint": mountpoint, "risky": {"label": "risky", "options": "a", "samples": [ratio]},
            "safe": {"label": "safe", "options": "b", "samples": [1.0]}, "ratio": ratio,
            "ratio_spread": [ratio * 0.8, ratio * 1.25] if ratio else None, "repetitions": 5}


def record(host, status="ran", confirmations=(), reason=None, mountpoint="/data"):
    runs = [{"id": t["id"], "dspan": t["FileSize"] * (1 + t["id"] % 4), "ideal": t["FileSize"], "extents": 2,
             "layout_score": 0.9, "files": []} for t in PLAN["treatments"]]
    result = {"schema": probe.RESULT_SCHEMA, "status": "ok", "reason": None, "kernel": "6.1.0-28-amd64",
              "started_at": "2026-11-21T12:00:00Z", "duration_s": 42.5,
              "replica": {"mkfs_args": ["-b", "4096"], "mount_options": "rw,data=ordered", "adjustments": []},
              "sweep": {"planned": 32, "completed": 32, "stopped_by": None, "images_built": 4, "images_seconds": 1.5,
                        "runs_seconds": 3.0, "runs": runs, "errors": []},
              "confirmations": list(confirmations), "resources": {"peak_rss_bytes": 1, "scratch_peak_bytes": 2}}
    return {"host": host, "status": status, "reason": reason, "mountpoint": mountpoint,
            "result": result if status == "ran" else None}


def audited(host, netfs=()):
    tree = facts(netfs=netfs)
    tree["schema"] = "ext4-fleet-audit/facts/v1"
    return {"host": host, "groups": [], "status": "audited", "facts": tree}


def write_probe(run_dir, docs):
    os.makedirs(os.path.join(run_dir, "probe"))
    for index, doc in enumerate(docs):
        with open(os.path.join(run_dir, "probe", "%d.json" % index), "w") as handle:
            handle.write(doc if isinstance(doc, str) else json.dumps(doc))


def by_rule(report, rule):
    return [f for f in report["findings"] if f["rule"] == rule]


@pytest.fixture
def probe_run(tmp_path):
    path = str(tmp_path / "reports" / "run-probe")
    nfs = {"mountpoint": HOSTILE, "fstype": "nfs4", "source": "nfs:/export", "options": ["rw"]}
    write_run(path, [audited("db-1", netfs=[nfs]), audited("web-2"), audited("cache-3"), audited("old-4"),
                     audited("root-5")])
    write_probe(path, [PLAN,
                       record("db-1", confirmations=[measured("rename_over_existing", 3.0),
                                                     measured("netfs_mkdir_existing", 40.0, mountpoint=HOSTILE),
                                                     measured("xattr_set", None, status="skipped",
                                                              reason="no <xattr> support")]),
                       record("web-2", confirmations=[measured("rename_over_existing", 1.2),
                                                      measured("<img src=x>", None, status="error",
                                                               reason="unknown confirmation probe")]),
                       record("cache-3", status="failed", reason="scratch dir <b>full</b>"),
                       record("root-5", mountpoint="/", confirmations=[measured("rename_over_existing", 5.0)])])
    return path


def test_probe_sections_confirmations_and_escalation(probe_run):
    rc, out, err = cli("report", probe_run)
    assert rc == 0, (out, err)  # only info findings (one raised to medium): a pass at fail_on=high
    hosts = dict((name, json.load(open(os.path.join(probe_run, "hosts", name + ".json"))))
                 for name in ("db-1", "web-2", "cache-3", "old-4", "root-5"))

    section = hosts["db-1"]["probe"]
    assert (section["status"], section["mountpoint"], section["kernel"], section["duration_s"]) == \
        ("ran", "/data", "6.1.0-28-amd64", 42.5)
    sweep = section["sweep"]
    assert (sweep["runs_planned"], sweep["runs_completed"], sweep["seed"], sweep["level_set"]) == \
        (32, 32, probe.DEFAULT_SEED, "short")
    assert sweep["dspan"]["p90"] > sweep["dspan"]["p50"] > 0 and sweep["prioritization"][0]["s"] > 0
    assert sorted(sweep["mapping"]["factors"]["FileSize"]) == sorted(
        probe.level_label("FileSize", v) for v in PLAN["factors"]["FileSize"])
    assert [c["id"] for c in section["confirmations"]] == ["rename_over_existing", "netfs_mkdir_existing", "xattr_set"]

    rename, = by_rule(hosts["db-1"], "EXT4_AUTO_DA_ALLOC_RENAME")
    assert rename["confirmation"] == {"probe": "rename_over_existing", "status": "confirmed", "ratio": 3.0,
                                      "spread": [2.4000000000000004, 3.75], "threshold": 2.0,
                                      "probed_mountpoint": "/data", "metric": "latency p50", "reason": None}
    assert (rename["severity"], rename["base_severity"]) == ("medium", "info")
    assert "latency p50 at 3 times the safe option set's" in rename["escalated_because"]
    netfs, = by_rule(hosts["db-1"], "NETFS_METADATA_ROUNDTRIP")
    assert netfs["severity"] == "low" and netfs["confirmation"]["probed_mountpoint"] == HOSTILE
    assert by_rule(hosts["db-1"], "EXT4_ERRORS_CONTINUE")[0].get("confirmation") is None  # no confirmation block

    below, = by_rule(hosts["web-2"], "EXT4_AUTO_DA_ALLOC_RENAME")
    assert below["confirmation"]["status"] == "not_reproduced" and below["confirmation"]["ratio"] == 1.2
    assert below["severity"] == "info" and below["escalated_because"] is None
    failed, = by_rule(hosts["cache-3"], "EXT4_AUTO_DA_ALLOC_RENAME")
    assert failed["confirmation"]["status"] == "not_measured"
    assert failed["confirmation"]["reason"] == "probe failed: scratch dir <b>full</b>"
    assert {"where": "probe", "reason": "failed: scratch dir <b>full</b>"} in hosts["cache-3"]["errors"]
    assert hosts["old-4"]["probe"] is None
    assert by_rule(hosts["old-4"], "EXT4_AUTO_DA_ALLOC_RENAME")[0]["confirmation"]["reason"] == \
        "no probe record for this host"
    other, = by_rule(hosts["root-5"], "EXT4_AUTO_DA_ALLOC_RENAME")  # on /data; the probe replicated /
    assert other["severity"] == "info" and other["confirmation"]["status"] == "not_measured"
    assert other["confirmation"]["reason"] == "the probe replicated /, not this filesystem"

    summary = json.load(open(os.path.join(probe_run, "summary.json")))
    assert summary["verdict"] == "pass"  # a failed probe does not change the verdict...
    assert summary["probe"]["failed"] == [{"host": "cache-3", "status": "failed", "reason": "scratch dir <b>full</b>"}]
    assert "probe did not run on 1 host(s) (cache-3: failed)" in summary["reason"]  # ...but is never silent
    overview = dict((row["host"], row) for row in summary["probe"]["hosts"])
    assert sorted(overview) == ["cache-3", "db-1", "root-5", "web-2"]
    assert overview["db-1"]["runs_completed"] == 32 and overview["db-1"]["dspan_p99"] > 0
    assert {"id": "rename_over_existing", "status": "measured", "ratio": 3.0, "mountpoint": None} in \
        overview["db-1"]["confirmations"]
    assert [row["probe"] for row in summary["hosts"]] == ["ran", "ran", "failed", None, "ran"]
    assert summary["counts"]["by_severity"]["medium"] == 1
    assert "probe" in out.splitlines()[0] and "failed" in out

    markdown = open(os.path.join(probe_run, "summary.md")).read()
    assert "<script>" not in markdown and "<b>" not in markdown and "<xattr>" not in markdown and "<img" not in markdown
    assert "confirmation &lt;img src=x&gt; (latency p50): error: unknown confirmation probe" in markdown
    assert "- **Probe** ran on /data (6.1.0\\-28\\-amd64, 42.5 s)" in markdown
    assert "confirmation netfs\\_mkdir\\_existing on /srv/&lt;script&gt;" in markdown
    assert "ratio 3 (spread 2.4 to 3.75) over 5 repetitions" in markdown
    assert "  - Probe: confirmed: `rename_over_existing` (latency p50) ratio 3 >= 2" in markdown
    assert "  - Probe: not reproduced: `rename_over_existing` (latency p50) ratio 1.2 < 2" in markdown
    assert "  - Probe: not measured (`rename_over_existing`): probe failed: scratch dir &lt;b&gt;full&lt;/b&gt;" \
        in markdown
    assert "d-span p50 " in markdown and "what the d-span depends on most" in markdown

    # The gate re-reads the reports with their probe sections and keeps the escalated severity.
    assert cli("gate", probe_run, "--fail-on", "medium")[0] == 1


def allocator_section(**issue_changes):
    issues = [{"id": issue_id, "name": name, "verdict": "absent", "reason": None, "pairs": 12,
               "effect": {"dspan_p50_ratio": 1.0, "dspan_p90_ratio": 1.0, "tail_share_trigger": 1.0,
                          "tail_share_control": 1.0}, "p_value": 1.0, "test": "exact one-sided sign test"}
              for issue_id, name in probe.ALLOCATOR_ISSUES.items()]
    issues[0].update(issue_changes)
    return {"status": "ran", "reason": None, "issues": issues}


def with_allocator(rec, section):
    rec["result"]["allocator"] = section
    return rec


def test_allocator_section_is_carried_into_the_host_report(tmp_path):
    path = str(tmp_path / "run")
    write_run(path, [audited("db-1"), audited("web-2")])
    present = allocator_section(verdict="present", p_value=0.000244,
                                effect={"dspan_p50_ratio": 64.5, "dspan_p90_ratio": 64.5, "tail_share_trigger": 1.0,
                                        "tail_share_control": 0.0})
    failed = {"status": "error", "reason": "Special End: no space left", "issues": []}
    write_probe(path, [PLAN, with_allocator(record("db-1"), present), with_allocator(record("web-2"), failed)])
    assert cli("report", path)[0] == 0
    sections = dict((host, json.load(open(os.path.join(path, "hosts", host + ".json")))["probe"])
                    for host in ("db-1", "web-2"))
    assert sections["db-1"]["allocator"] == present and sections["db-1"]["errors"] == []
    assert sections["web-2"]["allocator"] == failed
    assert sections["web-2"]["errors"] == ["allocator: Special End: no space left"]


@pytest.mark.parametrize("section, message", [
    ({"status": "done", "reason": None, "issues": []}, "$.result.allocator.status 'done' is not one of ran, skipped, error"),
    (allocator_section(id="normalisation"), "issues[0]: 'normalisation' named 'Scheduler Dependency' is not one of the four"),
    (allocator_section(verdict="maybe"), "issues[0].verdict 'maybe' is not one of present, absent, inconclusive"),
    (allocator_section(p_value=1.5), "issues[0].p_value: Expected `float` <= 1.0"),
    (allocator_section(pairs="12"), "issues[0].pairs: Expected `int`, got `str`"),
    (allocator_section(effect={"dspan_p50_ratio": "big"}), "issues[0].effect.dspan_p50_ratio: Expected `float | null`"),
], ids=["status", "issue-id", "verdict", "p-value", "pairs", "effect"])
def test_a_malformed_allocator_section_is_refused(section, message):
    """The shape is the contract's (contract.Allocator); that an id goes with its name is probe.check_record's."""
    with pytest.raises(ValueError, match="probe record \\(host 'db-1'\\): .*" + re.escape(message)):
        probe.check_record(with_allocator(record("db-1"), section))


@pytest.mark.parametrize("content, message", [
    ("{not json", "is not valid JSON"),
    (json.dumps({"host": "db-1", "status": "exploded"}), "status 'exploded' is not one of"),
    (json.dumps({"host": "db-1", "status": "ran", "result": None}), "status is ran but there is no result"),
    (json.dumps({"host": "db-1", "status": "ran", "result": {"schema": "other"}}), "is not a ext4-fleet-audit/probe"),
    (json.dumps(dict(record("db-1"), host=None)), "1.json: $.host: Expected `str`, got `null`"),
    (json.dumps(record("db-1", confirmations=[dict(measured("xattr_set", 2.0), ratio="2x")])),
     "(host 'db-1'): $.result.confirmations[0].ratio: Expected `float | null`, got `str`"),
], ids=["not-json", "unknown-status", "ran-without-result", "other-schema", "no-host", "ratio-not-a-number"])
def test_corrupt_probe_record_exits_2(tmp_path, content, message):
    path = str(tmp_path / "run")
    write_run(path, [audited("db-1")])
    write_probe(path, [PLAN, content])
    rc, out, err = cli("report", path)
    assert rc == 2 and "probe file" in err and message in err, err
    assert "Traceback" not in err and not os.path.exists(os.path.join(path, "summary.json"))


def test_sweep_without_a_plan_is_reported_not_analysed(tmp_path):
    path = str(tmp_path / "run")
    write_run(path, [audited("db-1")])
    write_probe(path, [record("db-1")])
    assert cli("report", path)[0] == 0
    section = json.load(open(os.path.join(path, "hosts", "db-1.json")))["probe"]
    assert section["sweep"] is None and section["errors"] == ["sweep not analysed: the run folder has no probe plan"]
