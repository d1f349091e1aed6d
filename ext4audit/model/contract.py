"""The records that cross a boundary, as typed models: what each file of a run folder holds, and
the waiver file and rule catalog a site writes. One place for their shape; schemas/*.json are
generated from these models (`make schemas`: write_schemas()) and published with the docs.

Readers decode through them with check(): a record that is not of its model's shape is a
ContractError naming the file, the host and the field ($.filesystems[0].options). The readers of
the YAML a site writes (waivers.py, catalog.py) take msgspec's error apart with failure() and say
it in their own terms: the waiver or rule, the field, and a hint where YAML's typing is the likely
cause (a bare 7 or yes where text belongs). The readers
keep the plain JSON values they read (the reports carry a host's facts on as they came, with
keys this version does not know), so the models check, and the code reads dicts.

Forward compatibility: a record may carry keys its model does not name (a newer writer's), and
they are kept; the waiver file and rule catalog are the exception, where an unknown (misspelt)
field is refused because it would change what is waived or checked.

The constants that both sides of the audit need (the facts and probe-result schema ids, the
confirmation probe ids, the network filesystem types) live in the target-side module_utils
(plugins/module_utils/ext4_parsers.py): target code cannot import this package.
"""

import datetime
import json
import os
import re
import typing
from typing import Any, Dict, List, Literal, Optional, Tuple

import msgspec
from msgspec import Meta, Struct

from ext4audit import ROOT, SEVERITIES
from ext4audit.model import fact_paths, safe_yaml
from ext4audit.parsers.ext4_parsers.common import CONFIRMATION_PROBES as PROBES, FACTS_SCHEMA, PROBE_RESULT_SCHEMA

HOST_REPORT_SCHEMA = "ext4-fleet-audit/host-report/v1"
SUMMARY_SCHEMA = "ext4-fleet-audit/summary/v1"
FINDINGS_INDEX_SCHEMA = "ext4-fleet-audit/findings-index/v1"
PROBE_PLAN_SCHEMA = "ext4-fleet-audit/probe-plan/v1"
KERNEL_GATE_SCHEMA = "ext4-fleet-audit/kernel-gate/v1"
RULES_SCHEMA = "ext4-fleet-audit/rules/v1"
KERNEL_RECORDS_SCHEMA = "ext4-fleet-audit/kernel-cna-records/v1"
KERNEL_BRANCHES_SCHEMA = "ext4-fleet-audit/kernel-branches/v1"
REMOVED_MOUNT_OPTIONS_SCHEMA = "ext4-fleet-audit/removed-mount-options/v1"
BOOT_TOOLS_SCHEMA = "ext4-fleet-audit/boot-tools/v1"

HOST_STATUSES = ("audited", "unreachable", "failed")  # what roles/ext4_audit/tasks/facts.yml writes
# A host's probe record (roles/chopper_probe/tasks/run.yml sets it from the probe's exit code):
# ran (every part done), partial (the sweep stopped early: its reason says by what and how many runs
# of the plan are missing; it confirms nothing), skipped (nothing to replicate, check mode), refused
# (its scratch path is not its own, or another probe runs on the host), failed (an error, a signal,
# no result), unreachable.
PROBE_STATUSES = ("ran", "partial", "skipped", "refused", "failed", "unreachable")
VERDICTS = ("pass", "fail", "incomplete")
RULE_SCOPES = tuple(fact_paths.BY_SCOPE)
RULE_KINDS = ("data-safety", "performance", "operability")  # what a rule's finding puts at risk

Severity = Literal[SEVERITIES]
Name = typing.Annotated[str, Meta(min_length=1)]
# patterns, and how an error message names them
STAMP_PATTERN = r"^\d{4}-\d{2}-\d{2}T\d{2}:\d{2}:\d{2}Z$"
RULE_ID_PATTERN = r"^[A-Z][A-Z0-9_]*$"
RECORD_ID_PATTERN = r"^CVE-\d{4}-\d{4,}$"
PATTERNS = {STAMP_PATTERN: "a moment in UTC (YYYY-MM-DDTHH:MM:SSZ)",
            RULE_ID_PATTERN: "a rule id (upper-case letters, digits and _)",
            RECORD_ID_PATTERN: "a CVE id (CVE-YYYY-NNNN)"}
