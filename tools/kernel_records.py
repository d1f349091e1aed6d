#!/usr/bin/env python3
"""Generate rules/kernel_cna_records.json from the kernel CNA's `vulns` repository.

The Linux kernel's CVE Numbering Authority publishes one CVE JSON 5 record per fix it assigns
(cve/published/<year>/<id>.json in git.kernel.org/pub/scm/linux/security/vulns.git). This script
keeps the records about ext4 and jbd2 and writes, per record, what an audit needs to tell whether
a kernel still carries the bug: where it came in (mainline, and stable branches it was
backported into), the first fixed release of each stable branch, the mainline fix, the fix
commits, and the record's class and the feature it needs, as reviewed by hand in
rules/kernel_record_classes.yml (a record missing there, or an entry there for a record the source
does not have, stops the script with an error naming the file and the id).

Usage (SOURCE is one of):
  a work tree of the repository          tools/kernel_records.py ~/vulns
  a bare git directory (with --rev)      tools/kernel_records.py /path/repo.git --rev master
  a folder of <year>/<id>.json folders   tools/kernel_records.py shared/data/kernel-cna-ext4-jbd2
Output: rules/kernel_cna_records.json (-o to change). The same input gives the same bytes.
A folder copied from a checkout records no commit unless --commit and --commit-date name it.
"""

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
from typing import Iterable, List, Optional, Tuple, Union

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, ROOT)
from ext4audit.model import contract  # noqa: E402  (the file's model and its reader)
from ext4audit.rules import kernel_records
DEFAULT_OUTPUT = os.path.join(ROOT, "rules", "kernel_cna_records.json")
DEFAULT_REVIEWED = os.path.join(ROOT, "rules", "kernel_record_classes.yml")
REVIEWED_NAME = "rules/kernel_record_classes.yml"
DEFAULT_REPOSITORY = "https://git.kernel.org/pub/scm/linux/security/vulns.git"
SCHEMA = contract.KERNEL_RECORDS_SCHEMA
PUBLISHED = "cve/published"
MAX_RECORD_BYTES = 4 << 20  # the largest record in the tree is some 100 KiB
SINCE_THE_START = kernel_records.SINCE_THE_START

PROGRAM_DIRS = ("fs/ext4/", "fs/jbd2/")
TITLE_PREFIXES = ("ext4:", "jbd2:")
SELECTION = ("records with a programFiles entry under %s, or whose title starts with %s (a fix"
             " to an ext4 bug made in shared code, e.g. fs/quota, keeps the subsystem prefix)"
             % (" or ".join(PROGRAM_DIRS), " or ".join(TITLE_PREFIXES)))

CLASSES = ("data corruption", "crash/BUG", "hang/deadlock", "memory safety", "leak", "other")
_REVIEW_FIELDS = {"class", "reason", "needs"}

_RELEASE = re.compile(r"^\d+\.\d+(?:\.\d+)?$")  # as the CNA writes them: 6.8, 6.1.75, 2.6.19
_BRANCH_STAR = re.compile(r"^(\d+\.\d+)\.\*$")  # lessThanOrEqual "6.1.*"


class RecordError(ValueError):
    """A record the generator cannot read; the message names the file and the field."""


def _key(release):
    return tuple(int(part) for part in release.split("."))


def _branch(release):
    return ".".join(release.split(".")[:2])


def read_reviewed(path: str) -> dict:
    """{record id: {"class", "class_reason", "needs"}} of the reviewed table
    (rules/kernel_record_classes.yml); a RecordError naming the file, the id and the field for
    anything else."""
    try:
        with open(path, encoding="utf-8") as handle:
            doc = yaml.safe_load(handle)
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise RecordError("%s: cannot read the reviewed classes: %s" % (path, exc))
    records = doc.get("records") if isinstance(doc, dict) else None
    if not isinstance(records, dict):
        raise RecordError("%s: records is not a mapping of record ids" % path)
    reviewed = {}
    for cve_id, entry in records.items():
        where = "%s: records.%s" % (path, cve_id)
        if not isinstance(cve_id, str) or not re.match(contract.RECORD_ID_PATTERN, cve_id):
            raise RecordError("%s: is not a record id like CVE-2024-26601" % where)
        if not isinstance(entry, dict) or not _REVIEW_FIELDS >= set(entry) >= {"class", "reason"}:
            raise RecordError("%s: needs class and reason (and may name needs), nothing else" % where)
        if entry["class"] not in CLASSES:
            raise RecordError("%s.class %r is not one of %s" % (where, entry["class"], ", ".join(CLASSES)))
        if not isinstance(entry["reason"], str) or not entry["reason"].strip():
            raise RecordError("%s.reason is not a sentence" % where)
        needs = entry.get("needs")
        if needs is not None and needs not in kernel_records.RELEVANCE:
            raise RecordError("%s.needs %r is not one of %s"
                              % (where, needs, ", ".join(sorted(kernel_records.RELEVANCE))))
        reviewed[cve_id] = {"class": entry["class"], "class_reason": entry["reason"], "needs": needs}
    return reviewed


