"""Every range in rules/kernel_issues.yml, pinned at its bounds with literal answers.

For each range (`min` inclusive, `max` exclusive, in the kernel's own order: 6.8.0-rc1 < 6.8.0)
the test names a kernel just below `min`, one at `min`, one just below `max` and one at `max`,
and what in_range must say for each. The ranges are read from the file, so a range added or
changed without its boundary kernels here fails `test_every_range_has_its_boundaries`.
"""

import os

import pytest
import yaml

from ext4audit.parsers import kernel_version
from ext4audit import ROOT

with open(os.path.join(ROOT, "rules", "kernel_issues.yml")) as handle:
    ISSUES = yaml.safe_load(handle)["issues"]
RANGES = [(issue["id"], rng) for issue in ISSUES for rng in issue["affected"]]

# (issue, vendor, min, max) -> [(kernel, inside the range?)]: below min, at min, below max, at max.
BOUNDARIES = {
    ("DIO_POSITION_CORRUPTION_6_1_64", "upstream", "6.1.64", "6.1.66"):
        [("6.1.63", False), ("6.1.64", True), ("6.1.65", True), ("6.1.66", False)],
    ("MB_OPTIMIZE_SCAN_REGRESSION", "upstream", "5.15.33", "5.15.71"):
        [("5.15.32", False), ("5.15.33", True), ("5.15.70", True), ("5.15.71", False)],
    ("MB_OPTIMIZE_SCAN_REGRESSION", "upstream", "5.16.19", "5.17.0-rc1"):
        [("5.16.18", False), ("5.16.19", True), ("5.16.20", True), ("5.17.0-rc1", False)],
    ("MB_OPTIMIZE_SCAN_REGRESSION", "upstream", "5.17.2", "5.19.12"):
        [("5.17.1", False), ("5.17.2", True), ("5.19.11", True), ("5.19.12", False)],
    ("MB_OPTIMIZE_SCAN_REGRESSION", "upstream", "6.0.0-rc1", "6.0.0-rc7"):
        [("5.19.17", False), ("6.0.0-rc1", True), ("6.0.0-rc6", True), ("6.0.0-rc7", False)],
    ("STRIPE_ALIGNED_ALLOC_SPIN", "upstream", "6.5.0", "6.8.0-rc1"):
        [("6.5.0-rc7", False), ("6.5.0", True), ("6.7.12", True), ("6.8.0-rc1", False)],
    ("FAST_COMMIT_EARLY", "upstream", "5.10.0", "6.1.0"):
        [("5.10.0-rc7", False), ("5.10.0", True), ("6.1.0-rc8", True), ("6.1.0", False)],
    ("DIOREAD_NOLOCK_SUBPAGE_BLOCKS", "upstream", "5.5.0", "5.9.4"):
        [("5.5.0-rc7", False), ("5.5.0", True), ("5.9.3", True), ("5.9.4", False)],
    ("DIOREAD_NOLOCK_NODELALLOC_UNMERGED", "alibaba", "4.19.24-9.al7", "4.19.91-26.al7"):
        [("4.19.24-8.al7", False), ("4.19.24-9.al7", True), ("4.19.91-25.al7", True), ("4.19.91-26.al7", False)],
    ("DIOREAD_NOLOCK_NODELALLOC_UNMERGED", "upstream", "2.6.34", "5.6.13"):
        [("2.6.34-rc7", False), ("2.6.34", True), ("5.6.12", True), ("5.6.13", False)],
}


def key(issue_id, rng):
    return (issue_id, rng["vendor"], rng["min"], rng["max"])


def host_kernel(vendor, version):
    """identify()'s fields that in_range reads, for a kernel of this version."""
    if vendor == "upstream":
        return {"vendor": "mainline", "upstream": version, "backports": False}
    return {"vendor": vendor, "vendor_version": version, "upstream": None, "backports": True}


def test_every_range_has_its_boundaries():
    assert sorted(key(issue_id, rng) for issue_id, rng in RANGES) == sorted(BOUNDARIES)


@pytest.mark.parametrize("issue_id, rng", RANGES, ids=["%s %s..%s" % (i, r["min"], r["max"]) for i, r in RANGES])
def test_range_bounds(issue_id, rng):
    cases = BOUNDARIES[key(issue_id, rng)]
    # the literal kernels really sit at the bounds: two of them are the bounds themselves
    assert (cases[1][0], cases[3][0]) == (rng["min"], rng["max"])
    got = [(version, kernel_version.in_range(host_kernel(rng["vendor"], version), [rng])) for version, _ in cases]
    assert got == cases


@pytest.mark.parametrize("version, affected", [
    ("5.13.0", False), ("5.15.0", False), ("5.15.32", False),       # mb_optimize_scan did not act on extent files
    ("5.15.33", True), ("5.15.70", True), ("5.15.71", False), ("5.15.98", False),
    ("5.16.18", False), ("5.16.20", True), ("5.17.0-rc1", False), ("5.17.1", False), ("5.17.15", True),
    ("5.18.0-rc1", True), ("5.18.19", True), ("5.19.11", True), ("5.19.12", False), ("5.19.17", False),
    ("6.0.0-rc1", True), ("6.0.0-rc6", True), ("6.0.0-rc7", False), ("6.0.0", False), ("6.1.70", False)])
def test_mb_optimize_scan_regression_by_branch(version, affected):
    issue = [i for i in ISSUES if i["id"] == "MB_OPTIMIZE_SCAN_REGRESSION"][0]
    assert kernel_version.in_range(host_kernel("upstream", version), issue["affected"]) is affected