Stamp = typing.Annotated[str, Meta(pattern=STAMP_PATTERN, description=PATTERNS[STAMP_PATTERN])]
RuleId = typing.Annotated[str, Meta(pattern=RULE_ID_PATTERN)]
Object = Dict[str, Any]


class ContractError(ValueError):
    """A record that is not of its model's shape; the message names the file, host and field."""


# ------------------------------------------------------------------ facts record v1
class Kernel(Struct):
    """The host's kernel as plugins/module_utils/kernel_version.py identifies it."""
    release: Optional[str] = None
    upstream: Optional[str] = None
    vendor: Optional[str] = None
    vendor_version: Optional[str] = None
    page_size: Optional[int] = None
    backports: Optional[bool] = None
    notes: Optional[List[str]] = None


class Superblock(Struct):
    """dumpe2fs -h, parsed (ext4_parsers.superblock.parse_dumpe2fs); more keys than these are kept."""
    block_size: Optional[int] = None
    block_count: Optional[int] = None
    blocks_per_group: Optional[int] = None
    inode_size: Optional[int] = None
    journal_bytes: Optional[int] = None
    raid_stride: Optional[int] = None
    raid_stripe_width: Optional[int] = None
    features: Optional[List[str]] = None


class Mount(Struct):
    """What every mount has: where, which filesystem type, and its options."""
    mountpoint: str
    fstype: Optional[str] = None
    options: Optional[List[str]] = None


Count = typing.Annotated[int, Meta(ge=0)]


class Usage(Struct):
    """statvfs(2) of a mounted filesystem (ext4_facts Collector.usage): live counts, in blocks of block_size."""
    block_size: typing.Annotated[int, Meta(gt=0)]
    blocks: Count
    blocks_free: Count
    blocks_avail: Count
    inodes: Count
    inodes_free: Count


class Filesystem(Mount):
    """One mounted ext4 filesystem: its effective options and what was read about it."""
    device: Optional[str] = None
    options_source: Optional[str] = None
    superblock: Optional[Superblock] = None
    usage: Optional[Usage] = None
    queue: Optional[Object] = None
    jbd2: Optional[Object] = None
    fstab: Optional[Object] = None
    fstab_drift: Optional[List[Any]] = None


class NetworkMount(Mount):
    """A network filesystem mount (ext4_parsers.common.NETFS_TYPES)."""
    source: Optional[str] = None


class OtherFilesystem(Struct):
    """A local filesystem of another type (xfs, btrfs, an overlay root, ...): listed, not audited."""
    mountpoint: str
    fstype: str
    source: Optional[str] = None


class ReadError(Struct):
    """Something that could not be read, and why."""
    where: str
    reason: str


class Facts(Struct):
    """What library/ext4_facts.py returns as ext4_facts."""
    schema: Literal[FACTS_SCHEMA]
    kernel: Kernel
    filesystems: List[Filesystem]
    netfs: List[NetworkMount]
    not_audited: Optional[List[OtherFilesystem]] = None
    errors: Optional[List[ReadError]] = None


class FactsRecord(Struct):
    """reports/<run>/facts/<host>-<hash>.json: what was collected from a host, or why not."""
    host: Name
    status: Literal[HOST_STATUSES]
    groups: Optional[List[str]] = None
    reason: Optional[str] = None
    policy: Optional[Object] = None
    facts: Optional[Facts] = None


class PlayHosts(Struct):
    """reports/<run>/play-hosts.json: the hosts of the facts play (the role writes it with their
    records): the report step fails each one that has no valid facts record, so none drops out."""
    hosts: List[Name]


# ------------------------------------------------------------------ probe result and record
class Replica(Struct):
    """How the probe rebuilt the audited filesystem on scratch."""
    mount_options: Optional[str] = None
    mkfs_args: Optional[List[str]] = None
    adjustments: Optional[List[Any]] = None


