"""Record a run folder in the store, in one transaction: a killed ingest leaves the store as it was.

A run is one night; a night may come in slices (AWX job slices, several controllers), each the
run folder of its own report step, named by --slice. Ingesting a slice replaces what the store had
of it, unless its content hash is the one already recorded: the same folder twice is one run, a
no-op. A folder whose report step did not finish (no summary.json) is recorded as an incomplete
slice without hosts: the night's verdict is incomplete, never pass.
"""

import glob
import hashlib
import os
from typing import Dict, List, Literal, Optional

import msgspec

from ext4audit import severity_rank
from ext4audit.model import contract
from ext4audit.report import reports
from ext4audit.store import backends
from ext4audit.model import times
from ext4audit.report import host_report

SLICE_TABLES = ("findings", "hosts", "kernel_groups", "rule_counts", "image_counts", "filesystems",
                "slices")  # a slice's rows, slices last
WORST = {"incomplete": 2, "fail": 1, "pass": 0}  # a night is as bad as its worst slice


# What the store keeps of a host report, decoded by the fields' own types (contract.HostReport's):
# the rest of the report (messages, remediation, passes, the filesystems' other facts: nine
# tenths of its bytes) is skipped unread, a tenth of the time of decoding it all (bench/README.md).
# gc=False: none of them holds a cycle, and 100,000 reports' worth would wake the collector often.
class _Kernel(msgspec.Struct, gc=False):
    """The report's kernel and what the store reads beside it: the facts' os-release (image_of)."""
    release: Optional[str] = None
    upstream: Optional[str] = None
    vendor: Optional[str] = None
    os_release: Optional[Dict[str, str]] = None


class _Waiver(msgspec.Struct, gc=False):
    justification: Optional[str] = None


class _Finding(msgspec.Struct, gc=False):
    rule: str
    severity: contract.Severity
    waived: bool
    waiver: Optional[_Waiver] = None
    device: Optional[str] = None
    mountpoint: Optional[str] = None
    # as the report step wrote it (reports.dump_compact: keys sorted, compact): its bytes are the key's
    evidence: msgspec.Raw = msgspec.Raw(b"null")


class _Filesystem(msgspec.Struct, gc=False):
    mountpoint: str
    device: Optional[str] = None
    superblock: Optional[contract.Superblock] = None


class _Policy(msgspec.Struct, gc=False):
    fail_on: contract.Severity


class _HostReport(msgspec.Struct, gc=False):
    schema: Literal[contract.FULL_HOST_REPORT_SCHEMA]
    host: contract.Name
    status: Literal[contract.HOST_STATUSES]
    findings: List[_Finding]
    groups: Optional[List[str]] = None
    reason: Optional[str] = None
    policy: Optional[_Policy] = None
    kernel: Optional[_Kernel] = None
    filesystems: Optional[List[_Filesystem]] = None


_HOST = msgspec.json.Decoder(_HostReport)
_VERSION = msgspec.json.Decoder(host_report.Version)
_NO_EVIDENCE = (b"null", b"{}")
_EVIDENCE = msgspec.json.Encoder(order="sorted")
HOST_COLUMNS = ("run_id", "slice", "host", "status", "reason", "kernel", "kernel_upstream", "kernel_vendor",
                "groups_json", "fail_on", "findings", "failing", "waived", "image")
FINDING_COLUMNS = ("run_id", "slice", "host", "rule", "severity", "device", "mountpoint", "waived", "waiver",
                   "evidence_key")
FILESYSTEM_COLUMNS = ("run_id", "slice", "host", "mountpoint", "device", "superblock")


def _run_files(run_dir: str) -> List[str]:
    return sorted(glob.glob(os.path.join(run_dir, "hosts", "*.json")))


def image_of(kernel: "_Kernel") -> Optional[str]:
    """What a host's facts know of the system image it runs: its /etc/os-release (a disk image's
    own, for ext4_image_facts' records), IMAGE_ID and IMAGE_VERSION where the image names
    itself, else PRETTY_NAME, else ID and VERSION_ID; None without one (a host not audited)."""
    release = kernel.os_release or {}
    for keys in (("IMAGE_ID", "IMAGE_VERSION"), ("PRETTY_NAME",), ("ID", "VERSION_ID")):
        named = " ".join(release[key] for key in keys if release.get(key))
        if named:
            return named
    return None


def evidence_key(evidence: Optional[dict]) -> Optional[str]:
    """A short hash of a finding's evidence: the same key on two nights means the same evidence."""
    return raw_evidence_key(_EVIDENCE.encode(evidence)) if evidence else None


def raw_evidence_key(encoded: bytes) -> Optional[str]:
    """evidence_key of evidence as the host report holds it (JSON, keys sorted, compact), unparsed."""
    return hashlib.sha256(encoded).hexdigest()[:16] if encoded not in _NO_EVIDENCE else None


