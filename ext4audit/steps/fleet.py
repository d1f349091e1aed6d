"""The report step over a whole fleet: one pass per host, in worker processes, in bounded memory.

Each host goes through the same steps once: read its facts record, evaluate the rules and
waivers, mark its findings against the baseline, write hosts/<host>.json, and append its part
of each report format's file (junit.xml, report.sarif, report.html: the run's writers, see
writers.py) and of the findings index (baseline.INDEX) to its shard's part files. What the
fleet files need from a host beyond that is its digest (reports.digest), a few hundred bytes. So memory is one host report per worker plus
every host's digest, and 10,000 hosts cost what 10 do per host.

The hosts are cut into shards in file order; worker processes (one per core, forked, so they
share the catalog, waivers, probe records and baseline index already loaded) take the shards,
and the parts are joined in shard order: the files are the same whatever the number of workers.

Nothing appears in the run folder until every host is done: hosts/ and the parts are made in a
staging folder inside it, which any error removes (a corrupt baseline host report found halfway
leaves nothing behind). Then hosts/ moves into place, each writer's file is written, and
summary.json last of all (reports.finish_run).
"""

import concurrent.futures
import contextlib
import ctypes
import glob
import multiprocessing
import os
import shutil
import signal
import tempfile

from ext4audit import DEFAULT_FAIL_ON
from ext4audit.model import contract
from ext4audit.probe import analysis as probe
from ext4audit.formats import writers as writers_mod
from ext4audit.report import baseline as baseline_mod, reports
from ext4audit.rules import engine, policy as policy_mod, waivers as waivers_mod
from ext4audit.parsers import run_folder
from ext4audit.model import times
from ext4audit.report import host_report

FACTS_SCHEMA = contract.FACTS_SCHEMA
PARALLEL_FROM = 200  # hosts; below this, forking workers costs more than it saves
SHARDS_PER_WORKER = 16  # small shards even out the workers' loads at the end of the pass


def read_record(path):
    """A facts record, decoded through contract.FactsRecord: a corrupt or foreign file is a clear
    error (exit 2) naming the file, the host and the field. Facts of another schema, or of a host
    not audited, are not checked: that host is reported as not audited. (The report step itself
    takes records through load_record, which fails the one host instead.)"""
    record = reports.read_json(path, "facts record")
    check_record(record, "facts record %s" % path)
    return record


def check_record(record, where):
    """A facts record decoded through contract.FactsRecord (ContractError); its facts only when it
    says it was audited with facts of this schema."""
    facts = record.get("facts") if isinstance(record, dict) else None
    audited = isinstance(facts, dict) and facts.get("schema") == FACTS_SCHEMA and record.get("status") == "audited"
    contract.check(record if audited or facts is None else dict(record, facts=None), contract.FactsRecord, where)


def failed_record(host, reason):
    """The record of a host the report step fails: no facts, the reason."""
    return {"host": host, "status": "failed", "reason": reason, "groups": None, "policy": None, "facts": None}


def load_record(item, owners):
    """The facts record of one item of the run: a record the step made itself (a dict: a host of
    the play without a record, see report_hosts), or a record file, read within the bounds of
    run_folder (size, counts, lengths). A file that cannot be read, breaks a bound or is not of the
    record's shape fails its host with the reason, and the others are reported: its host is the
    one its file name belongs to (owners: {file name: host} of the play's hosts), else the one it
    names. Only a file that names no host is an error of the whole step (ReportError)."""
    if isinstance(item, dict):
        return item
    where = "facts record %s" % os.path.basename(item)
    owner = owners.get(os.path.basename(item))
    try:
        with open(item, "rb") as handle:
            data = handle.read(run_folder.ANSWER_MAX_BYTES + 1)
    except OSError as exc:
        data, problem = None, "%s could not be read: %s" % (where, exc.strerror)
    record = None
    if data is not None and len(data) > run_folder.ANSWER_MAX_BYTES:
        problem = "%s is over %d bytes (run_folder.ANSWER_MAX_BYTES)" % (where, run_folder.ANSWER_MAX_BYTES)
    elif data is not None:
        try:
            record, problem = run_folder.decode_answer(data)
            problem = problem and "%s breaks a bound: %s" % (where, problem)
        except (ValueError, RecursionError) as exc:
            problem = "%s is not valid JSON: %s" % (where, str(exc)[:200])
    named = record.get("host") if isinstance(record, dict) else None
    host = owner or (named if isinstance(named, str) and named else None)
    if host is None:
        raise reports.ReportError("%s (%s) names no host: %s" % (where, item, problem or "$.host is missing"))
    if problem is None and named != host:
        problem = "%s is the file of host %r but names host %r" % (where, host, named)
    if problem is None:
        try:
            check_record(record, where)
        except contract.ContractError as exc:
            problem = str(exc)
    return failed_record(host, problem) if problem else record