class Confirmation(Struct):
    """One confirmation probe's measurement: the risky option set against the safe one."""
    id: str
    seed: Optional[str] = None
    status: Optional[str] = None
    reason: Optional[str] = None
    metric: Optional[str] = None
    unit: Optional[str] = None
    mountpoint: Optional[str] = None
    repetitions: Optional[int] = None
    ratio: Optional[float] = None
    ratio_spread: Optional[Tuple[float, float]] = None


class Sweep(Struct):
    """The sweep over the plan's treatments (runs pair with the plan by id)."""
    runs: List[Object] = []
    errors: List[Any] = []
    stopped_by: Optional[str] = None


class AllocatorEffect(Struct, forbid_unknown_fields=True):
    """Trigger against control: d-span quantile ratios and the tail shares (null: not measured)."""
    dspan_p50_ratio: Optional[float]
    dspan_p90_ratio: Optional[float]
    tail_share_trigger: Optional[float]
    tail_share_control: Optional[float]


AllocatorVerdict = Literal["present", "absent", "inconclusive"]


class AllocatorIssue(Struct):
    """A paired trigger-against-control experiment for one of Chopper's allocator issues."""
    id: str
    name: str
    verdict: AllocatorVerdict
    reason: Optional[str]
    pairs: typing.Annotated[int, Meta(ge=0)]
    effect: AllocatorEffect
    p_value: Optional[typing.Annotated[float, Meta(ge=0, le=1)]]
    test: str


class Allocator(Struct):
    """The allocator experiments (optional: a probe before them, or one stopped before them, has none)."""
    status: Literal["ran", "skipped", "error"]
    reason: Optional[str]
    issues: List[AllocatorIssue]


class ProbeRun(Struct, kw_only=True):  # kw_only: the required fields of a subclass may follow these
    """What a probe run says about itself: in its result, and in a host report's probe section."""
    reason: Optional[str] = None
    kernel: Optional[str] = None
    duration_s: Optional[float] = None
    replica: Optional[Replica] = None
    allocator: Optional[Allocator] = None


class ProbeResult(ProbeRun):
    """What the probe (plugins/module_utils/ext4_probe) writes as its OUT.json."""
    schema: Literal[PROBE_RESULT_SCHEMA]
    status: Optional[str] = None
    sweep: Optional[Sweep] = None
    confirmations: List[Confirmation] = []


class ProbeRecord(Struct):
    """reports/<run>/probe/<host>-<hash>.json: the playbook's record of a host's probe."""
    host: Name
    status: Literal[PROBE_STATUSES]
    reason: Optional[str] = None
    mountpoint: Optional[str] = None
    result: Optional[ProbeResult] = None


class ProbePlan(Struct):
    """reports/<run>/probe/plan.json: the seeded Latin hypercube plan (probe.make_plan)."""
    schema: Literal[PROBE_PLAN_SCHEMA]
    factors: Dict[str, List[Any]]
    treatments: List[Object]
    seed: Optional[int] = None
    runs: Optional[int] = None
    level_set: Optional[str] = None


# ------------------------------------------------------------------ host report
class WaiverMark(Struct):
    """The waiver a finding matched: active (it is waived) or expired."""
    expires: Stamp
    rule: Optional[str] = None
    justification: Optional[str] = None
    approver: Optional[str] = None
    status: Optional[Literal["active", "expired"]] = None


class FindingConfirmation(Struct):
    """What the probe measured for a finding whose rule has a confirmation."""
    probe: str
    status: Literal["confirmed", "not_reproduced", "not_measured"]
    ratio: Optional[float] = None
    spread: Optional[Tuple[float, float]] = None
    threshold: Optional[float] = None
    probed_mountpoint: Optional[str] = None
    metric: Optional[str] = None
    reason: Optional[str] = None


class Finding(Struct):
    """A rule that fired on a host (host-wide: no device or mount point)."""
    rule: str
    severity: Severity
    waived: bool
    waiver: Optional[WaiverMark] = None
    device: Optional[str] = None
    mountpoint: Optional[str] = None
    message: Optional[str] = None
    title: Optional[str] = None
    base_severity: Optional[Severity] = None
    escalated_because: Optional[str] = None
    evidence: Optional[Object] = None
    remediation: Optional[Object] = None
    references: Optional[List[Any]] = None
    tags: Optional[List[str]] = None
    seed: Optional[str] = None
    confirmation: Optional[FindingConfirmation] = None
    baseline: Optional[Literal["new", "persisting"]] = None


