"""The store's schema, as numbered migrations the tool applies in order (the same SQL for SQLite
and PostgreSQL). store_meta's schema_version says how far a store is: an older store is upgraded
when it is opened; a newer one (written by a later ext4audit) is refused, never half understood.
A migration is never edited once released: a change is a new one.
"""

from typing import List, Tuple, Union

from ext4audit.store import StoreError, backends

# a statement is SQL for both databases, or (dialect, SQL) for that one only
MIGRATIONS: List[List[Union[str, Tuple[str, str]]]] = [
    # 1: runs, their hosts and findings
    [
        "CREATE TABLE store_meta (key TEXT PRIMARY KEY, value TEXT NOT NULL)",
        """CREATE TABLE runs (
            run_id TEXT PRIMARY KEY,
            generated_at TEXT,            -- summary.json's, UTC stamp
            ingested_at TEXT NOT NULL,
            fail_on TEXT,
            fail_on_new INTEGER,
            unreachable_is_incomplete INTEGER,
            verdict TEXT NOT NULL,        -- pass, fail, incomplete
            reason TEXT,
            complete INTEGER NOT NULL,    -- 0: the report step did not finish; never a pass
            hosts INTEGER NOT NULL,
            hosts_audited INTEGER NOT NULL,
            findings INTEGER NOT NULL,    -- unwaived
            waived INTEGER NOT NULL,
            content_hash TEXT NOT NULL)""",
        """CREATE TABLE hosts (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            host TEXT NOT NULL,
            status TEXT NOT NULL,
            reason TEXT,
            kernel TEXT,
            kernel_upstream TEXT,
            kernel_vendor TEXT,
            groups_json TEXT,
            fail_on TEXT,
            findings INTEGER NOT NULL,
            failing INTEGER NOT NULL,
            waived INTEGER NOT NULL,
            PRIMARY KEY (run_id, host))""",
        """CREATE TABLE findings (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            host TEXT NOT NULL,
            rule TEXT NOT NULL,
            severity TEXT NOT NULL,
            device TEXT,
            mountpoint TEXT,
            waived INTEGER NOT NULL,
            waiver TEXT,                  -- its justification
            evidence_key TEXT)""",
        "CREATE INDEX findings_run ON findings (run_id, host)",
    ],
    # 2: slices of a night (AWX job slices, several controllers), kernel record groups, scope, and
    # the indexes of the history's questions (bench/README.md)
    [
        "ALTER TABLE runs ADD COLUMN scope TEXT NOT NULL DEFAULT ''",
        """CREATE TABLE slices (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            slice TEXT NOT NULL,
            generated_at TEXT,
            ingested_at TEXT NOT NULL,
            verdict TEXT NOT NULL,
            reason TEXT,
            complete INTEGER NOT NULL,
            hosts INTEGER NOT NULL,
            hosts_audited INTEGER NOT NULL,
            findings INTEGER NOT NULL,
            waived INTEGER NOT NULL,
            content_hash TEXT NOT NULL,
            hosts_with_findings INTEGER NOT NULL,  -- unwaived ones: the fleet's trend reads runs alone
            PRIMARY KEY (run_id, slice))""",
        "ALTER TABLE runs ADD COLUMN hosts_with_findings INTEGER NOT NULL DEFAULT 0",
        """UPDATE runs SET hosts_with_findings = (SELECT COUNT(*) FROM hosts h WHERE h.run_id = runs.run_id
            AND h.findings > 0)""",
        # a version-1 run was one whole slice
        """INSERT INTO slices SELECT run_id, '', generated_at, ingested_at, verdict, reason, complete, hosts,
            hosts_audited, findings, waived, content_hash, hosts_with_findings FROM runs""",
        "ALTER TABLE hosts ADD COLUMN slice TEXT NOT NULL DEFAULT ''",
        "ALTER TABLE findings ADD COLUMN slice TEXT NOT NULL DEFAULT ''",
        """CREATE TABLE kernel_groups (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            slice TEXT NOT NULL,
            kernel TEXT,
            upstream TEXT,
            rule TEXT NOT NULL,
            severity TEXT NOT NULL,
            action TEXT,
            hosts INTEGER NOT NULL)""",
        "CREATE INDEX kernel_groups_run ON kernel_groups (run_id, slice)",
        # a night's findings by rule, counted at ingest: a fleet's trend reads 30 rows a rule, not
        # 30 nights of findings (bench/README.md)
        """CREATE TABLE rule_counts (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            slice TEXT NOT NULL,
            rule TEXT NOT NULL,
            findings INTEGER NOT NULL,    -- unwaived
            hosts INTEGER NOT NULL,       -- with an unwaived one
            waived INTEGER NOT NULL,
            PRIMARY KEY (run_id, slice, rule))""",
        """INSERT INTO rule_counts SELECT run_id, slice, rule, SUM(1 - waived),
            COUNT(DISTINCT CASE WHEN waived = 0 THEN host END), SUM(waived) FROM findings GROUP BY run_id, slice, rule""",
        "CREATE INDEX runs_time ON runs (generated_at)",
        "CREATE INDEX findings_rule ON findings (rule, run_id)",
        "CREATE INDEX findings_host ON findings (host, run_id)",
        "CREATE INDEX hosts_host ON hosts (host, run_id)",
    ],
    # 3: the superblock of each filesystem with a finding, so that a night's remediation plan
    # (ext4audit/steps/remediation.py) can be made from the store as from its run folder (journal size,
    # features); only those filesystems: rows stay fewer than findings
    [
        """CREATE TABLE filesystems (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            slice TEXT NOT NULL,
            host TEXT NOT NULL,
            mountpoint TEXT NOT NULL,
            device TEXT,
            superblock TEXT)              -- JSON of contract.Superblock's fields; NULL: not read""",
        "CREATE INDEX filesystems_run ON filesystems (run_id, host)",
    ],
    # 4: each host's image (ingest.image_of: the system its facts say it runs), and a night's hosts
    # by image counted at ingest, so that "how many hosts still run X" reads a row a night and image
    [
        "ALTER TABLE hosts ADD COLUMN image TEXT",
        """CREATE TABLE image_counts (
            run_id TEXT NOT NULL REFERENCES runs (run_id) ON DELETE CASCADE,
            slice TEXT NOT NULL,
            image TEXT NOT NULL,          -- '': not known (a host not audited, a run recorded before)
            hosts INTEGER NOT NULL,
            PRIMARY KEY (run_id, slice, image))""",
        "INSERT INTO image_counts SELECT run_id, slice, '', COUNT(*) FROM hosts GROUP BY run_id, slice",
    ],
    # 5: PostgreSQL checked each hosts, findings and filesystems row's run against runs, a trigger
    # a row: a third of a 100,000-host night's COPY (bench/README.md). Ingest writes a night's runs
    # row first and its rows in the same transaction; prune and ingest delete a night's rows table
    # by table (ingest.SLICE_TABLES): the check guarded nothing they do not. SQLite's checks stay
    # (ALTER TABLE cannot drop them there; they cost it little).
    [
        ("postgresql", "ALTER TABLE hosts DROP CONSTRAINT IF EXISTS hosts_run_id_fkey"),
        ("postgresql", "ALTER TABLE findings DROP CONSTRAINT IF EXISTS findings_run_id_fkey"),
        ("postgresql", "ALTER TABLE filesystems DROP CONSTRAINT IF EXISTS filesystems_run_id_fkey"),
    ],
]
VERSION = len(MIGRATIONS)
LOCK_KEY = 0x65787434  # PostgreSQL advisory lock: one migrating controller at a time ("ext4")


