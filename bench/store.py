#!/usr/bin/env python3
"""Benchmark: the results store (ext4audit/store) at fleet scale, in SQLite and PostgreSQL.

    .venv/bin/python bench/store.py [--hosts 100000] [--nights 30] [--workdir /var/tmp]
        [--postgresql postgresql://user@127.0.0.1:PORT/db | --postgresql cluster]   # password: PGPASSWORD
        [--folder RUN_DIR] [--code CHECKOUT ...] [--repeat N] [--no-sqlite] [--bulk-nights]

--postgresql cluster: a throw-away cluster of Debian's postgresql package (initdb, pg_ctl; default
settings, fsync on) on a loopback port, run as nobody, removed afterwards. --folder: a run folder
made by an earlier run of this script (kept with --keep), instead of cloning one. --code: time only
the ingest of the folder by each checkout's ext4audit in turn (a child process each, a new
database each), --repeat times: before and after. --bulk-nights (PostgreSQL): grow the store to
--nights nights one statement a table and night, indexes built once after (bulk_nights).

1. A real run folder of --base hosts (bench/aggregate.py's synthetic fleet, reported by the real
   `ext4audit report`), cloned to --hosts host reports (host i is base host i mod --base, renamed)
   with a summary.json that lists them: the run folder a fleet of that size leaves.
2. Its ingest (ext4audit.store.ingest: reading and checking every host report, one transaction),
   timed into a new SQLite file and, with --postgresql, a new PostgreSQL database.
3. The store is grown to --nights nights by copying that night in SQL (each copy with its own run
   id and date, and the 1% of the hosts whose number ends in the night's without their findings), then the history's questions are
   timed: the fleet trend, a rule's trend, a host's timeline, the report step's query for
   summary.md's finding groups (history.rule_nights) and their rows. Size on disk per host and night.
"""

import argparse
import contextlib
import glob
import json
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path[:0] = [ROOT, os.path.join(ROOT, "bench")]

import aggregate  # noqa: E402  (bench/aggregate.py: the synthetic fleet)
from ext4audit.report import finding_groups  # noqa: E402
from ext4audit.report import reports
from ext4audit.store import history, ingest, schema  # noqa: E402


def base_run(workdir, count):
    run = os.path.join(workdir, "reports", "base")
    aggregate.write_run(run, aggregate.fleet(count, 20261129, False))
    subprocess.run([sys.executable, "-m", "ext4audit", "report", run, "--store", "off", "--formats", "markdown",
                    "--print", "json"], check=False, stdout=subprocess.DEVNULL, cwd=ROOT)
    return run


def clone(base, folder, count):
    """A run folder of `count` hosts made of the base run's host reports."""
    summary = reports.read_json(os.path.join(base, "summary.json"), "summary")
    sources = sorted(os.listdir(os.path.join(base, "hosts")))
    os.makedirs(os.path.join(folder, "hosts"))
    rows = dict((r["host"], r) for r in summary["hosts"])
    out_rows = []
    for index in range(count):
        with open(os.path.join(base, "hosts", sources[index % len(sources)])) as handle:
            report = json.load(handle)
        row = dict(rows[report["host"]], host="host-%06d" % index)
        report["host"] = row["host"]
        with open(os.path.join(folder, "hosts", row["host"] + ".json"), "w") as handle:
            handle.write(reports.dump_compact(report).decode("utf-8"))
        out_rows.append(row)
    scale = count / len(sources)
    counts = summary["counts"]
    counts["by_severity"] = dict((k, int(v * scale)) for k, v in counts["by_severity"].items())
    counts["by_rule"] = dict((k, int(v * scale)) for k, v in counts["by_rule"].items())
    counts.update(hosts=count, hosts_audited=sum(r["status"] == "audited" for r in out_rows),
                  waived=int(counts["waived"] * scale), undetermined=int(counts["undetermined"] * scale))
    summary.update(hosts=out_rows, run_id="night-00", hosts_not_audited=[], generated_at="2026-10-01T03:00:00Z")
    reports.write_json(os.path.join(folder, "summary.json"), summary)
    return folder


