"""The kernel gate's comparison on synthetic probe results with known answers."""

import json
import random

import pytest

from ext4audit.cli import commands as cli
from ext4audit.steps import kernel_gate
from ext4audit.rules import kernel_records


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


def test_a_confirmation_the_probes_scope_skipped_is_not_compared():
    """chopper_probe_confirm_scope `own` (the playbook sets `all`): a probe skipped on both sides
    has no row; measured on one side only, its row says so and never fails."""
    skipped = {"id": "buffered_write_fsync", "seed": "001", "status": "skipped", "mountpoint": None, "ratio": None,
               "ratio_spread": None, "repetitions": 0, "risky": None, "safe": None,
               "reason": "not your configuration: the replica of / does not use nodelalloc (set "
                         "chopper_probe_confirm_scope: all to measure it)"}
    both = kernel_gate.evaluate(side("a", record(BASE, [confirmation(2.0, [1.8, 2.2]), skipped])),
                                side("b", record(BASE, [confirmation(2.0, [1.8, 2.2]), skipped])), PLAN)
    assert both["verdict"] == "pass", both["reason"]
    assert [row["probe"] for row in both["confirmations"]] == ["rename_over_existing"]
    one = kernel_gate.evaluate(side("a", record(BASE, [skipped])),
                               side("b", record(BASE, [confirmation(5.0, [4.5, 6.0], "buffered_write_fsync")])), PLAN)
    assert one["verdict"] == "pass", one["reason"]
    [row] = one["confirmations"]
    assert (row["probe"], row["baseline"], row["candidate"]) == ("buffered_write_fsync", None, 5.0)
    assert row["failed"] is False
    assert row["detail"] == "measured on one side only"


def test_new_finding_on_candidate_fails():
    finding = {"rule": "KERNEL_DIO_CORRUPTION_6_1_64", "severity": "critical", "mountpoint": None, "waived": False}
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", record(BASE), [finding]), PLAN)
    assert gate["verdict"] == "fail"
    assert gate["new_findings"] == [{"rule": "KERNEL_DIO_CORRUPTION_6_1_64", "mountpoint": None}]
    waived = dict(finding, waived=True)
    assert kernel_gate.evaluate(side("a", record(BASE)), side("b", record(BASE), [waived]), PLAN)["verdict"] == "pass"


def allocator(verdicts, reasons=None):
    """A probe result's allocator section with the given verdict per issue id."""
    names = {"scheduler_dependency": "Scheduler Dependency", "special_end": "Special End",
             "shared_global": "Shared Global", "normalization": "Normalization"}
    return {"status": "ran", "reason": None, "issues": [
        {"id": issue_id, "name": names[issue_id], "verdict": verdict, "reason": (reasons or {}).get(issue_id),
         "pairs": 12, "effect": {"dspan_p50_ratio": 1.0, "dspan_p90_ratio": 1.0, "tail_share_trigger": 0.1,
                                 "tail_share_control": 0.1},
         "p_value": 0.5, "test": "sign"} for issue_id, verdict in verdicts.items()]}


def with_allocator(rec, section):
    rec["result"]["allocator"] = section
    return rec


ALL_ABSENT = dict.fromkeys(("scheduler_dependency", "special_end", "shared_global", "normalization"), "absent")


def test_an_allocator_issue_present_on_the_candidate_and_absent_on_the_baseline_fails():
    candidate = dict(ALL_ABSENT, shared_global="present")
    gate = kernel_gate.evaluate(side("a", with_allocator(record(BASE), allocator(ALL_ABSENT))),
                                side("b", with_allocator(record(BASE), allocator(candidate))), PLAN)
    assert gate["verdict"] == "fail"
    assert gate["failed_checks"] == ["allocator issue Shared Global: absent -> present"]
    rows = dict((row["id"], row) for row in gate["allocator"])
    assert [row["id"] for row in gate["allocator"]] == list(ALL_ABSENT)
    assert rows["shared_global"]["failed"] and not rows["special_end"]["failed"]
    assert "- FAIL allocator issue Shared Global: absent -> present" in kernel_gate.markdown(gate, str)
    # fixed by the upgrade, or present on both: no regression
    for base, cand in (("present", "absent"), ("present", "present")):
        gate = kernel_gate.evaluate(
            side("a", with_allocator(record(BASE), allocator(dict(ALL_ABSENT, special_end=base)))),
            side("b", with_allocator(record(BASE), allocator(dict(ALL_ABSENT, special_end=cand)))), PLAN)
        assert gate["verdict"] == "pass", (base, cand, gate["reason"])