def version_of(store: backends.Store) -> int:
    """The store's schema version; 0 for an empty database."""
    if not store.table_exists("store_meta"):
        return 0
    row = store.one("SELECT value FROM store_meta WHERE key = 'schema_version'")
    try:
        return int(row[0])
    except (TypeError, ValueError):
        raise StoreError("store %s: store_meta has no schema_version number (%r): not an ext4audit store, or damaged"
                         % (store.name, row and row[0]))


def migrate(store: backends.Store, target: int = VERSION) -> int:
    """Bring the store to `target` (default: this version's), each migration in its own
    transaction; return the version it had. A store newer than this ext4audit is a StoreError."""
    with store.transaction():
        if store.dialect == "postgresql":  # two controllers opening a new store at once
            store.execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
        before = current = version_of(store)
    if current > VERSION:
        raise StoreError("store %s has schema version %d; this ext4audit knows versions up to %d: use a newer "
                         "ext4audit to read or write it (a store is never downgraded)" % (store.name, current, VERSION))
    while current < target:
        with store.transaction():
            if store.dialect == "postgresql":
                store.execute("SELECT pg_advisory_xact_lock(?)", (LOCK_KEY,))
            if version_of(store) != current:  # another controller migrated meanwhile
                current = version_of(store)
                continue
            for statement in MIGRATIONS[current]:
                if isinstance(statement, tuple):
                    if statement[0] != store.dialect:
                        continue
                    statement = statement[1]
                store.execute(statement)
            current += 1
            store.execute("INSERT INTO store_meta (key, value) VALUES ('schema_version', ?) ON CONFLICT (key) "
                          "DO UPDATE SET value = excluded.value", (str(current),))
    return before


def open_store(location: str) -> backends.Store:
    """Connect to the store and bring its schema to this version."""
    store = backends.connect(location)
    try:
        migrate(store)
    except BaseException:
        store.close()
        raise
    return store