def grow(store, nights, hosts):
    """Copies of night-00 as nights 01.. (1% of the hosts without findings each night)."""
    for night in range(1, nights):
        run_id, at = "night-%02d" % night, "2026-10-%02dT03:00:00Z" % (night + 1)
        with store.transaction():
            store.execute("INSERT INTO runs (run_id, generated_at, ingested_at, fail_on, fail_on_new, "
                          "unreachable_is_incomplete, verdict, reason, complete, hosts, hosts_audited, findings, waived, "
                          "content_hash, scope, hosts_with_findings) SELECT ?, ?, ingested_at, fail_on, fail_on_new, "
                          "unreachable_is_incomplete, verdict, reason, complete, hosts, hosts_audited, findings, waived, "
                          "content_hash, scope, hosts_with_findings FROM runs "
                          "WHERE run_id = 'night-00'", (run_id, at))
            store.execute("INSERT INTO slices SELECT ?, slice, ?, ingested_at, verdict, reason, complete, hosts, "
                          "hosts_audited, findings, waived, content_hash, hosts_with_findings FROM slices WHERE run_id = 'night-00'",
                          (run_id, at))
            store.execute("INSERT INTO hosts SELECT ?, host, status, reason, kernel, kernel_upstream, kernel_vendor, "
                          "groups_json, fail_on, findings, failing, waived, slice, image FROM hosts WHERE run_id = 'night-00'",
                          (run_id,))
            store.execute("INSERT INTO image_counts SELECT ?, slice, image, hosts FROM image_counts "
                          "WHERE run_id = 'night-00'", (run_id,))
            store.execute("INSERT INTO findings SELECT ?, host, rule, severity, device, mountpoint, waived, waiver, "
                          "evidence_key, slice FROM findings WHERE run_id = 'night-00' AND host NOT LIKE ?",
                          (run_id, "host-%%%02d" % night))
            store.execute("INSERT INTO rule_counts SELECT ?, slice, rule, findings, hosts, waived FROM rule_counts "
                          "WHERE run_id = 'night-00'", (run_id,))
    store.execute("ANALYZE")  # the planners' statistics, as autovacuum (PostgreSQL) would gather them


# Night k (1..N-1) as the ingest of night-00's folder with the findings of the hosts whose number
# ends in k's two digits taken out would record it (1% of the hosts each night; compare grow()):
# their hosts rows count no finding, their filesystems rows go (a row is kept for a filesystem
# with a finding), and the counts ingest makes (rule_counts, the runs' and slices' sums) are
# counted again from those rows. kernel_groups and image_counts are night-00's (the summary's
# kernel groups are not recomputed). filesystems (the superblocks remediation reads; no history
# question does) stays night-00's alone: 29 more nights of it are ~5 GB this machine's disk has
# not to spare; measure() adds 29 nights' worth of its size to the size per host and night.
# One INSERT ... SELECT a table and night (all nights at once interleave the nights' rows on disk),
# in one transaction a table, with the
# big tables' indexes dropped first and built once after: a night at a time, as grow(), the
# indexes are maintained row by row (minutes a night on this machine).
BULK_INDEXES = ["findings_run ON findings (run_id, host)", "findings_rule ON findings (rule, run_id)",
                "findings_host ON findings (host, run_id)", "hosts_host ON hosts (host, run_id)",
                "filesystems_run ON filesystems (run_id, host)"]


RULE_COUNTS = ("INSERT INTO rule_counts SELECT run_id, slice, rule, SUM(1 - waived), COUNT(DISTINCT CASE WHEN "
               "waived = 0 THEN host END), SUM(waived) FROM findings WHERE run_id %s GROUP BY run_id, slice, rule")
RUN_COUNTS = ("SELECT run_id, SUM(findings) AS findings, SUM(waived) AS waived, SUM(CASE WHEN findings > 0 THEN 1 "
              "ELSE 0 END) AS with_findings FROM hosts WHERE run_id %s GROUP BY run_id")