def test_an_inconclusive_or_unmeasured_allocator_verdict_is_reported_and_never_fails():
    one_cpu = {"scheduler_dependency": "one CPU: cannot be measured"}
    gate = kernel_gate.evaluate(
        side("a", with_allocator(record(BASE), allocator(dict(ALL_ABSENT, scheduler_dependency="inconclusive"),
                                                         one_cpu))),
        side("b", with_allocator(record(BASE), allocator(dict(ALL_ABSENT, scheduler_dependency="present")))), PLAN)
    assert gate["verdict"] == "pass", gate["reason"]
    row = gate["allocator"][0]
    assert (row["baseline"], row["candidate"], row["failed"]) == ("inconclusive", "present", False)
    assert row["detail"] == "inconclusive -> present (baseline inconclusive: one CPU: cannot be measured)"
    # a side whose probe predates the diagnosis (no allocator section): not measured, no failure
    normalization = allocator(dict(ALL_ABSENT, normalization="present"))
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", with_allocator(record(BASE), normalization)), PLAN)
    assert gate["verdict"] == "pass", gate["reason"]
    assert gate["allocator"][3]["detail"] == "not measured -> present (baseline not measured: no reason given)"


def test_missing_probe_or_different_plans_are_incomplete():
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", record([], status="failed")), PLAN)
    assert gate["verdict"] == "incomplete" and "candidate: no probe sweep" in gate["reason"]
    gate = kernel_gate.evaluate(side("a", record(BASE)), side("b", record(BASE)), ("seed 1", "seed 2"))
    assert gate["verdict"] == "incomplete" and "different plans" in gate["reason"]


def test_cli_writes_the_reports_and_exits_by_verdict(tmp_path, capsys):
    from ext4audit.probe import analysis as probe
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
            json.dumps({"schema": cli.reports.HOST_SCHEMA, "status": "audited", "host": host, "kernel": {"release": "k-" + name}, "findings": []}))
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


# ------------------------------------------------------------------ kernel CNA records on both sides
def kernel(upstream, vendor="mainline", backports=False):
    return {"release": upstream, "upstream": upstream, "vendor": vendor, "backports": backports, "notes": []}


def cve(number, cls, introduced, fixed=None, mainline=None, backported_into=None):
    return {"id": "CVE-2099-%d" % number, "title": "ext4: record %d" % number, "class": cls,
            "introduced": introduced, "backported_into": backported_into or {}, "fixed": fixed or {},
            "fixed_mainline": mainline}


# The upgrade 6.1.50 -> 6.6.10 against records with known answers (kernel_records.judge's rules).
RECORDS = {"source": {"commit": "0" * 40, "commit_date": "2026-08-21T18:32:04+02:00"},
           "classes": ["data corruption", "crash/BUG", "hang/deadlock", "memory safety", "leak", "other"],
           "records": [
               cve(1, "data corruption", "5.10", {"6.1": "6.1.100"}, "6.2"),       # 6.1.50 lacks it; 6.6 has it
               cve(2, "data corruption", "6.5", {"6.6": "6.6.50"}, "6.7"),         # came in 6.5: new on 6.6.10
               cve(3, "leak", "6.5", {}, "6.8"),                                   # new, but a leak
               cve(4, "crash/BUG", "since the start", {"6.1": "6.1.20", "6.6": "6.6.30"}, "6.7"),  # 6.6's fix is later
               cve(5, "hang/deadlock", "5.4", {}, "6.8"),                          # no fix in 6.1 or 6.6: carried
               cve(6, "memory safety", "6.1", {"6.1": "6.1.40"}, "6.2"),           # fixed on both sides
           ],
           "branches": kernel_records.load_branches()}