def build_host_report(record, catalog, waivers, run_id, now, probes=None, plan=None, fail_on=DEFAULT_FAIL_ON):
    """Turn one facts record written by the playbook into a host report.

    probes: the run's probe records by host (None when the run had no probe), plan: its probe
    plan. A host with a record gets a `probe` section; with probes, every finding of a rule that
    has a confirmation says what the probe measured for it (and may be escalated). The record's
    policy (policy.py) decides which rules run and the severities; fail_on: its default.
    """
    host = record.get("host")
    if not isinstance(host, str) or not host:
        raise reports.ReportError("facts record has no host name")
    try:
        policy, skipped = policy_mod.make(record.get("policy"), catalog, "host %s" % host, fail_on)
    except policy_mod.PolicyError as exc:
        if record.get("policy") is None:  # the step's own default: an error of the step
            raise reports.ReportError(str(exc))
        return build_host_report(failed_record(host, "its record's policy is not valid: %s" % exc), catalog, waivers,
                                 run_id, now, probes, plan, fail_on)
    section = probe.host_section(probes[host], plan) if probes and host in probes else None
    report = {"schema": reports.HOST_SCHEMA, "run_id": run_id, "generated_at": times.stamp(now),
              "host": host, "groups": record.get("groups") or [], "status": record.get("status", "failed"),
              "reason": record.get("reason"), "policy": policy,
              "skipped": [{"rule": rid, "title": catalog.by_id[rid]["title"], "reason": why}
                          for rid, why in skipped.items()],
              "kernel": None, "filesystems": [], "netfs": [], "not_audited": [],
              "findings": [], "undetermined": [], "passed": [], "expired_waivers": [], "errors": [],
              "probe": section}
    facts = record.get("facts")
    if report["status"] == "audited" and (not isinstance(facts, dict) or facts.get("schema") != FACTS_SCHEMA):
        report.update(status="failed", reason="facts from the host are missing or of an unknown schema")
    elif report["status"] == "audited":
        try:
            findings, undetermined, passed = engine.evaluate_host(facts, catalog, skipped, policy["capacity_limits"])
        except (TypeError, ValueError, KeyError, AttributeError, IndexError) as exc:  # facts the model let through
            return build_host_report(failed_record(host, "its facts could not be evaluated (%s: %s)" % (
                type(exc).__name__, exc)), catalog, waivers, run_id, now, probes, plan, fail_on)
        if probes is not None:
            probe.confirm(findings, section, catalog.by_id)
        # waivers first: a waiver that takes records out of a kernel finding lowers its severity with
        # them, and the site's word on severities is the last
        expired = waivers_mod.apply(findings, waivers, host, report["groups"], now)
        policy_mod.override(findings, policy["severity_overrides"], policy["kernel_no_fix_counts"])
        report.update(kernel=facts["kernel"], filesystems=facts["filesystems"], netfs=facts["netfs"],
                      not_audited=facts.get("not_audited") or [],
                      findings=findings, undetermined=undetermined, passed=passed,
                      expired_waivers=expired, errors=list(facts.get("errors") or []))
    if section and section["status"] in probe.FAILED:
        report["errors"].append({"where": "probe", "reason": "%s: %s" % (
            section["status"], section["reason"] or "no reason given")})
    return report


class Job:
    """What every host of a run is reported with: the same for every shard and worker."""

    def __init__(self, run_dir, catalog, waivers, base, probes, plan, run_id, now, fail_on, fail_on_new,
                 hosts, plotted, catalog_path=None, inventory=None, formats=tuple(writers_mod.FORMATS), play_hosts=None):
        self.run_dir, self.catalog, self.waivers, self.base = run_dir, catalog, waivers, base
        self.probes, self.plan, self.run_id, self.now = probes, plan, run_id, now
        self.fail_on, self.fail_on_new, self.hosts = fail_on, fail_on_new, hosts
        self.plotted, self.catalog_path, self.inventory = plotted, catalog_path, inventory
        self.formats = formats  # writers.FORMATS names, in that order
        self.staging = None
        self.history = None  # the store's finding-group history (open since, trend), set by the command
        self.writers = None  # see _writers
        # what the v2 host reports refer to (host_report.Shared): this process's; the parent's
        # gathers every worker's evidence (report_hosts)
        self.shared = host_report.Shared(catalog)
        # the hosts of the facts play (reports.play_hosts; None: the records' hosts), and the
        # file name the role gives each one's record (load_record)
        self.play_hosts = play_hosts
        self.owners = dict((run_folder.record_name(host), host) for host in play_hosts or ())