class Policy(Struct):
    """The host's policy (group_vars, host_vars, -e), as the report applied it."""
    fail_on: Severity
    rules_select: Optional[List[str]] = None
    rules_skip: Optional[List[str]] = None
    severity_overrides: Optional[Object] = None
    capacity_limits: Optional[Dict[str, typing.Annotated[float, Meta(gt=0, le=1)]]] = None
    kernel_no_fix_counts: Optional[bool] = None


class ProbeSection(ProbeRun):
    """A host report's probe: its record and the analysis of its sweep."""
    status: Literal[PROBE_STATUSES]
    confirmations: List[Confirmation]
    errors: List[str]
    mountpoint: Optional[str] = None
    sweep: Optional[Object] = None


class HostReport(Struct):
    """reports/<run>/hosts/<host>.json."""
    schema: Literal[HOST_REPORT_SCHEMA]
    host: Name
    status: Literal[HOST_STATUSES]
    findings: List[Finding]
    run_id: Optional[str] = None
    generated_at: Optional[Stamp] = None
    groups: Optional[List[str]] = None
    reason: Optional[str] = None
    policy: Optional[Policy] = None
    skipped: Optional[List[Object]] = None
    kernel: Optional[Kernel] = None
    filesystems: Optional[List[Filesystem]] = None
    netfs: Optional[List[NetworkMount]] = None
    not_audited: Optional[List[OtherFilesystem]] = None
    undetermined: Optional[List[Object]] = None
    passed: Optional[List[Object]] = None
    expired_waivers: Optional[List[Object]] = None
    errors: Optional[List[ReadError]] = None
    probe: Optional[ProbeSection] = None


# ------------------------------------------------------------------ summary
class SummaryPolicy(Struct):
    fail_on: Severity
    unreachable_is_incomplete: bool
    fail_on_new: bool


class Counts(Struct):
    by_severity: Dict[Severity, int]
    by_rule: Dict[str, int]
    waived: int
    undetermined: int
    hosts: int
    hosts_audited: int


class HostRow(Struct):
    """A host's row: what the end-of-run table shows."""
    host: str
    status: str
    fail_on: Optional[Severity] = None
    worst: Optional[Severity] = None
    findings: Optional[int] = None
    failing: Optional[int] = None
    new: Optional[int] = None
    waived: Optional[int] = None
    errors: Optional[int] = None
    undetermined: Optional[int] = None
    unresolved: Optional[List[str]] = None
    not_audited: Optional[List[str]] = None
    probe: Optional[str] = None


class HostNotAudited(Struct):
    host: str
    status: str
    reason: Optional[str] = None


class SummaryProbe(Struct):
    hosts: List[Object]
    failed: List[Object]


class BaselineDiff(Struct):
    """What changed since the baseline run (baseline.diff)."""
    run_id: str
    new: List[Object]
    resolved: List[Object]
    persisting: int
    hosts_added: List[str]
    hosts_removed: List[str]
    path: Optional[str] = None
    hosts_not_compared: Optional[List[Object]] = None


class KernelGroup(Struct):
    """The hosts that share a kernel record finding: the kernel, the action and how many hosts."""
    kernel: Optional[str]
    upstream: Optional[str]
    rule: RuleId
    severity: Severity
    action: str
    hosts: int
    sample: List[str]


class UnresolvedGroup(Struct):
    """The hosts that share an undetermined rule (and its missing facts) or a read error."""
    kind: Literal["undetermined", "read error"]
    subject: str
    detail: str
    hosts: int
    sample: List[str]


class Summary(Struct):
    """reports/<run>/summary.json: the verdict; written last, so its presence marks a complete run."""
    schema: Literal[SUMMARY_SCHEMA]
    hosts: List[HostRow]
    run_id: Optional[str] = None
    generated_at: Optional[Stamp] = None
    policy: Optional[SummaryPolicy] = None
    verdict: Optional[Literal[VERDICTS]] = None
    reason: Optional[str] = None
    counts: Optional[Counts] = None
    hosts_not_audited: Optional[List[HostNotAudited]] = None
    expired_waivers: Optional[List[Object]] = None
    probe: Optional[SummaryProbe] = None
    baseline: Optional[BaselineDiff] = None
    kernel_groups: Optional[List[KernelGroup]] = None
    unresolved_groups: Optional[List[UnresolvedGroup]] = None