def records_of(base, cand, **policy):
    return kernel_gate.compare_records(RECORDS, {"kernel": base}, {"kernel": cand}, dict(kernel_gate.DEFAULTS, **policy))


def ids(items):
    return [item["id"] for item in items]


def test_records_fixed_carried_and_new_on_an_upgrade():
    result = records_of(kernel("6.1.50"), kernel("6.6.10"))
    assert result["unknown"] == []
    assert ids(result["fixed"]) == ["CVE-2099-1"]
    assert result["fixed"][0]["reason"] == "fixed in 6.1.100; host runs 6.1.50"   # the baseline's item
    assert ids(result["carried"]) == ["CVE-2099-5"]
    assert result["carried"][0]["reason"] == "no fix in this branch (6.6); fixed in 6.8; host runs 6.6.10"
    assert [(item["id"], item["fails"]) for item in result["new"]] == [
        ("CVE-2099-2", True), ("CVE-2099-3", False), ("CVE-2099-4", True)]
    assert result["new"][2]["reason"] == "fixed in 6.6.30; host runs 6.6.10"


def test_an_older_candidate_carries_what_the_baseline_had_fixed():
    result = records_of(kernel("6.1.110"), kernel("6.1.90"))
    assert [(item["id"], item["fails"]) for item in result["new"]] == [("CVE-2099-1", True)]
    assert ids(result["fixed"]) == [] and ids(result["carried"]) == ["CVE-2099-5"]   # no fix in 6.1.y
    # at the fix release itself the record is closed again
    assert records_of(kernel("6.1.110"), kernel("6.1.100"))["new"] == []


def test_record_fail_classes_decides_which_new_records_fail():
    def failing(**policy):
        return [item["id"] for item in records_of(kernel("6.1.50"), kernel("6.6.10"), **policy)["new"] if item["fails"]]
    assert kernel_gate.DEFAULTS["record_fail_classes"] == ["data corruption", "crash/BUG"]
    assert failing() == ["CVE-2099-2", "CVE-2099-4"]
    assert failing(record_fail_classes=[]) == []
    assert failing(record_fail_classes=["leak"]) == ["CVE-2099-3"]
    with pytest.raises(kernel_gate.PolicyError, match=r"record_fail_classes: 'corruption' not among"):
        records_of(kernel("6.1.50"), kernel("6.6.10"), record_fail_classes=["corruption"])


def test_advisory_records_are_listed_but_never_fail():
    result = records_of(kernel("6.1.50"), kernel("6.6.10", vendor="rhel", backports=True))
    assert ids(result["new"]) == ["CVE-2099-2", "CVE-2099-3", "CVE-2099-4"]
    assert all(item["advisory"] and not item["fails"] for item in result["new"])


def test_a_side_without_a_judged_kernel_compares_nothing():
    result = kernel_gate.compare_records(RECORDS, None, {"kernel": kernel("6.6.10")}, kernel_gate.DEFAULTS)
    assert result["unknown"] == ["baseline"] and result["new"] == result["fixed"] == result["carried"] == []
    result = records_of(kernel("6.1.50"), {"release": "weird", "upstream": None, "vendor": "mainline", "notes": []})
    assert result["unknown"] == ["candidate"]


def test_the_debian_vm_kernels_on_the_real_records():
    """6.1.192 -> 6.12.117 (testhosts/vm/kernels.yml) on rules/kernel_cna_records.json: every record
    open on 6.1.192 is fixed in 6.12.117, and 6.12.117 carries none."""
    result = kernel_gate.compare_records(kernel_records.load(), {"kernel": kernel("6.1.192")},
                                         {"kernel": kernel("6.12.117")}, kernel_gate.DEFAULTS)
    assert ids(result["fixed"]) == ["CVE-2023-53149", "CVE-2024-40998", "CVE-2025-22113", "CVE-2026-43288",
                                    "CVE-2026-45858", "CVE-2026-45899", "CVE-2026-45942", "CVE-2026-45985",
                                    "CVE-2026-74307", "CVE-2026-74308"]
    assert result["carried"] == [] and result["new"] == []