def _decode_host(data: bytes, path: str, reader: host_report.Reader) -> "tuple[_HostReport, list]":
    """A host report's stored fields and its findings' evidence keys. A v1 report (the full one) is
    decoded for the store's fields alone and its evidence hashed as written; a v2 report is resolved
    in full through the run's shared file and facts record, its evidence hashed as v1 wrote it."""
    if _VERSION.decode(data).schema == contract.FULL_HOST_REPORT_SCHEMA:
        report = _HOST.decode(data)
        return report, [raw_evidence_key(bytes(f.evidence)) for f in report.findings]
    full = reader.read(path)
    keys = [evidence_key(f.get("evidence")) for f in full["findings"]]
    full["findings"] = [dict((k, v) for k, v in f.items() if k != "evidence") for f in full["findings"]]
    return msgspec.convert(full, _HostReport), keys


def read_run(run_dir: str) -> dict:
    """What the store keeps of a run folder: {"summary", "hosts": [(row, findings)], "hash"}, or
    {"summary": None, ...} for a folder whose report step did not finish."""
    digest = hashlib.sha256()
    if not os.path.exists(os.path.join(run_dir, reports.SUMMARY)):
        if not os.path.isdir(run_dir):
            raise reports.ReportError("run folder %s: not found" % run_dir)
        digest.update(b"incomplete\0" + "\0".join(sorted(os.listdir(run_dir))).encode("utf-8", "surrogateescape"))
        return {"summary": None, "hosts": [], "filesystems": [], "hash": digest.hexdigest(), "kernel_groups": []}
    summary = reports.read_complete_run(run_dir, "run folder")[0]
    with open(os.path.join(run_dir, reports.SUMMARY), "rb") as handle:
        digest.update(handle.read())
    fail_on_default = summary["policy"]["fail_on"]
    shared = os.path.join(run_dir, host_report.SHARED_FILE)
    if os.path.exists(shared):  # what v2 host reports refer to: part of the run's content
        with open(shared, "rb") as handle:
            digest.update(host_report.SHARED_FILE.encode("utf-8") + b"\0" + handle.read())
    hosts, filesystems, reader = [], [], host_report.Reader(run_dir, passes=False)
    for path in _run_files(run_dir):
        with open(path, "rb") as handle:
            data = handle.read()
        digest.update(os.path.basename(path).encode("utf-8", "surrogateescape") + b"\0" + data)
        try:
            report, keys = _decode_host(data, path, reader)
        except msgspec.ValidationError as exc:
            raise reports.ReportError("host report %s: %s" % (path, contract.explain(exc, contract.HostReport)))
        except msgspec.DecodeError as exc:
            raise reports.ReportError("host report %s is not valid JSON: %s" % (path, exc))
        fail_on = report.policy.fail_on if report.policy else fail_on_default
        kernel = report.kernel or _Kernel()
        findings = [(f.rule, f.severity, f.device, f.mountpoint, int(f.waived),
                     f.waiver.justification if f.waived and f.waiver else None, key)
                    for f, key in zip(report.findings, keys)]
        unwaived = [f for f in report.findings if not f.waived]
        row = (report.host, report.status, report.reason, kernel.release, kernel.upstream, kernel.vendor,
               msgspec.json.encode(report.groups or []).decode("utf-8"), fail_on, len(unwaived),
               sum(severity_rank(f.severity) >= severity_rank(fail_on) for f in unwaived),
               len(report.findings) - len(unwaived), image_of(kernel))
        hosts.append((row, findings))
        with_findings = set(f.mountpoint for f in report.findings)
        filesystems += [(report.host, fs.mountpoint, fs.device,
                         _EVIDENCE.encode(fs.superblock).decode("utf-8") if fs.superblock else None)
                        for fs in report.filesystems or [] if fs.mountpoint in with_findings]
    return {"summary": summary, "hosts": hosts, "filesystems": filesystems, "hash": digest.hexdigest(),
            "kernel_groups": summary.get("kernel_groups") or []}


def ingest(store: backends.Store, run_dir: str, slice_name: str = "", run_id: Optional[str] = None,
           scope: str = "") -> Dict[str, object]:
    """Record run_dir as slice `slice_name` of run `run_id` (default: the folder's run id).
    Returns {"run_id", "slice", "changed": False when the store had this content already}."""
    run = read_run(run_dir)
    summary = run["summary"]
    run_id = run_id or (summary or {}).get("run_id") or os.path.basename(os.path.normpath(run_dir))
    now = times.stamp(times.utc_now())
    with store.transaction():
        store.execute("INSERT INTO runs (run_id, ingested_at, verdict, complete, hosts, hosts_audited, findings, "
                      "waived, content_hash, scope) VALUES (?, ?, 'incomplete', 0, 0, 0, 0, 0, '', ?) "
                      "ON CONFLICT (run_id) DO NOTHING", (run_id, now, scope))
        store.lock_run(run_id)
        known = store.one("SELECT content_hash FROM slices WHERE run_id = ? AND slice = ?", (run_id, slice_name))
        if known and known[0] == run["hash"]:
            return {"run_id": run_id, "slice": slice_name, "changed": False}
        for table in SLICE_TABLES:
            store.execute("DELETE FROM %s WHERE run_id = ? AND slice = ?" % table, (run_id, slice_name))
        _insert_slice(store, run_id, slice_name, run, now)
        _update_run(store, run_id, scope, now)
    return {"run_id": run_id, "slice": slice_name, "changed": True}