_JOB = None  # the job of the current report step; worker processes inherit it when they fork


def run_shard(number, paths, first_index):
    """Report on one shard's hosts (facts record paths) and return their digests, each with its
    index in the run and its baseline part, and the shared evidence (host_report.Shared) this
    process had not handed on before."""
    job = _JOB
    # A folder per shard: workers creating files in one folder at once contend for its lock and
    # for the same inode group (measured: 2.6 times the kernel time at 10,000 hosts).
    hosts_dir = _hosts_dir(job, number)
    os.mkdir(hosts_dir)
    digests, started = [], set()  # the formats with a part in this shard's part file
    outputs = [(name, writer, open(_parts(job, name, writer).path(number), "w", encoding="utf-8"))
               for name, writer in _writers(job)]
    index = open(_index_parts(job).path(number), "wb")
    try:
        for offset, path in enumerate(paths):
            report = build_host_report(load_record(path, job.owners), job.catalog, job.waivers, job.run_id, job.now,
                                       job.probes, job.plan, job.fail_on)
            part = baseline_mod.compare_host(report, job.base) if job.base else None
            # No temporary name and no fsync per file: the whole folder is new, moves into place
            # when complete, and is flushed once before `latest` moves.
            facts_file = None if isinstance(path, dict) else "facts/" + os.path.basename(path)  # (report_hosts' paths)
            try:
                text = reports.dump_compact(host_report.compact(report, facts_file, job.shared))
            except UnicodeEncodeError as exc:  # json.loads lets "\udc80" through; UTF-8 cannot carry it
                raise reports.ReportError("%s: host %r has text that is not Unicode in its facts or probe record "
                                          "(a lone surrogate such as \\udc80): %s" % (path, report["host"], exc))
            try:
                with open(os.path.join(hosts_dir, reports.host_report_file(report["host"])), "xb") as out:
                    out.write(text)
            except FileExistsError:
                raise _clash(report["host"], path)
            digest = reports.digest(report, job.fail_on, job.fail_on_new, compared=job.base is not None)
            digest.update(index=first_index + offset, baseline=part)
            for name, writer, handle in outputs:
                piece = writer.host(report, digest)
                if piece:
                    handle.write(writer.separator + piece if name in started else piece)
                    started.add(name)
            index.write(b"," + baseline_mod.index_entry(report) if offset else baseline_mod.index_entry(report))
            digests.append(digest)
        for name, writer, handle in outputs:
            piece = writer.shard_end()
            if piece:
                handle.write(writer.separator + piece if name in started else piece)
    finally:
        index.close()
        for _, _, handle in outputs:
            handle.close()
    return digests, job.shared.take_new()


def _hosts_dir(job, shard):
    return os.path.join(job.staging, "hosts.%05d" % shard)


def _clash(host, where):
    return reports.ReportError("%s: a second report for host %r (two facts records for it, or two host names with "
                               "the same file name in hosts/)" % (where, host))


def _writers(job):
    """[(format name, writer)] of the job's formats, made once (workers inherit them)."""
    if job.writers is None:
        job.writers = [(name, writers_mod.writer_class(name)(job)) for name in job.formats]
    return job.writers


def _parts(job, name, writer):
    return writers_mod.Parts(job.staging, name, writer.separator)


def _index_parts(job):
    """The hosts' entries of the findings index (baseline.INDEX), which every run has, whatever its formats."""
    return writers_mod.Parts(job.staging, "findings-index", ",")