def test_a_new_record_fails_the_gate_and_is_listed_when_the_probe_is_incomplete():
    def gate_of(cand_record):
        base = {"host": "a", "record": record(BASE), "report": {"kernel": kernel("6.1.50"), "findings": []}}
        cand = {"host": "b", "record": cand_record, "report": {"kernel": kernel("6.6.10"), "findings": []}}
        return kernel_gate.evaluate(base, cand, PLAN, records=RECORDS)
    gate = gate_of(record(BASE))
    assert gate["verdict"] == "fail"
    assert [c for c in gate["failed_checks"] if c.startswith("new kernel record")] == [
        "new kernel record CVE-2099-2 (data corruption): fixed in 6.6.50; host runs 6.6.10",
        "new kernel record CVE-2099-4 (crash/BUG): fixed in 6.6.30; host runs 6.6.10"]
    incomplete = gate_of(record([], status="failed"))
    assert incomplete["verdict"] == "incomplete" and ids(incomplete["kernel_records"]["new"]) == ids(gate["kernel_records"]["new"])


def test_markdown_lists_the_three_record_lists_escaped():
    gate = kernel_gate.evaluate({"host": "a", "record": record(BASE), "report": {"kernel": kernel("6.1.50")}},
                                {"host": "b", "record": record(BASE), "report": {"kernel": kernel("6.6.10")}},
                                PLAN, records=RECORDS)
    gate["candidate"]["upstream"] = "6.6.10 <b>x</b>"      # host data, as a tampered report would carry it
    gate["kernel_records"]["carried"][0]["reason"] = "runs *6.6* <i>"
    text = kernel_gate.markdown(gate, cli.markdown.md)
    assert "### ext4/jbd2 kernel records (kernel CNA data of 2026-08-21)" in text
    assert "<b>" not in text and "<i>" not in text and "*6.6*" not in text
    assert "Upstream 6.1.50 -> 6.6.10 &lt;b&gt;x&lt;/b&gt;: 3 new in the candidate, 1 still carried by the candidate, " \
        "1 fixed by the upgrade." in text
    assert "- [CVE-2099-5](https://nvd.nist.gov/vuln/detail/CVE-2099-5) hang/deadlock: ext4: record 5 (runs \\*6.6\\* &lt;i&gt;)" in text
    for title, count in (("New in the candidate", 3), ("Still carried by the candidate", 1), ("Fixed by the upgrade", 1)):
        assert "**%s (%d)**" % (title, count) in text
    assert "- FAIL [CVE-2099-2](https://nvd.nist.gov/vuln/detail/CVE-2099-2) data corruption: ext4: record 2" in text
    assert "- [CVE-2099-3](https://nvd.nist.gov/vuln/detail/CVE-2099-3) leak: ext4: record 3" in text
    assert [title for _, title in kernel_gate.RECORD_LISTS] == [
        "New in the candidate", "Still carried by the candidate", "Fixed by the upgrade"]