def _insert_slice(store: backends.Store, run_id: str, slice_name: str, run: dict, now: str) -> None:
    summary = run["summary"]
    if summary is None:
        store.execute("INSERT INTO slices VALUES (?, ?, NULL, ?, 'incomplete', ?, 0, 0, 0, 0, 0, ?, 0)",
                      (run_id, slice_name, now, "the report step did not finish (no summary.json)", run["hash"]))
        return
    counts = summary["counts"]
    store.execute("INSERT INTO slices VALUES (?, ?, ?, ?, ?, ?, 1, ?, ?, ?, ?, ?, ?)", (
        run_id, slice_name, summary["generated_at"], now, summary["verdict"], summary["reason"], counts["hosts"],
        counts["hosts_audited"], sum(counts["by_severity"].values()), counts["waived"], run["hash"],
        sum(row[HOST_COLUMNS.index("findings") - 2] > 0 for row, _ in run["hosts"])))
    rules: Dict[str, list] = {}  # rule: [unwaived, hosts with one, waived]
    for row, findings in run["hosts"]:
        seen = set()
        for finding in findings:
            counts = rules.setdefault(finding[0], [0, 0, 0])
            counts[2 if finding[4] else 0] += 1
            if not finding[4] and finding[0] not in seen:
                seen.add(finding[0])
                counts[1] += 1
    store.insert("hosts", HOST_COLUMNS, ((run_id, slice_name) + row for row, _ in run["hosts"]))
    store.insert("findings", FINDING_COLUMNS, ((run_id, slice_name, row[0]) + f
                                               for row, findings in run["hosts"] for f in findings))
    store.insert("filesystems", FILESYSTEM_COLUMNS, ((run_id, slice_name) + fs for fs in run["filesystems"]))
    store.insert("rule_counts", ("run_id", "slice", "rule", "findings", "hosts", "waived"),
                 ((run_id, slice_name, rule) + tuple(counts) for rule, counts in sorted(rules.items())))
    images: Dict[str, int] = {}
    for row, _ in run["hosts"]:
        image = row[HOST_COLUMNS.index("image") - 2] or ""
        images[image] = images.get(image, 0) + 1
    store.insert("image_counts", ("run_id", "slice", "image", "hosts"),
                 ((run_id, slice_name, image, hosts) for image, hosts in sorted(images.items())))
    store.executemany("INSERT INTO kernel_groups VALUES (?, ?, ?, ?, ?, ?, ?, ?)", [
        (run_id, slice_name, g.get("kernel"), g.get("upstream"), g["rule"], g["severity"], g.get("action"),
         g["hosts"]) for g in run["kernel_groups"]])
    policy = summary["policy"]
    store.execute("UPDATE runs SET fail_on = ?, fail_on_new = ?, unreachable_is_incomplete = ? WHERE run_id = ?",
                  (policy["fail_on"], int(policy["fail_on_new"]), int(policy["unreachable_is_incomplete"]), run_id))


def _update_run(store: backends.Store, run_id: str, scope: str, now: str) -> None:
    """The night from its slices: the worst verdict, the sums, complete only when every slice is."""
    slices = store.rows("SELECT slice, generated_at, verdict, reason, complete, hosts, hosts_audited, findings, "
                        "waived, content_hash, hosts_with_findings FROM slices WHERE run_id = ? ORDER BY slice", (run_id,))
    worst = max(slices, key=lambda s: WORST.get(s[2], 2))
    reason = worst[3] if len(slices) == 1 else "%d slice(s); worst %s: %s" % (
        len(slices), worst[0] or "(unnamed)", worst[3])
    store.execute("UPDATE runs SET generated_at = ?, ingested_at = ?, verdict = ?, reason = ?, complete = ?, "
                  "hosts = ?, hosts_audited = ?, findings = ?, waived = ?, content_hash = ?, scope = ?, hosts_with_findings = ? "
                  "WHERE run_id = ?", (
                      max((s[1] for s in slices if s[1]), default=None), now, worst[2], reason,
                      int(all(s[4] for s in slices)), sum(s[5] for s in slices), sum(s[6] for s in slices),
                      sum(s[7] for s in slices), sum(s[8] for s in slices),
                      hashlib.sha256("".join(s[9] for s in slices).encode()).hexdigest(), scope,
                      sum(s[10] for s in slices), run_id))