def bulk_nights(store, nights):
    """PostgreSQL: nights 01..nights-1 made from night-00 a statement a table and night (see above);
    first, the counting statements are checked against what ingest counted for night-00."""
    counted = store.rows("SELECT " + RULE_COUNTS.split(" SELECT ", 1)[1] % "= 'night-00'" + " ORDER BY rule")
    assert counted == store.rows("SELECT run_id, slice, rule, findings, hosts, waived FROM rule_counts ORDER BY rule")
    assert store.rows(RUN_COUNTS % "= 'night-00'") == store.rows(
        "SELECT run_id, findings, waived, hosts_with_findings FROM runs")
    night = ("SELECT g, 'night-' || lpad(g::text, 2, '0') AS run_id, "
             "'2026-10-' || lpad((g + 1)::text, 2, '0') || 'T03:00:00Z' AS at, "
             "'host-%%' || lpad(g::text, 2, '0') AS dropped FROM generate_series(?::int, ?::int) AS g")  # %%: psycopg's %
    steps = [
        ["DROP INDEX %s" % index.split()[0] for index in BULK_INDEXES] + ["ALTER TABLE hosts DROP CONSTRAINT hosts_pkey"],
        "INSERT INTO runs (run_id, generated_at, ingested_at, fail_on, fail_on_new, unreachable_is_incomplete, verdict, "
        "reason, complete, hosts, hosts_audited, findings, waived, content_hash, scope, hosts_with_findings) "
        "SELECT n.run_id, n.at, r.ingested_at, fail_on, fail_on_new, unreachable_is_incomplete, verdict, reason, "
        "complete, hosts, hosts_audited, findings, waived, content_hash, scope, hosts_with_findings "
        "FROM runs r, (%s) n WHERE r.run_id = 'night-00'" % night,
        "INSERT INTO slices SELECT n.run_id, slice, n.at, ingested_at, verdict, reason, complete, hosts, hosts_audited, "
        "findings, waived, content_hash, hosts_with_findings FROM slices s, (%s) n WHERE s.run_id = 'night-00'" % night,
        "INSERT INTO hosts SELECT n.run_id, host, status, reason, kernel, kernel_upstream, kernel_vendor, groups_json, "
        "fail_on, CASE WHEN host LIKE n.dropped THEN 0 ELSE findings END, CASE WHEN host LIKE n.dropped THEN 0 "
        "ELSE failing END, CASE WHEN host LIKE n.dropped THEN 0 ELSE waived END, slice, image "
        "FROM hosts h, (%s) n WHERE h.run_id = 'night-00'" % night,
        "INSERT INTO findings SELECT n.run_id, host, rule, severity, device, mountpoint, waived, waiver, evidence_key, "
        "slice FROM findings f, (%s) n WHERE f.run_id = 'night-00' AND f.host NOT LIKE n.dropped" % night,
        "INSERT INTO image_counts SELECT n.run_id, slice, image, hosts FROM image_counts c, (%s) n "
        "WHERE c.run_id = 'night-00'" % night,
        "INSERT INTO kernel_groups SELECT n.run_id, slice, kernel, upstream, rule, severity, action, hosts "
        "FROM kernel_groups k, (%s) n WHERE k.run_id = 'night-00'" % night,
        # ingest's counts (ingest._insert_slice), from the rows
        RULE_COUNTS % "<> 'night-00'",
        ["UPDATE %s t SET findings = c.findings, waived = c.waived, hosts_with_findings = c.with_findings FROM (%s) c "
         "WHERE t.run_id = c.run_id" % (table, RUN_COUNTS % "<> 'night-00'") for table in ("runs", "slices")],
        ["CREATE INDEX %s" % index for index in BULK_INDEXES] + ["ALTER TABLE hosts ADD PRIMARY KEY (run_id, host)"],
    ]
    for step in steps:
        start = time.perf_counter()
        with store.transaction():
            for statement in step if isinstance(step, list) else [step]:
                # a night at a time, so that a night's rows lie together on disk as ingest's COPY puts them
                for number in range(1, nights) if "?" in statement else [None]:
                    store.execute(statement, (number, number) if number else ())
        print("    %6.1f s  %s" % (time.perf_counter() - start, (step if isinstance(step, str) else step[0])[:70]),
              flush=True)
    store.execute("ANALYZE")