def test_cli_record_fail_classes(tmp_path, capsys):
    from ext4audit.probe import analysis as probe
    run = tmp_path / "run"
    (run / "probe").mkdir(parents=True)
    (run / "hosts").mkdir()
    (run / "probe" / "plan.json").write_text(json.dumps(probe.make_plan(1, 64)))
    # 6.12.117 -> 6.1.192: a downgrade brings back the records 6.1.y never fixed (crash/BUG and data corruption)
    for name, upstream in (("old", "6.12.117"), ("new", "6.1.192")):
        rec = record(BASE)
        rec["host"] = name
        rec["result"].update(schema="ext4-fleet-audit/probe-result/v1", kernel="k", duration_s=1.0)
        (run / "probe" / (name + ".json")).write_text(json.dumps(rec))
        (run / "hosts" / (name + ".json")).write_text(json.dumps(
            {"schema": cli.reports.HOST_SCHEMA, "status": "audited", "host": name, "kernel": kernel(upstream), "findings": []}))
    argv = ["kernel-gate", str(run), "--baseline", "old", "--candidate", "new"]
    assert cli.main(argv) == 1
    assert "new kernel record CVE-2025-22113 (crash/BUG)" in capsys.readouterr().out
    assert cli.main(argv + ["--record-fail-classes", "hang/deadlock, memory safety"]) == 1
    assert cli.main(argv + ["--record-fail-classes", ""]) == 0
    assert len(json.loads((run / "kernel_gate.json").read_text())["kernel_records"]["new"]) == 10
    assert cli.main(argv + ["--record-fail-classes", "data corruption,crashes"]) == 2
    assert "error: record_fail_classes: 'crashes' not among the records' classes" in capsys.readouterr().err


# ------------------------------------------------------------------ fstab options the candidate refuses
def fs_with_fstab(mountpoint, *options, line=3):
    return {"mountpoint": mountpoint, "fstab": {"spec": "UUID=x", "fstype": "ext4", "options": list(options),
                                                "line": line}}


def gate_with_fstab(base_kernel, cand_kernel, filesystems, cand_record=None):
    base = {"host": "a", "record": record(BASE), "report": {"kernel": base_kernel, "filesystems": filesystems}}
    cand = {"host": "b", "record": cand_record or record(BASE), "report": {"kernel": cand_kernel, "filesystems": []}}
    return kernel_gate.evaluate(base, cand, PLAN, records=RECORDS)


def test_an_fstab_option_the_candidate_refuses_fails_the_gate():
    """noacl mounts on 5.15 and is refused from 6.1 (2d544ec923db): the upgrade 5.15.98 -> 6.1.153
    fails, with the option, the mount point, the fstab line and the release that removed it."""
    filesystems = [fs_with_fstab("/srv/data", "defaults", "noacl", line=7), fs_with_fstab("/", "errors=remount-ro")]
    gate = gate_with_fstab(kernel("5.15.98"), kernel("6.1.153"), filesystems)
    assert gate["verdict"] == "fail"
    assert [c for c in gate["failed_checks"] if c.startswith("fstab option")] == [
        "fstab option noacl on /srv/data (baseline fstab line 7) is refused by the candidate kernel 6.1.153 "
        "(removed in 6.1.0-rc1, 2d544ec923db): the filesystem would not mount"]
    assert "### fstab options and the candidate kernel" in kernel_gate.markdown(gate, cli.markdown.md)
    # the same fstab on a candidate that still mounts it (the last 6.0 release) passes
    assert gate_with_fstab(kernel("5.15.98"), kernel("6.0.19"), filesystems)["verdict"] == "pass"


def test_a_backporting_candidate_lists_the_option_without_failing():
    rhel9 = dict(kernel("5.14.0", vendor="rhel", backports=True), release="5.14.0-427.13.1.el9_4.x86_64")
    gate = gate_with_fstab(kernel("5.14.21"), rhel9, [fs_with_fstab("/srv/<b>", "nouser_xattr")])
    assert gate["verdict"] == "pass", gate["reason"]
    unknown, = gate["mount_options"]["unknown"]
    assert unknown["option"] == "nouser_xattr" and "may carry the removal" in unknown["why"]
    text = kernel_gate.markdown(gate, cli.markdown.md)
    assert "may be refused by the candidate" in text and "<b>" not in text   # host strings escaped


def test_refused_options_are_listed_when_the_probe_is_incomplete():
    gate = gate_with_fstab(kernel("5.15.98"), kernel("6.12.1"), [fs_with_fstab("/srv", "noacl")],
                           cand_record=record([], status="failed"))
    assert gate["verdict"] == "incomplete"
    assert [item["option"] for item in gate["mount_options"]["refused"]] == ["noacl"]