def _cna(doc, name):
    try:
        cna = doc["containers"]["cna"]
        cve_id = doc["cveMetadata"]["cveId"]
    except (KeyError, TypeError):
        raise RecordError("%s: no containers.cna or cveMetadata.cveId" % name)
    if not isinstance(cna, dict) or not isinstance(cna.get("affected"), list):
        raise RecordError("%s: containers.cna.affected is not a list" % name)
    return cve_id, cna


def selected(doc, name):
    """Is this record about ext4 or jbd2 (SELECTION)?"""
    _, cna = _cna(doc, name)
    files = [f for entry in cna["affected"] if isinstance(entry, dict)
             for f in (entry.get("programFiles") or []) if isinstance(f, str)]
    title = cna.get("title") or ""
    return any(f.startswith(PROGRAM_DIRS) for f in files) or title.startswith(TITLE_PREFIXES)


def _release(value, name, field):
    if not isinstance(value, str) or not _RELEASE.match(value):
        raise RecordError("%s: %s is not a release like 6.1.75: %r" % (name, field, value))
    return value


def summarise(doc, name):
    """The data file's entry for one record (CVE JSON 5 as the kernel CNA writes it).

    The CNA writes two kinds of `affected` entries. defaultStatus "affected": the mainline
    introduction (a bare `version`, and `0 lessThan <it>` unaffected; none means since the
    start), per stable branch the first fixed release (`<fix> lessThanOrEqual "6.1.*"`) and the
    mainline fix (versionType original_commit_for_fix). defaultStatus "unaffected": git commit
    ranges (the fix commits) and semver `affected` ranges for stable branches the bug reached by
    a backport before its mainline introduction (or for records whose mainline never released
    it), ending at that branch's fix or at the next mainline release (no fix in the branch).
    """
    cve_id, cna = _cna(doc, name)
    files, fix_commits = set(), []
    introduced, fixed, backported, mainline_fix, default_affected = None, {}, {}, None, False
    ranges = []
    for i, entry in enumerate(cna["affected"]):
        if not isinstance(entry, dict):
            raise RecordError("%s: containers.cna.affected[%d] is not a mapping" % (name, i))
        files.update(entry.get("programFiles") or [])
        default_affected |= entry.get("defaultStatus") == "affected"
        for j, version in enumerate(entry.get("versions") or []):
            field = "containers.cna.affected[%d].versions[%d]" % (i, j)
            if not isinstance(version, dict):
                raise RecordError("%s: %s is not a mapping" % (name, field))
            kind, status = version.get("versionType"), version.get("status")
            start, below, upto = version.get("version"), version.get("lessThan"), version.get("lessThanOrEqual")
            if kind == "git":
                if below and below not in fix_commits:
                    fix_commits.append(below)
            elif kind is None and status == "affected" and below is None and upto is None:
                if introduced is not None:
                    raise RecordError("%s: %s: a second introducing release" % (name, field))
                introduced = _release(start, name, field + ".version")
            elif kind == "semver" and status == "unaffected" and start == "0" and below:
                _release(below, name, field + ".lessThan")  # restates the introduction
            elif kind == "semver" and status == "unaffected" and upto and _BRANCH_STAR.match(upto):
                branch = _BRANCH_STAR.match(upto).group(1)
                if _branch(_release(start, name, field + ".version")) != branch:
                    raise RecordError("%s: %s: fix %s is not in branch %s" % (name, field, start, branch))
                fixed[branch] = start
            elif kind == "original_commit_for_fix" and status == "unaffected" and upto == "*":
                mainline_fix = _release(start, name, field + ".version")
            elif kind == "semver" and status == "affected" and below:
                ranges.append((start, _release(below, name, field + ".lessThan"), field))
            else:
                raise RecordError("%s: %s: unknown version entry %r" % (name, field, version))
    if default_affected and introduced is None:
        introduced = SINCE_THE_START
    for start, below, field in ranges:
        end_branch = below.count(".") == 2 and _branch(below)
        if start != "0":
            branch = _branch(_release(start, name, field + ".version"))
            if end_branch and end_branch != branch:
                raise RecordError("%s: %s: range %s..%s spans branches" % (name, field, start, below))
            # A range in a branch the mainline introduction already covers adds nothing.
            if introduced in (None, SINCE_THE_START) or _key(branch) < _key(introduced)[:2]:
                backported[branch] = start
        if end_branch:
            if fixed.get(end_branch, below) != below:
                raise RecordError("%s: %s: branch %s fixed in %s and in %s"
                                  % (name, field, end_branch, below, fixed[end_branch]))
            fixed[end_branch] = below
    if introduced is None and not backported:
        raise RecordError("%s: containers.cna.affected names no affected release" % name)
    title = cna.get("title")
    if not isinstance(title, str) or not title:
        raise RecordError("%s: containers.cna.title is missing" % name)
    return {
        "id": cve_id, "title": title, "program_files": sorted(files), "introduced": introduced,
        "backported_into": _by_branch(backported), "fixed": _by_branch(fixed),
        "fixed_mainline": mainline_fix, "fix_commits": fix_commits,
    }


