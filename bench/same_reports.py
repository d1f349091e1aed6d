#!/usr/bin/env python3
"""Check that a change leaves the report step's files byte for byte as they were.

    .venv/bin/python bench/same_reports.py [--hosts 1000] [--before main] [--workdir /var/tmp]
    .venv/bin/python bench/same_reports.py --run reports/latest [--before main]

Makes one synthetic fleet (bench/aggregate.py's: its facts records, waivers, a baseline run),
then reports on it with the code of git revision --before (exported with `git archive`) and
with the code of this working tree, as the playbook's report step runs it (every format,
--baseline, --inventory). Both runs have the same run id and the same clock (times.utc_now is
fixed), so every file of the two run folders must be identical; the one thing that may differ
is the checkout's own path, which report.sarif names as %SRCROOT% and is replaced by a
placeholder. With --run, the facts and probe records of a real run folder (e.g. what `make
audit` collected) are reported instead, with inventories/local's waivers and no baseline, as
`make audit` reports them. Prints each differing file and its first differing line; exit 1 if any differ.
A file only the tree writes is a difference too, unless named with --new (a new format).
With --without-record-titles, the before side's kernel CNA record findings had each record's
title in their message (` "TITLE" (first fixed in ...)`, before 5112dba): the before side's files
lose those titles, as each format escapes them, before the comparison; the rest must be identical.
"""

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE]

import aggregate  # noqa: E402  (the benchmark's fleet)

# Runs `python -m ext4audit` with the clock fixed, in the checkout given as the current directory.
FIXED_CLOCK = ("import datetime, sys\n"
               "try:\n"  # the layered package (ext4audit/cli, ext4audit/model) or the flat one before it
               "    from ext4audit.cli import commands as cli\n"
               "    from ext4audit.model import times as clock\n"
               "except ImportError:\n"
               "    from ext4audit import cli, reports as clock\n"
               "clock.utc_now = lambda: datetime.datetime(2026, 11, 25, 1, 2, 3, tzinfo=datetime.timezone.utc)\n"
               "sys.exit(cli.main(sys.argv[1:]))")


def report(code, run, waivers, baseline, inventory):
    argv = aggregate.report_argv(run, waivers, baseline, inventory)[2:]  # without "-m ext4audit"
    done = subprocess.run([sys.executable, "-c", FIXED_CLOCK] + argv, cwd=code, stdout=subprocess.DEVNULL)
    if done.returncode not in (0, 1, 2):
        sys.exit("the report step of %s failed (exit %d)" % (code, done.returncode))


def side(base, name, code, template, waivers, inventory, real_run=None):
    """Report the baseline and the fleet with the code at `code` in base/side (summary.json names
    the baseline's path, the same for both sides), then move it to base/<name>; return its run
    folder. real_run: report that run folder's records instead, without a baseline."""
    folder = os.path.join(base, "side")
    run = os.path.join(folder, "run")
    if real_run:
        for sub in ("facts", "probe"):
            if os.path.isdir(os.path.join(real_run, sub)):
                shutil.copytree(os.path.join(real_run, sub), os.path.join(run, sub))
        report(code, run, waivers, None, inventory)
    else:
        aggregate.write_run(os.path.join(folder, "baseline"), template["baseline"])
        report(code, os.path.join(folder, "baseline"), waivers, None, inventory)
        aggregate.write_run(run, template["today"])
        report(code, run, waivers, os.path.join(folder, "baseline"), inventory)
    os.rename(folder, os.path.join(base, name))
    return os.path.join(base, name, "run")


def files(run):
    return sorted(os.path.relpath(os.path.join(d, f), run) for d, _, names in os.walk(run) for f in names)


def normalized(path, code, drop=()):
    """The file's bytes, the checkout's path replaced; drop: (text, replacement) pairs applied first."""
    with open(path, "rb") as handle:
        data = handle.read()
    for text, replacement in drop:
        data = data.replace(text, replacement)
    return data.replace(os.path.realpath(code).encode(), b"@CHECKOUT@") if path.endswith(".sarif") else data