# ------------------------------------------------------------------ findings index
class IndexedFinding(Struct, array_like=True):
    """A finding's identity and severity, as an array: [rule, severity, device, mount point]
    (host-wide rules have neither device nor mount point)."""
    rule: str
    severity: Severity
    device: Optional[str]
    mountpoint: Optional[str]


class IndexedHost(Struct):
    """A host of the findings index: its status and every finding of its host report."""
    status: Literal[HOST_STATUSES]
    findings: List[IndexedFinding]


class FindingsIndex(Struct):
    """reports/<run>/findings-index.json: every host's findings by identity and severity, what a
    later run compares with when it takes this run as its --baseline (baseline.py) instead of
    reading every host report. Written by the report step before summary.json, with its run_id
    and generated_at: an index whose run_id, generated_at or hosts are not the summary's (a later
    report of the run by a version that does not write one) is ignored, and the host reports read."""
    schema: Literal[FINDINGS_INDEX_SCHEMA]
    run_id: str
    generated_at: Stamp
    hosts: Dict[str, IndexedHost]


# ------------------------------------------------------------------ kernel gate
class GateSide(Struct):
    host: str
    kernel: Optional[str] = None
    upstream: Optional[str] = None


class GateFinding(Struct):
    rule: str
    mountpoint: Optional[str] = None


class GateAllocator(Struct):
    """An allocator issue's verdicts side by side (kernel_gate.compare_allocator; null: not measured)."""
    id: str
    name: str
    baseline: Optional[AllocatorVerdict]
    candidate: Optional[AllocatorVerdict]
    failed: bool
    detail: str


class KernelGate(Struct):
    """reports/<run>/kernel_gate.json (python -m ext4audit kernel-gate)."""
    schema: Literal[KERNEL_GATE_SCHEMA]
    verdict: Literal[VERDICTS]
    baseline: GateSide
    candidate: GateSide
    reason: Optional[str] = None
    policy: Optional[Object] = None
    dspan: Optional[Object] = None
    allocator: List[GateAllocator] = []
    confirmations: List[Object] = []
    new_findings: List[GateFinding] = []
    failed_checks: List[str] = []
    kernel_records: Optional[Object] = None
    mount_options: Optional[Object] = None  # kernel_gate.compare_mount_options


# ------------------------------------------------------------------ waiver file (YAML)
class Waiver(Struct, forbid_unknown_fields=True):
    """One accepted finding (ext4audit/rules/waivers.py): no other fields, a misspelt one would widen it."""
    rule: RuleId
    justification: Name
    approver: Name
    expires: datetime.date
    hosts: Optional[List[Name]] = None
    groups: Optional[List[Name]] = None
    mountpoints: Optional[List[Name]] = None
    records: Optional[typing.Annotated[List[typing.Annotated[str, Meta(pattern=RECORD_ID_PATTERN)]],
                                       Meta(min_length=1)]] = None


class WaiverFile(Struct, forbid_unknown_fields=True):
    """The waiver file (the inventory folder's .ext4audit/waivers.yml)."""
    waivers: Optional[List[Waiver]] = None


# ------------------------------------------------------------------ rule catalog (YAML)
class Remediation(Struct):
    steps: str
    cost: str


class Escalation(Struct, forbid_unknown_fields=True):
    when: Object
    severity: Severity
    because: str


class RuleConfirmation(Struct, forbid_unknown_fields=True):
    """The probe measurement that turns the rule's finding into a measured one."""
    probe: Literal[PROBES]
    confirmed_at: typing.Annotated[float, Meta(gt=1)]
    escalate_to: Severity


