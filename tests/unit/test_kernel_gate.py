"""The kernel gate's comparison on synthetic probe results with known answers."""

import json
import random

from ext4audit import cli, kernel_gate


def record(dspans, confirmations=(), status="ran"):
    runs = [{"id": i, "dspan": d, "ideal": 65536} for i, d in enumerate(dspans)]
    return {"host": "h", "status": status, "reason": None, "mountpoint": "/",
            "result": {"sweep": {"runs": runs}, "confirmations": list(confirmations)}}


def confirmation(ratio, spread, probe="rename_over_existing"):
    return {"id": probe, "status": "measured", "mountpoint": None, "ratio": ratio, "ratio_spread": spread}


def side(host, rec, findings=()):
    return {"host": host, "record": rec, "report": {"kernel": {"release": host}, "findings": list(findings)}}


_rng = random.Random(1)
BASE = [_rng.randint(65536, 1 << 22) for _ in range(64)]
PLAN = ("seed 1", "seed 1")


def test_identical_runs_pass():
    gate = kernel_gate.evaluate(side("6.1", record(BASE)), side("6.12", record(BASE)), PLAN)
    assert gate["verdict"] == "pass", gate["reason"]
    assert gate["dspan"]["wilcoxon_p"] == 1.0 and gate["dspan"]["effect_size"] == 0.0


def test_noise_without_direction_passes():
    rng = random.Random(2)
    noisy = [d * rng.uniform(0.9, 1.1) for d in BASE]
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", record(noisy)), PLAN)
    assert gate["verdict"] == "pass", gate["reason"]


def test_larger_dspans_fail_with_the_numbers():
    worse = [d * 3 for d in BASE]
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", record(worse)), PLAN)
    assert gate["verdict"] == "fail"
    d = gate["dspan"]
    assert d["wilcoxon_p"] < 1e-6 and d["effect_size"] == 1.0
    assert abs(d["p99_change"] - 2.0) < 1e-9 and d["median_ratio"] == 3.0
    assert any(c.startswith("dspan:") for c in gate["failed_checks"])
    assert any(c.startswith("tail_share:") for c in gate["failed_checks"])


def test_smaller_dspans_are_not_a_regression():
    better = [d / 2 for d in BASE]
    assert kernel_gate.evaluate(side("a", record(BASE)), side("b", record(better)), PLAN)["verdict"] == "pass"


def test_confirmation_ratio_rise_fails_only_when_spreads_are_apart():
    apart = kernel_gate.evaluate(side("a", record(BASE, [confirmation(2.0, [1.8, 2.2])])),
                                 side("b", record(BASE, [confirmation(5.0, [4.5, 6.0])])), PLAN)
    assert apart["verdict"] == "fail" and "confirmation rename_over_existing" in apart["reason"]
    overlap = kernel_gate.evaluate(side("a", record(BASE, [confirmation(2.0, [1.0, 4.0])])),
                                   side("b", record(BASE, [confirmation(3.0, [2.5, 6.0])])), PLAN)
    assert overlap["verdict"] == "pass", overlap["reason"]


def test_new_finding_on_candidate_fails():
    finding = {"rule": "KERNEL_DIO_CORRUPTION_6_1_64", "severity": "critical", "mountpoint": None, "waived": False}
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", record(BASE), [finding]), PLAN)
    assert gate["verdict"] == "fail"
    assert gate["new_findings"] == [{"rule": "KERNEL_DIO_CORRUPTION_6_1_64", "mountpoint": None}]
    waived = dict(finding, waived=True)
    assert kernel_gate.evaluate(side("a", record(BASE)), side("b", record(BASE), [waived]), PLAN)["verdict"] == "pass"


def test_missing_probe_or_different_plans_are_incomplete():
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", record([], status="failed")), PLAN)
    assert gate["verdict"] == "incomplete" and "candidate: no probe sweep" in gate["reason"]
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", record(BASE)), ("seed 1", "seed 2"))
    assert gate["verdict"] == "incomplete" and "different plans" in gate["reason"]


def test_cli_writes_the_reports_and_exits_by_verdict(tmp_path, capsys):
    from ext4audit import probe
    run = tmp_path / "run"
    (run / "probe").mkdir(parents=True)
    (run / "hosts").mkdir()
    (run / "probe" / "plan.json").write_text(json.dumps(probe.make_plan(1, 64)))
    for name, host, dspans in (("b", "base<1>", BASE), ("c", "cand", [d * 3 for d in BASE])):
        rec = record(dspans)
        rec["host"] = host
        rec["result"].update(schema="ext4-fleet-audit/probe-result/v1", kernel="k", duration_s=1.0)
        (run / "probe" / (name + ".json")).write_text(json.dumps(rec))
        (run / "hosts" / (cli.reports.safe_name(host) + ".json")).write_text(
            json.dumps({"host": host, "kernel": {"release": "k-" + name}, "findings": []}))
    assert cli.main(["kernel-gate", str(run), "--baseline", "base<1>", "--candidate", "cand"]) == 1
    assert "kernel gate: fail: dspan:" in capsys.readouterr().out
    gate = json.loads((run / "kernel_gate.json").read_text())
    assert gate["verdict"] == "fail" and gate["baseline"]["kernel"] == "k-b"
    md = (run / "kernel_gate.md").read_text()
    assert md.startswith("## Kernel gate: FAIL") and "base<1>" not in md
    # a generous tolerance passes the same runs; an unknown host is incomplete (exit 2)
    assert cli.main(["kernel-gate", str(run), "--baseline", "base<1>", "--candidate", "cand",
                     "--dspan-tolerance", "5", "--tail-tolerance", "1"]) == 0
    assert cli.main(["kernel-gate", str(run), "--baseline", "nobody", "--candidate", "cand"]) == 2
