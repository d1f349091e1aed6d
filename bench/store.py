#!/usr/bin/env python3
"""Benchmark: the results store (ext4audit/store) at fleet scale, in SQLite and PostgreSQL.

    .venv/bin/python bench/store.py [--hosts 100000] [--nights 30] [--workdir /var/tmp]
        [--postgresql postgresql://user@127.0.0.1:PORT/db]   # password: PGPASSWORD

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
import json
import os
import shutil
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


def timed(what, func, *args):
    start = time.perf_counter()
    result = func(*args)
    seconds = time.perf_counter() - start
    print("  %-34s %8.3f s" % (what, seconds), flush=True)
    return result, seconds


def measure(kind, location, folder, nights, hosts, size):
    print("%s (%s)" % (kind, location), flush=True)
    with schema.open_store(location) as store:
        _, ingest_s = timed("ingest of %d hosts" % hosts, ingest.ingest, store, folder)
        findings = store.one("SELECT COUNT(*) FROM findings")[0]
        print("  findings a night: %d" % findings)
        _, grow_s = timed("grown to %d nights (SQL copies)" % nights, grow, store, nights, hosts)
        _, trend_s = timed("fleet trend, %d nights" % nights, history.trend, store, None, nights)
        rule = store.one("SELECT rule FROM rule_counts ORDER BY findings DESC LIMIT 1")[0]
        _, rule_s = timed("trend of %s" % rule, history.trend, store, rule, nights)
        _, host_s = timed("timeline of host-054321", history.timeline, store, "host-%06d" % min(54321, hosts - 1), nights)
        # the report step's one query for summary.md's groups (open since, trend), and their rows from it
        data, groups_s = timed("summary.md's group history (query)", history.rule_nights, store, "")
        groups = finding_groups.FindingGroups(False)
        for name in os.listdir(os.path.join(folder, "hosts")):
            groups.add_host(reports.read_json(os.path.join(folder, "hosts", name), "host report"))
        _, rows_s = timed("  and its %d groups' rows" % len(groups.groups), history.group_history, data, groups)
        bytes_ = size(store)
        print("  size: %.1f MiB, %.0f bytes per host and night" % (bytes_ / 2 ** 20, bytes_ / hosts / nights))
    return {"ingest_s": ingest_s, "trend_s": trend_s, "rule_trend_s": rule_s, "timeline_s": host_s,
            "group_history_s": groups_s, "group_rows_s": rows_s,
            "bytes_per_host_night": bytes_ / hosts / nights, "findings_per_night": findings}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--hosts", type=int, default=100000)
    parser.add_argument("--base", type=int, default=1000)
    parser.add_argument("--nights", type=int, default=30)
    parser.add_argument("--workdir", default="/var/tmp")
    parser.add_argument("--postgresql", help="an empty PostgreSQL database's URL (password: PGPASSWORD)")
    args = parser.parse_args()
    work = tempfile.mkdtemp(prefix="ext4audit-store-bench-", dir=args.workdir)
    try:
        base = base_run(work, args.base)
        folder, _ = timed("run folder of %d hosts" % args.hosts, clone, base, os.path.join(work, "reports", "night-00"),
                          args.hosts)
        results = {"sqlite": measure("SQLite", os.path.join(work, "history.sqlite"), folder, args.nights, args.hosts,
                                     lambda store: sum(os.path.getsize(p) for p in (store.name, store.name + "-wal")
                                                       if os.path.exists(p)))}
        if args.postgresql:
            results["postgresql"] = measure("PostgreSQL", args.postgresql, folder, args.nights, args.hosts,
                                            lambda store: store.one("SELECT pg_database_size(current_database())")[0])
        print(json.dumps(results, indent=1))
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