class Rule(Struct, forbid_unknown_fields=True):
    """A catalog rule (rules/catalog.yml, or a site rule file); `when` is a predicate of
    ext4audit/rules/engine.py over the fact paths of ext4audit/model/fact_paths.py."""
    id: RuleId
    title: str
    scope: Literal[RULE_SCOPES]
    kind: Literal[RULE_KINDS]
    severity: Severity
    when: Object
    message: str
    rationale: str
    remediation: Remediation
    references: List[Any]
    tags: List[Name]
    seed: Optional[str] = None
    escalate: Optional[List[Escalation]] = None
    # a {kernel_records: ACTION} rule whose finding takes its worst record's class severity
    # (kernel_records.CLASS_SEVERITY), never below `severity`
    severity_by_records: Optional[bool] = None
    confirmation: Optional[RuleConfirmation] = None
    overrides: Optional[bool] = None


class RuleFile(Struct, forbid_unknown_fields=True):
    """rules/catalog.yml, or a site rule file."""
    rules: List[Rule]
    schema: Literal[RULES_SCHEMA] = RULES_SCHEMA


# ------------------------------------------------------------------ kernel CNA records (data)
class KernelRecord(Struct):
    """One record of the kernel CNA (ext4audit/rules/kernel_records.py judges a kernel by it); the
    file's `fields` say what each field means. That each release parses and sits in its branch,
    and that needs is a known feature, is kernel_records.load's check."""
    id: typing.Annotated[str, Meta(pattern=RECORD_ID_PATTERN)]
    title: Name
    kind: Name = msgspec.field(name="class")  # one of the file's classes
    class_reason: Name  # the record's words that give the class (rules/kernel_record_classes.yml)
    needs: Optional[Name]  # the feature it needs (kernel_records.RELEVANCE), null: any filesystem
    introduced: Optional[Name]
    backported_into: Dict[str, str]
    fixed: Dict[str, str]
    fixed_mainline: Optional[Name]
    program_files: List[str] = []
    fix_commits: List[str] = []


class KernelBranch(Struct, forbid_unknown_fields=True):
    """One upstream branch of rules/kernel_branches.yml: longterm, and `ended` with its last release."""
    branch: Name
    longterm: bool = False
    ended: Optional[Name] = None


class KernelVendor(Struct, forbid_unknown_fields=True):
    """A vendor of rules/kernel_branches.yml: who it is, where its kernel advisories are, and
    whether it maintains kernels on branches upstream ended."""
    name: Name
    advisories: Name
    keeps_ended_branches: bool = False


class KernelBranches(Struct, forbid_unknown_fields=True):
    """rules/kernel_branches.yml: the reviewed table of upstream branches and vendors."""
    schema: Literal[KERNEL_BRANCHES_SCHEMA]
    reviewed: Name
    branches: List[KernelBranch]
    vendors: Dict[str, KernelVendor]


class KernelRecords(Struct):
    """ext4audit/rules/kernel_cna_records.json, the kernel CNA's ext4 and jbd2 records, made by
    tools/kernel_records.py from the CNA's vulns repository (`source` names its commit)."""
    schema: Literal[KERNEL_RECORDS_SCHEMA]
    classes: List[Name]
    records: List[KernelRecord]
    source: Optional[Object] = None
    selection: Optional[str] = None
    fields: Optional[Dict[str, str]] = None


# ------------------------------------------------------------------ removed mount options (data)
class RemovedMountOption(Struct, forbid_unknown_fields=True):
    """Mount options that ext4 refuses from an upstream release on (ext4audit/rules/mount_options.py
    judges a kernel by it; that removed_in parses as a version is mount_options.load's check)."""
    options: typing.Annotated[List[Name], Meta(min_length=1)]
    removed_in: Name
    commit: typing.Annotated[str, Meta(pattern=r"^[0-9a-f]{12,40}$")]
    refused_as: Name
    note: Name
    references: typing.Annotated[List[typing.Annotated[str, Meta(pattern=r"^https://")]], Meta(min_length=1)]


class RemovedMountOptions(Struct, forbid_unknown_fields=True):
    """rules/removed_mount_options.yml: the ext4 mount options that kernels from a release on
    refuse, so a filesystem whose fstab entry names one does not mount there."""
    schema: Literal[REMOVED_MOUNT_OPTIONS_SCHEMA]
    removed: List[RemovedMountOption]