def _by_branch(mapping):
    # JSON objects keep insertion order; sort_keys would put 6.12 before 6.6.
    return dict(sorted(mapping.items(), key=lambda item: _key(item[0])))


def _id_key(cve_id):
    year, number = cve_id.split("-")[1:]
    return int(year), int(number)


def _parse(data, name):
    if len(data) > MAX_RECORD_BYTES:
        raise RecordError("%s: larger than %d bytes" % (name, MAX_RECORD_BYTES))
    try:
        return json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError) as exc:
        raise RecordError("%s: not JSON: %s" % (name, exc))


def read_tree(folder):
    """(name, bytes) of every <year>/<id>.json under folder, in name order."""
    for year in sorted(os.listdir(folder)):
        year_dir = os.path.join(folder, year)
        if not (year.isdigit() and os.path.isdir(year_dir)):
            continue
        for entry in sorted(os.listdir(year_dir)):
            if entry.endswith(".json"):
                path = os.path.join(year_dir, entry)
                with open(path, "rb") as handle:
                    yield path, handle.read(MAX_RECORD_BYTES + 1)


def _git(where, *args, **kwargs):
    """Run git on a bare git directory or, with where=("-C", tree), on a work tree."""
    place = list(where) if isinstance(where, tuple) else ["--git-dir", where]
    return subprocess.run(["git"] + place + list(args), check=True,
                          stdout=subprocess.PIPE, **kwargs).stdout


def read_git(git_dir, rev):
    """(name, bytes) of every cve/published/<year>/<id>.json at rev, read with git cat-file."""
    listing = _git(git_dir, "ls-tree", "-r", "-z", rev, "--", PUBLISHED).decode()
    blobs = []
    for line in filter(None, listing.split("\0")):
        meta, path = line.split("\t", 1)
        parts = path.split("/")
        if len(parts) == 4 and parts[2].isdigit() and path.endswith(".json"):
            blobs.append((path, meta.split()[2]))
    blobs.sort()
    out = _git(git_dir, "cat-file", "--batch", input="".join(sha + "\n" for _, sha in blobs).encode())
    offset = 0
    for path, sha in blobs:
        header_end = out.index(b"\n", offset)
        size = int(out[offset:header_end].split()[2])
        yield path, out[header_end + 1:header_end + 1 + size]
        offset = header_end + 2 + size


def source_of(where: Union[None, str, tuple], rev: Optional[str], repository: str,
              commit: Optional[str] = None, date: Optional[str] = None) -> dict:
    """The commit and its date: from git, or as given for a folder that is not a git checkout."""
    if where:
        commit, date = _git(where, "log", "-1", "--format=%H %cI", rev).decode().split()
    return {"repository": repository, "commit": commit, "commit_date": date}