@contextlib.contextmanager
def cluster(workdir):
    """A throw-away PostgreSQL cluster (Debian's package: its programs are off PATH) on a loopback
    port, default settings (fsync on), run as nobody (initdb refuses root); yields its URL, with
    PGPASSWORD set, and removes it afterwards."""
    def program(name):
        return sorted(glob.glob("/usr/lib/postgresql/*/bin/" + name), key=lambda p: int(p.split("/")[4]))[-1]
    home = tempfile.mkdtemp(prefix="ext4audit-store-bench-pg-", dir=workdir)
    nobody = pwd.getpwnam("nobody")
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=%d" % nobody.pw_gid, "--clear-groups", "--"]
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    password = secrets.token_hex(16)
    with open(os.path.join(home, "pwfile"), "w") as handle:
        handle.write(password + "\n")
    os.chown(os.path.join(home, "pwfile"), nobody.pw_uid, nobody.pw_gid)
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    data, env = os.path.join(home, "data"), dict(os.environ, LC_ALL="C.UTF-8")
    subprocess.run(as_nobody + [program("initdb"), "-D", data, "-U", "bench", "--auth=scram-sha-256", "--pwfile",
                                os.path.join(home, "pwfile"), "-E", "UTF8"], check=True, stdout=subprocess.DEVNULL,
                   env=env, cwd=home)
    subprocess.run(as_nobody + [program("pg_ctl"), "-D", data, "-l", os.path.join(home, "log"), "-w", "-o",
                                "-k %s -p %d -h 127.0.0.1" % (home, port), "start"], check=True,
                   stdout=subprocess.DEVNULL, env=env, cwd=home)
    os.environ["PGPASSWORD"] = password
    try:
        yield "postgresql://bench@127.0.0.1:%d/postgres" % port
    finally:
        subprocess.run(as_nobody + [program("pg_ctl"), "-D", data, "-m", "fast", "-w", "stop"],
                       stdout=subprocess.DEVNULL, env=env, cwd=home)
        shutil.rmtree(home, ignore_errors=True)


def new_database(url):
    """A new, empty database on the server of url; its URL."""
    import psycopg  # pylint: disable=import-outside-toplevel
    name = "bench_%d" % time.monotonic_ns()
    with psycopg.connect(url, autocommit=True) as admin:
        admin.execute("CREATE DATABASE %s" % name)
    return url.rsplit("/", 1)[0] + "/" + name


# The ingest in a child process with a checkout's ext4audit first on sys.path: its time, and the
# share of it that reading the run folder took (ingest.read_run).
INGEST = """
import sys, time
sys.path.insert(0, sys.argv[1])
from ext4audit.store import ingest, schema
read = ingest.read_run
spent = []
def timed_read(folder):
    start = time.perf_counter()
    run = read(folder)
    spent.append(time.perf_counter() - start)
    return run
ingest.read_run = timed_read
with schema.open_store(sys.argv[2]) as store:
    start = time.perf_counter()
    ingest.ingest(store, sys.argv[3])
    print("%.2f %.2f" % (time.perf_counter() - start, spent[0]))
"""


def compare_codes(codes, repeat, folder, postgresql, workdir):
    """--code: each checkout's ingest of folder in turn, --repeat times, into a new database each."""
    for number in range(repeat):
        for code in codes:
            for kind in (["postgresql"] if postgresql else []) + ["sqlite"]:
                if kind == "sqlite":
                    where = os.path.join(workdir, "compare-%d.sqlite" % time.monotonic_ns())
                else:
                    where = new_database(postgresql)
                load = os.getloadavg()[0]
                out = subprocess.run([sys.executable, "-c", INGEST, os.path.abspath(code), where, folder], check=True,
                                     stdout=subprocess.PIPE, universal_newlines=True).stdout.split()
                print("  round %d  %-10s %-40s ingest %7.2f s (reading the run %6.2f s)  load %.1f" % (
                    number + 1, kind, code, float(out[0]), float(out[1]), load), flush=True)
                if kind == "sqlite":
                    for path in glob.glob(where + "*"):
                        os.unlink(path)


def timed(what, func, *args):
    start = time.perf_counter()
    result = func(*args)
    seconds = time.perf_counter() - start
    print("  %-34s %8.3f s" % (what, seconds), flush=True)
    return result, seconds