# ------------------------------------------------------------------ boot tools (data)
Https = typing.Annotated[str, Meta(pattern=r"^https://")]


class GrubReads(Struct, forbid_unknown_fields=True):
    """What GRUB's ext2 driver reads (boot_tools.py judges an image's GRUB by it)."""
    incompat_features: typing.Annotated[List[Name], Meta(min_length=1)]
    reads: List[Name]
    reads_since: Dict[str, Name]  # feature -> release (boot_tools.load checks each is x.y[.z])
    packages: typing.Annotated[List[Name], Meta(min_length=1)]
    references: typing.Annotated[List[Https], Meta(min_length=1)]


class FsckReads(Struct, forbid_unknown_fields=True):
    """The first e2fsprogs release whose e2fsck checks each feature."""
    reads_since: Dict[str, Name]
    packages: typing.Annotated[List[Name], Meta(min_length=1)]
    references: typing.Annotated[List[Https], Meta(min_length=1)]


class BootTools(Struct, forbid_unknown_fields=True):
    """rules/boot_tools.yml: the ext4 features an image's GRUB and e2fsprogs read, by version."""
    schema: Literal[BOOT_TOOLS_SCHEMA]
    grub: GrubReads
    e2fsprogs: FsckReads


# ------------------------------------------------------------------ decoding
def load_data(path: str, model: type, error: type) -> dict:
    """A data file of the rules folder, read and checked against model. Any problem is raised as
    error: "cannot read PATH: why", or the ContractError's "PATH: $.field: what is wrong"."""
    try:
        doc = safe_yaml.load(path)
    except (OSError, safe_yaml.Error, ValueError, RecursionError) as exc:
        raise error("cannot read %s: %s" % (path, exc))
    try:
        check(doc, model, path)
    except ContractError as exc:
        raise error(str(exc))
    return doc


def check(doc, model, where):
    """doc (JSON values) checked against model: a ContractError "where (host 'h'): $.field: what
    is wrong" (the host when the document names one)."""
    try:
        msgspec.convert(doc, model, strict=True)
    except msgspec.ValidationError as exc:
        host = doc.get("host") if isinstance(doc, dict) else None
        raise ContractError("%s%s: %s" % (where, " (host %r)" % host if isinstance(host, str) else "",
                                          explain(exc, model)))


_AT = re.compile(r"^(?P<what>.*) - at `(?P<path>[^`]*)`$")
_STEP = re.compile(r"\.([A-Za-z_][A-Za-z0-9_]*)|\[[^\]]*\]")


def explain(exc, model):
    """msgspec's "Invalid enum value 'x' - at `$.a.b`" as "$.a.b 'x' is not one of ..." (the
    field first, and what it may be), a wrong schema id as "is not a <schema> document", a
    pattern by its name (PATTERNS)."""
    match = _AT.match(str(exc))
    if not match:
        return "$: %s" % exc
    what, path = match.group("what"), match.group("path")
    choices = _literal_values(_field_type(model, path))
    value = what[len("Invalid enum value "):] if what.startswith("Invalid enum value ") else None
    if value is not None and choices and path.endswith(".schema"):
        return "%s %s is not a %s document" % (path, value, " or ".join(choices))
    if value is not None and choices:
        return "%s %s is not one of %s" % (path, value, ", ".join(choices))
    for pattern, name in PATTERNS.items():
        what = what.replace("matching regex %r" % pattern, "that is " + name)
    return "%s: %s" % (path, what)


class Failure(typing.NamedTuple):
    """Where a document fails its model: the steps from its root ("rules", 3, "tags", 0), msgspec's
    text for it, the field a "missing required" or "unknown" error names (else None) with the
    fields its object may have, the values a Literal allows there, and a hint where YAML's typing
    is the likely cause."""
    steps: List[Any]
    what: str
    field: Optional[str]
    fields: Tuple[str, ...]
    choices: List[str]
    hint: str


