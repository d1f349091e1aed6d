"""The allocator diagnosis's pure parts (no root): each experiment's trigger and control
workloads differ only in the trigger, the paired sign test, the effect and the verdict rule."""

import math

import numpy as np
import pytest
from scipy import stats

from ext4audit.parsers.ext4_probe import allocator as probe

KiB = 1024


def workloads(issue_id):
    (trigger, measured_t), (control, measured_c) = (probe.ALLOCATOR_WORKLOADS[issue_id](side) for side in (True, False))
    assert measured_t == measured_c, "both sides measure the same files"
    return trigger, control


def writes(ops):
    return [op for op in ops if op[0] == "write"]


def test_every_issue_has_a_workload():
    assert [i for i, _ in probe.ALLOCATOR_ISSUES] == ["scheduler_dependency", "special_end", "shared_global",
                                                      "normalization"]
    assert set(probe.ALLOCATOR_WORKLOADS) == set(i for i, _ in probe.ALLOCATOR_ISSUES)


def test_scheduler_dependency_differs_only_in_the_flushing_cpu():
    trigger, control = workloads("scheduler_dependency")
    assert [op[0] for op in trigger] == [op[0] for op in control]
    assert [op for op in trigger if op[0] != "cpu"] == [op for op in control if op[0] != "cpu"]
    assert set(op[1] for op in control if op[0] == "cpu") == {0}
    assert [op[1] for op in trigger if op[0] == "cpu"] == [0, 1, 0, 1] * 4
    # each small file: four 8 KiB chunks, each written and flushed right after its CPU is chosen
    for k in range(4):
        block = control[14 * k:14 * (k + 1)]
        assert block == [("open", k)] + [op for i in range(4) for op in (
            ("cpu", 0), ("write", k, 8 * KiB * i, 8 * KiB), ("fsync", k))] + [("close", k)]
    assert sum(op[3] for op in writes(trigger) if op[1] == 0) <= 64 * KiB  # a small file (mb_stream_req)


def test_special_end_differs_only_in_the_flush_of_the_last_chunk_before_close():
    trigger, control = workloads("special_end")
    last = control.index(("write", 0, 3 * 64 * KiB, 64 * KiB))
    assert control[last + 1:] == [("fsync", 0), ("close", 0), ("syncfs",)]
    assert trigger == control[:last + 1] + control[last + 2:]
    # the file was closed, synced and reopened before its last chunk, in both
    assert control[last - 3:last] == [("close", 0), ("syncfs",), ("open", 0)]
    assert max(op[2] + op[3] for op in writes(control)) == 3 * 64 * KiB + 64 * KiB  # the last chunk ends the file


def test_shared_global_control_is_the_trigger_without_the_other_file():
    trigger, control = workloads("shared_global")
    assert control == [op for op in trigger if op[1:2] != (1,)]
    order = [(op[1], op[2]) for op in writes(trigger)]
    assert order == [(1, 0), (0, 0), (1, 1 << 20), (0, 32 * KiB), (1, 2 << 20), (0, 64 * KiB), (1, 3 << 20),
                     (0, 96 * KiB)], "the other file's 1 MiB before each chunk of the growing file"
    assert all(trigger[trigger.index(op) + 1] == ("fsync", op[1]) for op in writes(trigger))
    assert probe.ALLOCATOR_WORKLOADS["shared_global"](True)[1] == [0], "only the growing file is measured"


def test_normalization_differs_only_in_where_the_data_sits_in_each_chunk():
    trigger, control = workloads("normalization")
    assert [op[:2] for op in trigger] == [op[:2] for op in control]
    chunk, data = 256 * KiB, 128 * KiB
    assert [(op[2], op[3]) for op in writes(control)] == [(chunk * i, data) for i in (3, 0, 1, 2)]
    assert [(op[2], op[3]) for op in writes(trigger)] == [(chunk * i + chunk - data, data) for i in (3, 0, 1, 2)]