def record_titles():
    """(` "TITLE" (`, ` (`) in every escaping a format gives a finding's message (JSON and TAP's
    YAML, HTML, XML attribute and text, Markdown), for every record: a record's title as the
    message carried it, followed by where its fix is (so the evidence's "title" is never matched)."""
    sys.path[:0] = [ROOT]
    from xml.sax.saxutils import escape as xml_escape
    from ext4audit.formats import html, markdown
    from ext4audit.rules import kernel_records

    escapes = (lambda t: json.dumps(t)[1:-1], html.escape, markdown.md, xml_escape,
               lambda t: xml_escape(t, {'"': "&quot;", "\n": "&#10;", "\r": "&#13;", "\t": "&#09;"}))
    pairs = set()
    for record in kernel_records.load()["records"]:
        title = ' "%s" (' % " ".join(record["title"].split())
        pairs.update((escape(title).encode(), escape(" (").encode()) for escape in escapes)
    return sorted(pairs, key=lambda pair: -len(pair[0]))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--before", default="main", help="git revision of the code to compare with (default: main)")
    parser.add_argument("--workdir", default="/var/tmp")
    parser.add_argument("--run", metavar="DIR", help="a real run folder whose facts/ and probe/ are reported instead")
    parser.add_argument("--new", action="append", default=[], metavar="FILE",
                        help="a file of the run folder that only this tree writes (a new format), not a difference")
    parser.add_argument("--without-record-titles", action="store_true",
                        help="the before side's kernel record messages lose their records' titles (see above)")
    args = parser.parse_args()
    base = tempfile.mkdtemp(prefix="same-reports-", dir=args.workdir)
    try:
        old = os.path.join(base, "code-before")
        os.mkdir(old)
        archive = subprocess.run(["git", "-C", ROOT, "archive", args.before], stdout=subprocess.PIPE, check=True).stdout
        subprocess.run(["tar", "-x", "-C", old], input=archive, check=True)
        if args.run:
            inventory, template = os.path.join(ROOT, "inventories", "local"), None
            waivers = os.path.join(inventory, "waivers.yml")
        else:
            inventory = os.path.join(base, "inventory")
            os.mkdir(inventory)
            waivers = os.path.join(inventory, "waivers.yml")
            template = {"today": aggregate.fleet(args.hosts, 20261122, baseline=False),
                        "baseline": aggregate.fleet(args.hosts, 20261122, baseline=True)}
            aggregate.write_waivers(waivers, template["today"])
        real_run = os.path.realpath(args.run) if args.run else None
        runs = {"before": (side(base, "before", old, template, waivers, inventory, real_run), old),
                "after": (side(base, "after", ROOT, template, waivers, inventory, real_run), ROOT)}
        names = {key: files(run) for key, (run, _) in runs.items()}
        differ = sorted(set(names["before"]) ^ set(names["after"]) - set(args.new))
        for name in differ:
            print("only %s: %s" % ("before" if name in names["before"] else "after", name))
        same, drop = 0, record_titles() if args.without_record_titles else ()
        for name in sorted(set(names["before"]) & set(names["after"])):
            (run_a, code_a), (run_b, code_b) = runs["before"], runs["after"]
            a, b = normalized(os.path.join(run_a, name), code_a, drop), normalized(os.path.join(run_b, name), code_b)
            if a == b:
                same += 1
                continue
            differ.append(name)
            line = next(i for i, (x, y) in enumerate(zip(a.split(b"\n") + [None], b.split(b"\n") + [None]), 1) if x != y)
            print("differs: %s (line %d)" % (name, line))
        print("%s: %d files identical, %d differ (before: %s, after: this tree)" % (
            real_run or "%d hosts" % args.hosts, same, len(differ), args.before))
        return 1 if differ else 0
    finally:
        shutil.rmtree(base)


if __name__ == "__main__":
    sys.exit(main())