_NAMED_FIELD = re.compile(r"^Object (?:missing required|contains unknown) field `(?P<field>.*)`$")
# msgspec's `got` type for a bare YAML scalar where text belongs, and how to write it as text
_YAML_TYPED = {"int": "quote numbers", "float": "quote numbers", "bool": "quote yes, no, on, off, true and false",
               "date": "quote dates", "datetime": "quote dates"}
_GOT = re.compile(r"^Expected `str[^`]*`, got `(?P<got>\w+)`$")


def failure(exc, model):
    """A msgspec.ValidationError against model, taken apart for a reader's own message (the YAML
    readers name the waiver or rule, the field and the value a site wrote, in their terms)."""
    match = _AT.match(str(exc))
    what, path = (match.group("what"), match.group("path")) if match else (str(exc), "$")
    steps = []
    for step in _STEP.finditer(path[1:]):
        index = step.group(0)[1:-1]
        steps.append(step.group(1) or (int(index) if index.isdigit() else index))
    kind, named, got = _field_type(model, path), _NAMED_FIELD.match(what), _GOT.match(what)
    return Failure(steps, what, named.group("field") if named else None,
                   field_names(kind)[1] if named and isinstance(kind, type) else (), _literal_values(kind),
                   " (%s)" % _YAML_TYPED[got.group("got")] if got and got.group("got") in _YAML_TYPED else "")


def field_names(model):
    """(required, all) field names of a model, in its order."""
    fields = msgspec.structs.fields(model)
    return tuple(f.name for f in fields if f.required), tuple(f.name for f in fields)


def _field_type(model, path):
    """The annotated type at a msgspec error path ($.a[0].b) of model; None if it cannot be followed."""
    kind = model
    for step in _STEP.finditer(path[1:]):
        kind = _unwrap(kind)
        if step.group(1):
            hints = typing.get_type_hints(kind, include_extras=True) if isinstance(kind, type) else {}
            if step.group(1) not in hints:
                return None
            kind = hints[step.group(1)]
        else:
            args = typing.get_args(kind)
            kind = args[-1] if args else None
    return _unwrap(kind)


def _unwrap(kind):
    """Optional[X] and Annotated[X, ...] as X."""
    while True:
        if typing.get_origin(kind) is typing.Annotated:
            kind = typing.get_args(kind)[0]
        elif typing.get_origin(kind) is typing.Union:
            kinds = [k for k in typing.get_args(kind) if k is not type(None)]
            if len(kinds) != 1:
                return kind
            kind = kinds[0]
        else:
            return kind


def _literal_values(kind):
    return [str(v) for v in typing.get_args(kind)] if typing.get_origin(kind) is Literal else []


# ------------------------------------------------------------------ published schemas
# file name in schemas/ -> model; docs/reports.md links each
SCHEMAS = {
    "facts-record.json": FactsRecord,
    "play-hosts.json": PlayHosts,
    "probe-record.json": ProbeRecord,
    "probe-result.json": ProbeResult,
    "probe-plan.json": ProbePlan,
    "host-report.json": HostReport,
    "summary.json": Summary,
    "findings-index.json": FindingsIndex,
    "kernel-gate.json": KernelGate,
    "waivers.json": WaiverFile,
    "rules.json": RuleFile,
    "kernel-cna-records.json": KernelRecords,
    "kernel-branches.json": KernelBranches,
    "removed-mount-options.json": RemovedMountOptions,
    "boot-tools.json": BootTools,
}
SCHEMAS_DIR = os.path.join(ROOT, "schemas")


def schema_text(name):
    """The JSON Schema (draft 2020-12) of schemas/<name>, as the file holds it."""
    model = SCHEMAS[name]
    doc = dict({"$schema": "https://json-schema.org/draft/2020-12/schema", "title": model.__name__,
                "description": model.__doc__.strip()}, **msgspec.json.schema(model))
    return json.dumps(doc, indent=2, sort_keys=True, ensure_ascii=False) + "\n"


def write_schemas(folder=SCHEMAS_DIR):
    """Write every schema to folder (`make schemas`); tests/unit/test_contract.py checks they are current."""
    os.makedirs(folder, exist_ok=True)
    for name in SCHEMAS:
        with open(os.path.join(folder, name), "w", encoding="utf-8") as handle:
            handle.write(schema_text(name))
