"""Merge sliced runs into one run folder, which the report step then reports on as one run.

    python -m ext4audit merge OUT_DIR SLICE_DIR... [the report options]

A slice is a run folder that playbooks/audit.yml wrote for part of the fleet: a `--limit` run,
one job of an AWX / Automation Platform sliced job, or the run of another controller. The merged
folder gets every slice's facts/ and probe/ records (the same bytes: a hard link where the slice
is on the same filesystem, else a copy) and the one probe plan, so the report step sees exactly
what a run over the whole fleet would have collected.

Refused before anything is written (exit 2): OUT_DIR exists; a slice without facts/; a slice
whose report step did not finish (no summary.json: reports.read_complete_run) or whose facts/
lacks a host its summary.json lists (a copy cut short); a host in two slices; slices that ran
different probe plans; a record that cannot be read.
"""

import glob
import os
import shutil

import msgspec

from ext4audit.model import contract
from ext4audit.probe import analysis as probe
from ext4audit.report import reports
from ext4audit.parsers import run_folder


class _RecordHost(msgspec.Struct):
    """The one field of a facts record merge reads (msgspec skips the rest: a fifth of json.loads'
    time, 2 s of the stage at 10,000 hosts); the report step checks the whole record."""

    host: object = None


def collect(slices, play_hosts=None):
    """Check the slices; return {path in the merged folder: source file}, and add the hosts of
    their plays (play-hosts.json) to play_hosts. Raises ReportError."""
    files, owners, plan, plan_slice = {}, {}, None, None
    play_hosts = [] if play_hosts is None else play_hosts
    for folder in slices:
        if not os.path.isdir(os.path.join(folder, "facts")):
            raise reports.ReportError("slice %s has no facts/ folder: not a run folder of the audit" % folder)
        _, reported = reports.read_complete_run(folder, "slice")
        recorded = set()
        for path in sorted(glob.glob(os.path.join(folder, "facts", "*.json"))):
            host = reports.read_json(path, "facts record", _RecordHost).host
            if not isinstance(host, str) or not host:
                raise reports.ReportError("facts record %s has no host name" % path)
            _claim(owners, ("facts", host), folder)
            recorded.add(host)
            files[os.path.join("facts", os.path.basename(path))] = path
        slice_hosts = reports.play_hosts(folder) or []
        play_hosts.extend(slice_hosts)  # slices do not overlap (checked by their records)
        recorded |= set(slice_hosts)  # a host of the play without a record: reported as failed
        if recorded != set(reported):
            missing, extra = sorted(set(reported) - recorded), sorted(recorded - set(reported))
            raise reports.ReportError("slice %s is incomplete: its summary.json lists %d host(s), facts/ has records "
                                      "of %d%s%s" % (folder, len(reported), len(recorded),
                                                     "; no record of %s" % reports.some(missing) if missing else "",
                                                     "; not in the summary: %s" % reports.some(extra) if extra else ""))
        for path in sorted(glob.glob(os.path.join(folder, "probe", "*.json"))):
            doc = reports.read_json(path, "probe file")
            try:
                if isinstance(doc, dict) and doc.get("schema") == probe.PLAN_SCHEMA:
                    probe.check_plan(doc, "probe file %s" % path)
                    if plan is not None and doc != plan:
                        raise reports.ReportError("slices %s and %s ran different probe plans (%s; %s): their "
                                                  "sweeps do not compare" % (plan_slice, folder, _plan_id(plan),
                                                                             _plan_id(doc)))
                    plan, plan_slice = doc, folder
                    files[os.path.join("probe", "plan.json")] = path
                    continue
                probe.check_record(doc, "probe file %s" % path)
            except (contract.ContractError, probe.ProbeError) as exc:
                raise reports.ReportError(str(exc))
            _claim(owners, ("probe", doc["host"]), folder)
            files[os.path.join("probe", os.path.basename(path))] = path
    return files


def _claim(owners, key, folder):
    """A host's record comes from one slice only: slices that overlap would count it twice."""
    if key in owners:
        raise reports.ReportError("host %r has %s records in two slices: %s and %s (slices must not overlap)"
                                  % (key[1], key[0], owners[key], folder))
    owners[key] = folder


def _plan_id(plan):
    return "seed %s, %s runs, level set %s" % (plan.get("seed"), plan.get("runs"), plan.get("level_set"))


def stage(out_dir, slices):
    """Check the slices, then make out_dir with their records (facts/ and probe/, as the playbook's
    prepare step makes them). Nothing is written unless every check passes."""
    if os.path.lexists(out_dir):
        raise reports.ReportError("%s exists already; merge into a new folder (reports are never overwritten)" % out_dir)
    if not slices:
        raise reports.ReportError("no slice to merge")
    play_hosts = []
    files = collect(slices, play_hosts)
    os.makedirs(os.path.dirname(os.path.abspath(out_dir)), exist_ok=True)
    os.mkdir(out_dir)  # raises if it appeared meanwhile
    try:
        for sub in ("facts", "probe"):
            os.mkdir(os.path.join(out_dir, sub))
        for target, source in sorted(files.items()):
            _link_or_copy(source, os.path.join(out_dir, target))
        if play_hosts:
            reports.write_json(os.path.join(out_dir, run_folder.PLAY_HOSTS), {"hosts": play_hosts})
    except BaseException:
        discard(out_dir)
        raise
    return len([t for t in files if t.startswith("facts" + os.sep)])


def _link_or_copy(source: str, target: str) -> None:
    """A finished run's records are never written again, so the merged folder may share them: a
    hard link is one system call, where a copy opens, reads and writes (10,000 records: 0.2 s
    against 3 to 6 s on this machine). Another filesystem, or one without links: a copy."""
    try:
        os.link(source, target)
    except OSError:
        shutil.copyfile(source, target)


def discard(out_dir):
    """Remove a merged folder this run made (the report step failed: nothing is left half done)."""
    shutil.rmtree(out_dir, ignore_errors=True)