def measure(kind, location, folder, nights, hosts, size, bulk=False, slow=False):
    print("%s (%s)" % (kind, location), flush=True)
    with schema.open_store(location) as store:
        _, ingest_s = timed("ingest of %d hosts" % hosts, ingest.ingest, store, folder)
        findings = store.one("SELECT COUNT(*) FROM findings")[0]
        print("  findings a night: %d" % findings)
        _, grow_s = timed("grown to %d nights (%s)" % (nights, "bulk" if bulk else "SQL copies"),
                          bulk_nights if bulk else grow, store, nights, *(() if bulk else (hosts,)))
        print("  findings rows: %d" % store.one("SELECT COUNT(*) FROM findings")[0], flush=True)
        _, trend_s = timed("fleet trend, %d nights" % nights, history.trend, store, None, nights)
        rule = store.one("SELECT rule FROM rule_counts ORDER BY findings DESC LIMIT 1")[0]
        _, rule_s = timed("trend of %s" % rule, history.trend, store, rule, nights)
        _, host_s = timed("timeline of host-054321", history.timeline, store, "host-%06d" % min(54321, hosts - 1), nights)
        regressed, regressed_s = timed("regressed since night 28", history.regressed, store,
                                       "2026-10-%02d" % (nights - 1))
        print("  hosts regressed: %d" % len(regressed))
        _, episodes_s = timed("findings of host-054321 (episodes)", history.episodes, store,
                              "host-%06d" % min(54321, hosts - 1))
        _, rule_fix_s = timed("episodes of a rare rule", history.episodes, store, None,
                              store.one("SELECT rule FROM rule_counts ORDER BY findings LIMIT 1")[0])
        fix_s = None
        if slow:  # every finding's episodes in memory: minutes and gigabytes at 100,000 hosts
            _, fix_s = timed("time to fix (every finding's episodes)", history.time_to_fix, store)
        # the report step's one query for summary.md's groups (open since, trend), and their rows from it
        data, groups_s = timed("summary.md's group history (query)", history.rule_nights, store, "")
        groups = finding_groups.FindingGroups(False)
        for name in os.listdir(os.path.join(folder, "hosts")):
            groups.add_host(reports.read_json(os.path.join(folder, "hosts", name), "host report"))
        _, rows_s = timed("  and its %d groups' rows" % len(groups.groups), history.group_history, data, groups)
        bytes_ = size(store)
        if bulk:  # filesystems: one night of it in the store, every night's in the size (bulk_nights)
            bytes_ += (nights - 1) * store.one("SELECT pg_total_relation_size('filesystems')")[0]
        print("  size: %.1f MiB, %.0f bytes per host and night" % (bytes_ / 2 ** 20, bytes_ / hosts / nights))
    return {"ingest_s": ingest_s, "grow_s": grow_s, "trend_s": trend_s, "rule_trend_s": rule_s, "timeline_s": host_s,
            "regressed_s": regressed_s, "host_episodes_s": episodes_s, "rule_episodes_s": rule_fix_s,
            "time_to_fix_s": fix_s, "group_history_s": groups_s, "group_rows_s": rows_s,
            "bytes_per_host_night": bytes_ / hosts / nights, "findings_per_night": findings}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=100000)
    parser.add_argument("--base", type=int, default=1000)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--workdir", default="/var/tmp")
    parser.add_argument("--postgresql", help="an empty PostgreSQL database's URL (password: PGPASSWORD), or "
                        "`cluster`: a throw-away one")
    parser.add_argument("--folder", help="a run folder of --hosts hosts made before (the clone's night-00)")
    parser.add_argument("--keep", action="store_true", help="keep the work folder (its run folder: --folder)")
    parser.add_argument("--code", nargs="+", help="checkouts whose ingest to time in turn (only that)")
    parser.add_argument("--repeat", type=int, default=1)
    parser.add_argument("--no-sqlite", action="store_true")
    parser.add_argument("--bulk-nights", action="store_true", help="PostgreSQL: grow the nights by bulk_nights")
    parser.add_argument("--time-to-fix", action="store_true", help="also time history.time_to_fix (slow)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="ext4audit-store-bench-", dir=args.workdir)
    try:
        with contextlib.ExitStack() as stack:
            postgresql = stack.enter_context(cluster(args.workdir)) if args.postgresql == "cluster" else args.postgresql
            if args.folder:
                folder = args.folder
            else:
                folder, _ = timed("run folder of %d hosts" % args.hosts, clone, base_run(work, args.base),
                                  os.path.join(work, "reports", "night-00"), args.hosts)
            if args.code:
                compare_codes(args.code, args.repeat, folder, postgresql, work)
                return
            results = {}
            if not args.no_sqlite:
                results["sqlite"] = measure(
                    "SQLite", os.path.join(work, "history.sqlite"), folder, args.nights, args.hosts,
                    lambda store: sum(os.path.getsize(p) for p in (store.name, store.name + "-wal")
                                      if os.path.exists(p)), slow=args.time_to_fix)
            if postgresql:
                results["postgresql"] = measure(
                    "PostgreSQL", new_database(postgresql) if args.postgresql == "cluster" else postgresql, folder,
                    args.nights, args.hosts, lambda store: store.one("SELECT pg_database_size(current_database())")[0],
                    args.bulk_nights, args.time_to_fix)
            print(json.dumps(results, indent=1))
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
        else:
            print("kept", work)


if __name__ == "__main__":
    main()