@pytest.mark.parametrize("trigger, control", [
    ([5] * 12, [1] * 12),
    ([1] * 12, [5] * 12),
    ([2, 2, 2, 1, 3, 3, 3, 3, 0, 4, 4, 4], [1, 2, 3, 1, 1, 2, 2, 2, 1, 1, 1, 5]),
    ([1, 2, 3], [1, 2, 3]),
    ([3, 1, 3, 1, 3, 1, 3, 1], [2, 2, 2, 2, 2, 2, 2, 2]),
])
def test_sign_test_is_the_exact_binomial_tail(trigger, control):
    wins = sum(t > c for t, c in zip(trigger, control))
    n = sum(t != c for t, c in zip(trigger, control))
    expected = stats.binomtest(wins, n, 0.5, alternative="greater").pvalue if n else 1.0
    assert math.isclose(probe.sign_test(trigger, control), expected, rel_tol=1e-12)
    assert probe.sign_test([5] * 12, [1] * 12) == 1 / 4096


def test_quantile_and_effect():
    values = [3.0, 1.0, 4.0, 1.0, 5.0, 9.0, 2.0, 6.0]
    for q in (0, 0.25, 0.5, 0.9, 1):
        assert math.isclose(probe.quantile(values, q), float(np.quantile(values, q)))
    # the tail: runs at or above the p90 of both sides together (13.0 here), Chopper's definition
    effect = probe.allocator_effect([10.0] * 8 + [40.0, 40.0], [10.0] * 10)
    assert effect == {"dspan_p50_ratio": 1.0, "dspan_p90_ratio": 4.0, "tail_share_trigger": 0.2,
                      "tail_share_control": 0.0}
    assert probe.allocator_effect([], []) == dict.fromkeys(
        ("dspan_p50_ratio", "dspan_p90_ratio", "tail_share_trigger", "tail_share_control"))


@pytest.mark.parametrize("pairs, p_value, ratio, verdict", [
    (12, 0.0002, 64.5, "present"),
    (12, 0.5, 1.0, "absent"),
    (12, 0.01, 1.1, "inconclusive"),   # a real but small difference
    (12, 0.01, None, "inconclusive"),  # no control quantile to compare with
    (5, 1.0, 1.0, "inconclusive"),     # too few pairs to call it absent
    (5, 0.03, 9.0, "inconclusive"),
])
def test_verdict_rule(pairs, p_value, ratio, verdict):
    got, reason = probe.allocator_verdict(pairs, p_value, ratio)
    assert got == verdict
    assert (reason is None) == (verdict != "inconclusive")


def test_scheduler_dependency_on_one_cpu_is_inconclusive_without_running_anything():
    allocator = probe.Allocator(scratch=None, images=None, deadline=0)  # nothing to run on: it must not try
    allocator.cpus = [0]
    entry = allocator.issue("scheduler_dependency", "Scheduler Dependency")
    assert (entry["verdict"], entry["reason"], entry["pairs"], entry["p_value"]) == (
        "inconclusive", "one CPU: cannot be measured", 0, None)


class Untouchable:
    """A scratch directory that fails every use: what the test runs must not touch it."""

    def path(self, *parts):
        return "/nonexistent/" + "/".join(parts)

    def full(self, exc):
        return exc

    def check_cap(self):
        raise AssertionError("the experiment ran")


def test_a_run_cut_by_the_budget_is_inconclusive_not_absent():
    allocator = probe.Allocator(scratch=Untouchable(), images=None, deadline=0)  # already past
    entry = allocator.issue("normalization", "Normalization")
    assert entry["verdict"] == "inconclusive" and entry["pairs"] == 0
    assert entry["reason"] == "time budget reached after 0 pairs"


def test_an_experiment_that_fails_is_an_error_with_its_reason_never_absent(tmp_path):
    class Full(Untouchable):
        def path(self, *parts):
            return str(tmp_path / parts[-1])

        def check_cap(self):
            raise OSError(28, "No space left on device")

    class Images:
        options, mkfs = [], {"block_size": 4096}

        def get(self, *args):
            return "/dev/null"  # an empty file to copy: the copy works, the scratch is full

    allocator = probe.Allocator(scratch=Full(), images=Images(), deadline=float("inf"))
    allocator.cpus = [0]
    lines = []
    section = allocator.run(lines.append)
    assert section["status"] == "error"
    assert section["reason"].startswith("Special End: [Errno 28] No space left on device")
    assert [(e["id"], e["verdict"]) for e in section["issues"]] == [
        ("scheduler_dependency", "inconclusive"), ("special_end", "inconclusive"),
        ("shared_global", "inconclusive"), ("normalization", "inconclusive")]
    assert section["issues"][1]["reason"].startswith("error: Special End: ")
    assert len(lines) == 4
    assert list(tmp_path.iterdir()) == [], "the run image is removed"
