#!/usr/bin/env python3
"""The kernel findings of typical fleet kernels: rule, severity and message bytes per finding.

One host per kernel, with one ext4 filesystem at ext4's defaults (the unit tests' fixture facts:
tests/fixtures), evaluated by the catalog in this checkout. Used to record, before and after a
change to the kernel-record rules, what an operator reads for each kernel (bench/README.md).

Usage: bench/kernel_findings.py [--json]
"""

import argparse
import json
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "tests"), os.path.join(ROOT, "tests", "unit")]
from ext4audit.rules import catalog as catalog_mod, engine  # noqa: E402
from ext4audit.parsers import kernel_version  # noqa: E402
from test_rules import facts  # noqa: E402  (the fixture host: one default ext4 filesystem)

# (label, uname -r, /proc/version, /proc/version_signature): real release strings of each kind.
KERNELS = (
    ("Debian 12 (6.1.153)", "6.1.0-40-amd64",
     "Linux version 6.1.0-40-amd64 (debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0)"
     " #1 SMP PREEMPT_DYNAMIC Debian 6.1.153-1 (2025-09-20)", ""),
    ("Ubuntu 22.04 aws (5.15.98)", "5.15.0-1033-aws", "Linux version 5.15.0-1033-aws (buildd@lcy02-amd64-050)"
     " #37-Ubuntu SMP Sat Mar 25 14:56:42 UTC 2023", "Ubuntu 5.15.0-1033.37-aws 5.15.98"),
    ("Ubuntu 24.04 (6.8.12)", "6.8.0-45-generic", "Linux version 6.8.0-45-generic (buildd@lcy02-amd64-115)"
     " #45-Ubuntu SMP PREEMPT_DYNAMIC Fri Aug 30 12:02:04 UTC 2024", "Ubuntu 6.8.0-45.45-generic 6.8.12"),
    ("RHEL 8.9", "4.18.0-513.5.1.el8_9.x86_64", "", ""),
    ("RHEL 9.4", "5.14.0-427.13.1.el9_4.x86_64", "", ""),
    ("Amazon Linux 2 (5.10.201)", "5.10.201-191.748.amzn2.x86_64", "", ""),
    ("6.6.50", "6.6.50", "", ""),
    ("6.12.1", "6.12.1", "", ""),
)


def kernel_findings(catalog: catalog_mod.Catalog, release: str, proc_version: str, signature: str) -> tuple:
    """The host's findings and undetermined entries of the kernel-record rules (tag kernel-cna)."""
    kernel = dict(kernel_version.identify(release, proc_version, signature), page_size=4096)
    findings, undetermined, _ = engine.evaluate_host(facts(kernel=kernel), catalog)
    ours = set(rule["id"] for rule in catalog.rules if "kernel-cna" in rule["tags"])
    return ([f for f in findings if f["rule"] in ours], [u for u in undetermined if u["rule"] in ours])


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--json", action="store_true", help="one JSON object per kernel instead of a table")
    args = parser.parse_args()
    catalog = catalog_mod.load()
    if not args.json:
        print("| kernel | findings | severities | message bytes | record ids in messages | undetermined bytes |")
        print("|---|---|---|---|---|---|")
    for label, release, proc_version, signature in KERNELS:
        found, undetermined = kernel_findings(catalog, release, proc_version, signature)
        if args.json:
            print(json.dumps({"kernel": label, "findings": [
                {"rule": f["rule"], "severity": f["severity"], "message": f["message"]} for f in found]}))
            continue
        severities = ", ".join("%s %s" % (f["rule"], f["severity"]) for f in found) or "none"
        size = sum(len(f["message"].encode()) for f in found)
        ids = sum(f["message"].count("CVE-") for f in found)
        unknown = sum(len(m.encode()) for u in undetermined for m in u["missing"])
        print("| %s | %d | %s | %d | %d | %d |" % (label, len(found), severities, size, ids, unknown))
    return 0


if __name__ == "__main__":
    sys.exit(main())