def _die_with_parent():
    """A worker dies with the report step (PR_SET_PDEATHSIG): a killed step leaves no worker."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (AttributeError, OSError):
        pass


def default_jobs():
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def report_hosts(job, paths, jobs):
    """Run every shard (in worker processes when there are enough hosts) and return every host's
    digest in run order. hosts/ and the parts are in job.staging."""
    global _JOB
    jobs = max(1, jobs) if len(paths) >= PARALLEL_FROM else 1
    count = jobs * SHARDS_PER_WORKER if jobs > 1 else 1
    size = -(-len(paths) // count) if paths else 1
    if count > 1:  # each shard starts at a multiple of SHARD_ALIGN (writers may cut blocks of it)
        size = -(-size // writers_mod.SHARD_ALIGN) * writers_mod.SHARD_ALIGN
    shards = [(number, paths[start:start + size], start) for number, start in enumerate(range(0, len(paths), size))]
    _JOB = job
    _writers(job)  # made before the workers fork, they inherit them (0.3 s of set-up per process)
    try:
        if jobs == 1:
            return _with_missing_hosts(job, _one_report_per_host([d for shard in shards for d in run_shard(*shard)[0]]))
        context = multiprocessing.get_context("fork")
        with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_die_with_parent) as pool:
            futures = [pool.submit(run_shard, *shard) for shard in shards]  # (the workers fork at the first)
            try:
                with reports.writing_back() as write_back:  # a thread: started after the fork
                    digests = []
                    for (number, _, _), future in zip(shards, futures):
                        shard_digests, evidence = future.result()
                        digests.extend(shard_digests)
                        job.shared.evidence.update(evidence)
                        write_back(_hosts_dir(job, number))  # its host reports go to disk while the workers work
                return _with_missing_hosts(job, _one_report_per_host(digests))
            except concurrent.futures.process.BrokenProcessPool as exc:
                raise reports.ReportError("a worker of the report step died (%s): nothing was written" % exc)
            finally:
                for future in futures:
                    future.cancel()
    finally:
        _JOB = None


LAST_SHARD = 99999  # the hosts of the play without a record: after every shard of records
NO_RECORD = ("no facts record: the play did not save an answer of this host (it did not reach the facts task, or "
             "stopped before its answer was saved)")


def _with_missing_hosts(job, digests):
    """digests, and after them those of the play's hosts that have no record, each failed with the
    reason (in this process, as one last shard): a host never drops out of the run."""
    seen = set(d["host"] for d in digests)
    missing = [failed_record(host, NO_RECORD) for host in job.play_hosts or () if host not in seen]
    return digests + run_shard(LAST_SHARD, missing, len(digests))[0] if missing else digests


def _one_report_per_host(digests):
    seen = set()
    for digest in digests:
        if digest["host"] in seen:
            raise reports.ReportError("two facts records for host %r: one report per host" % digest["host"])
        seen.add(digest["host"])
    return digests


def stage(run_dir):
    """A staging folder inside the run folder."""
    return tempfile.mkdtemp(prefix=".report-", dir=run_dir)


def put_hosts_in_place(job, run_dir, staging):
    """Gather the shards' host reports into hosts/ and move it to run_dir/hosts, after the file
    of what they refer to (host_report.SHARED_FILE; an earlier report of the same run goes to the
    staging folder, which is removed, and its summary.json is removed first: the folder is
    incomplete from its first change until reports.finish_run)."""
    gathered = os.path.join(staging, "hosts")
    os.mkdir(gathered)
    for shard in sorted(glob.glob(os.path.join(staging, "hosts.*"))):
        for name in os.listdir(shard):
            if os.path.lexists(os.path.join(gathered, name)):
                raise _clash(name, shard)
            os.rename(os.path.join(shard, name), os.path.join(gathered, name))
    with contextlib.suppress(FileNotFoundError):
        os.unlink(os.path.join(run_dir, reports.SUMMARY))
    reports.write_atomic(os.path.join(run_dir, host_report.SHARED_FILE),
                         reports.dump_compact(job.shared.document(job.run_id)).decode("utf-8"), durable=False)
    target = os.path.join(run_dir, "hosts")
    if os.path.lexists(target):
        os.replace(target, os.path.join(staging, "hosts-before"))
    os.replace(gathered, target)


def discard(staging):
    shutil.rmtree(staging, ignore_errors=True)


def write_fleet_files(job, summary, digests):
    """Write the findings index (baseline.INDEX: a later run's baseline reads it) and each writer's
    file from the summary, the digests and its staged parts (hosts/ is in place), and remove the
    files of the formats this run does not write (an earlier report of the same run may have left
    them); summary.json is not one of them (reports.finish_run writes it last)."""
    with reports.atomic_file(os.path.join(job.run_dir, baseline_mod.INDEX), durable=False) as out:
        baseline_mod.write_index(out, summary, _index_parts(job))
    for name, writer in _writers(job):
        with reports.atomic_file(os.path.join(job.run_dir, writer.file), durable=False) as out:
            writer.finish(out, summary, digests, _parts(job, name, writer))
    for name in set(writers_mod.FORMATS) - set(job.formats):
        writer_class = writers_mod.writer_class(name)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(os.path.join(job.run_dir, writer_class.file))
        if getattr(writer_class, "folder", None):  # a file's data folder (report.html's report-data/)
            shutil.rmtree(os.path.join(job.run_dir, writer_class.folder), ignore_errors=True)