def collect(files: Iterable[Tuple[str, bytes]], reviewed: dict, reviewed_path: str = REVIEWED_NAME) -> List[dict]:
    """The selected records' entries among files (an iterable of (name, bytes)), by id, each with
    its class, class_reason and needs from reviewed (read_reviewed's result, read from reviewed_path)."""
    records = []
    for name, data in files:
        doc = _parse(data, name)
        if selected(doc, name):
            record = summarise(doc, name)
            review = reviewed.get(record["id"])
            if review is None:
                raise RecordError("%s: %s (%s) has no reviewed class: add it with class, reason and, if"
                                  " a feature gates it, needs" % (reviewed_path, record["id"], name))
            records.append(dict(list(record.items())[:2] + list(review.items()) + list(record.items())[2:]))
    unknown = sorted(set(reviewed) - set(record["id"] for record in records), key=_id_key)
    if unknown:
        raise RecordError("%s: %s: no such record among the source's selected ones"
                          % (reviewed_path, ", ".join(unknown)))
    return sorted(records, key=lambda record: _id_key(record["id"]))


def render(records, source):
    """The data file's text: a header, then one record per line (diffs show the records that changed)."""
    dump = lambda value: json.dumps(value, ensure_ascii=True)  # noqa: E731  (keys in the order built)
    head = [
        ("schema", SCHEMA), ("source", source), ("selection", SELECTION),
        ("classes", list(CLASSES)),
        ("fields", {
            "introduced": "mainline release that brought the bug; \"%s\"; null when no mainline"
                          " release carried it (only the branches in backported_into)" % SINCE_THE_START,
            "backported_into": "stable branch -> first release of that branch with the bug, for"
                               " branches older than the mainline introduction",
            "fixed": "stable branch -> first fixed release of that branch; a branch not listed has"
                     " no fix (a host on it is affected from the introduction on)",
            "fixed_mainline": "first mainline release with the fix (its rcs may or may not have it)",
            "class": "one of classes, reviewed by hand from the record's text (%s)" % REVIEWED_NAME,
            "class_reason": "the record's own words that give the class",
            "needs": "the feature without which the bug cannot be reached (ext4audit/rules/kernel_records.py"
                     " RELEVANCE), reviewed with the class; null: every ext4 filesystem",
        }),
    ]
    lines = ["{"] + ["%s: %s," % (dump(key), dump(value)) for key, value in head]
    lines.append('"records": [')
    lines.append(",\n".join(dump(record) for record in records))
    lines.append("]")
    lines.append("}")
    return "\n".join(lines) + "\n"


def write_atomically(path, text):
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".kernel_records.")
    try:
        with os.fdopen(fd, "w", encoding="ascii") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("source", help="work tree, bare git dir or folder of <year>/ folders")
    parser.add_argument("--rev", default="HEAD", help="commit to read from a bare git dir")
    parser.add_argument("--repository", default=DEFAULT_REPOSITORY, help="recorded as the source")
    parser.add_argument("--commit", help="recorded as the source's commit, for a folder copied from a checkout")
    parser.add_argument("--commit-date", help="recorded as that commit's date (ISO 8601)")
    parser.add_argument("--reviewed", default=DEFAULT_REVIEWED, help="the reviewed classes (%s)" % REVIEWED_NAME)
    parser.add_argument("-o", "--output", default=DEFAULT_OUTPUT)
    args = parser.parse_args(argv)
    src = args.source
    try:
        if os.path.isdir(os.path.join(src, PUBLISHED)):  # a work tree, perhaps a git checkout
            where = ("-C", src) if os.path.exists(os.path.join(src, ".git")) else None
            files, source = read_tree(os.path.join(src, PUBLISHED)), source_of(where, "HEAD", args.repository)
        elif os.path.isfile(os.path.join(src, "HEAD")) and os.path.isdir(os.path.join(src, "objects")):
            files, source = read_git(src, args.rev), source_of(src, args.rev, args.repository)
        elif os.path.isdir(src):
            files = read_tree(src)
            source = source_of(None, None, args.repository, args.commit, args.commit_date)
        else:
            parser.error("%s is not a folder" % src)
        records = collect(files, read_reviewed(args.reviewed), args.reviewed)
        text = render(records, source)
        contract.check(json.loads(text), contract.KernelRecords, args.output)  # what the reader will decode
        write_atomically(args.output, text)
    except (RecordError, contract.ContractError, OSError, subprocess.CalledProcessError) as exc:
        print("kernel_records: %s" % exc, file=sys.stderr)
        return 1
    print("%s: %d records from %s" % (args.output, len(records), source["commit"] or src))
    return 0


if __name__ == "__main__":
    sys.exit(main())
