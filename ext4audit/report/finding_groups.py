"""Findings grouped across hosts by what they share: hosts of a fleet share kernels, images and
configurations, so the same finding (rule, severity, message, waiver, baseline state) on 3,412
hosts is one fact about the fleet. The fleet files built on these groups (report.sarif: a result
per group; summary.md: a row per group) get them from here.

The report step's workers group their shard's hosts (add_host, then dump as the shard's part);
the parent merges the shards' parts (merge) and reads the groups worst first (ordered).
"""

import json
from typing import Iterator, Tuple

import msgspec

from ext4audit import severity_rank

_ENCODE = msgspec.json.Encoder()  # a shard's groups in one line (5 times json.dumps' speed)


def group_key(finding: dict, with_baseline: bool) -> tuple:
    """What the findings of one group share: rule, severity, base severity, message, escalation,
    the waiver (justification text, or None), an expired waiver, and the baseline state."""
    waiver = finding.get("waiver") or {}
    suppressed = ("%s (approver %s, until %s)" % (waiver.get("justification"), waiver.get("approver"),
                                                  waiver.get("expires")) if finding.get("waived") else None)
    expired = json.dumps(waiver, sort_keys=True) if not finding.get("waived") and waiver.get("status") == "expired" else None
    baseline = ("new" if finding.get("baseline") == "new" else "unchanged") if with_baseline else None
    return (finding["rule"], finding["severity"], finding.get("base_severity"), finding["message"],
            finding.get("escalated_because"), suppressed, expired, baseline)


def is_waived(key: tuple) -> bool:
    return key[5] is not None


class FindingGroups:
    """{group_key: [findings, hosts, samples (the first `cap`)]}, in the order first seen, and
    {rule: hosts with a finding of it}. A sample is the host's name, once per host; a subclass
    keeps something else by sample() (SAMPLE_EACH_FINDING: one per finding, not per host)."""

    SAMPLE_EACH_FINDING = False

    def __init__(self, with_baseline: bool = False, cap: int = 5):
        self.with_baseline, self.cap = with_baseline, cap
        self.groups = {}
        self.rule_hosts = {}

    def sample(self, report: dict, finding: dict):
        return report["host"]

    def entries(self, report: dict) -> Iterator[Tuple[tuple, dict]]:
        """(key, finding) for each of the host's findings; a subclass may group more of the report."""
        return ((group_key(finding, self.with_baseline), finding) for finding in report["findings"])

    def add_host(self, report: dict) -> None:
        seen = set()
        for key, finding in self.entries(report):
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = [0, 0, []]
            group[0] += 1
            first = key not in seen  # (the same finding on two filesystems of a host is one host)
            if first:
                seen.add(key)
                group[1] += 1
            if (first or self.SAMPLE_EACH_FINDING) and len(group[2]) < self.cap:
                group[2].append(self.sample(report, finding))
        for rule in set(key[0] for key in seen):
            self.rule_hosts[rule] = self.rule_hosts.get(rule, 0) + 1

    def dump(self) -> str:
        """The groups as one line of JSON (a shard's part), emptied."""
        text = _ENCODE.encode([self.rule_hosts, [[list(key), findings, hosts, samples]
                                                 for key, (findings, hosts, samples) in self.groups.items()]])
        self.groups, self.rule_hosts = {}, {}
        return text.decode("utf-8")

    def merge(self, text: str) -> None:
        """Add a shard's part (dump); shards are merged in run order."""
        rule_hosts, groups = json.loads(text)
        for rule, hosts in rule_hosts.items():
            self.rule_hosts[rule] = self.rule_hosts.get(rule, 0) + hosts
        for key, findings, hosts, samples in groups:
            key = tuple(key)
            group = self.groups.get(key)
            if group is None:
                group = self.groups[key] = [0, 0, []]
            group[0] += findings
            group[1] += hosts
            group[2].extend(samples[:self.cap - len(group[2])])

    def merge_parts(self, parts) -> None:
        """Merge every shard's part of a writer's Parts (one line each)."""
        for path in parts.paths():
            with open(path, encoding="utf-8") as handle:
                for line in handle:
                    if line.strip():
                        self.merge(line)

    def ordered(self) -> list:
        """[(key, [findings, hosts, samples])]: unwaived first, then the most severe, the widest."""
        return sorted(self.groups.items(), key=lambda item: (is_waived(item[0]), -severity_rank(item[0][1]),
                                                             -item[1][0], item[0][0], item[0][3]))

