"""The two databases behind one interface: SQL is written once, with `?` parameters.

SQLite: one file, transactions taken with BEGIN IMMEDIATE (one writer at a time; others wait up to
BUSY_TIMEOUT), WAL so readers never wait. PostgreSQL: psycopg 3, one transaction per `with
store.transaction()`; rows of one night are serialised by locking its runs row (ingest.py).
"""

import contextlib
import os
import sqlite3
from typing import Any, Iterable, Iterator, List, Optional, Sequence

from ext4audit.store import StoreError, display, is_url

BUSY_TIMEOUT = 300  # seconds a writer waits for another (SQLite): four slices ingesting at once


class Store:
    """An open store: run SQL, in transactions."""

    dialect = ""

    def __init__(self, name: str, connection: Any) -> None:
        self.name, self.connection = name, connection

    def sql(self, text: str) -> str:
        return text

    def execute(self, text: str, params: Sequence = ()) -> Any:
        return self.connection.execute(self.sql(text), tuple(params))

    def executemany(self, text: str, rows: Iterable[Sequence]) -> None:
        self.connection.cursor().executemany(self.sql(text), rows)

    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
        """Many rows into a table (bulk: a night of a large fleet is millions of findings)."""
        self.executemany("INSERT INTO %s (%s) VALUES (%s)" % (table, ", ".join(columns), ", ".join("?" * len(columns))),
                         rows)

    def rows(self, text: str, params: Sequence = ()) -> List[tuple]:
        return list(self.execute(text, params).fetchall())

    def one(self, text: str, params: Sequence = ()) -> Optional[tuple]:
        return self.execute(text, params).fetchone()

    def lock_run(self, run_id: str) -> None:
        """Hold the night's runs row until the transaction ends (slices of one night, one at a time)."""

    def close(self) -> None:
        self.connection.close()

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class SQLiteStore(Store):
    dialect = "sqlite"

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Store"]:
        self.connection.execute("BEGIN IMMEDIATE")
        try:
            yield self
        except BaseException:
            self.connection.execute("ROLLBACK")
            raise
        self.connection.execute("COMMIT")

    def table_exists(self, table: str) -> bool:
        return self.one("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = ?", (table,)) is not None


class PostgresStore(Store):
    dialect = "postgresql"

    def sql(self, text: str) -> str:
        return text.replace("?", "%s")

    @contextlib.contextmanager
    def transaction(self) -> Iterator["Store"]:
        with self.connection.transaction():
            yield self

    def insert(self, table: str, columns: Sequence[str], rows: Iterable[Sequence]) -> None:
        """COPY: one stream instead of a statement a row (ten times faster for a large fleet)."""
        with self.connection.cursor().copy("COPY %s (%s) FROM STDIN" % (table, ", ".join(columns))) as copy:
            for row in rows:
                copy.write_row(row)

    def lock_run(self, run_id: str) -> None:
        self.execute("SELECT run_id FROM runs WHERE run_id = ? FOR UPDATE", (run_id,))

    def table_exists(self, table: str) -> bool:
        return self.one("SELECT to_regclass(?) IS NOT NULL", (table,))[0]


CONNECT_TIMEOUT = 30  # seconds to wait for an unreachable server, unless the URL or PGCONNECT_TIMEOUT says


def _timeout(url: str) -> dict:
    """psycopg.connect's connect_timeout: ours only where neither the URL nor libpq's variable sets one."""
    import psycopg.conninfo  # pylint: disable=import-outside-toplevel  # with psycopg, in connect
    try:
        given = "connect_timeout" in psycopg.conninfo.conninfo_to_dict(url)
    except psycopg.ProgrammingError:
        given = False  # a URL psycopg cannot parse: connect says why
    return {} if given or os.environ.get("PGCONNECT_TIMEOUT") else {"connect_timeout": CONNECT_TIMEOUT}


def connect(store: str) -> Store:
    """Open the store at `store` (a file path, or a postgresql:// URL), without touching its schema."""
    if is_url(store):
        try:
            import psycopg  # pylint: disable=import-outside-toplevel  # only a PostgreSQL store needs it
        except ImportError as exc:
            raise StoreError("store %s: PostgreSQL needs psycopg 3 (requirements-controller.txt): %s"
                             % (display(store), exc))
        try:
            # autocommit: each `transaction()` is one BEGIN..COMMIT; reads outside one see the latest
            return PostgresStore(display(store), psycopg.connect(store, autocommit=True, **_timeout(store)))
        except psycopg.Error as exc:
            raise StoreError("store %s: cannot connect: %s" % (display(store), str(exc).strip()))
    folder = os.path.dirname(os.path.abspath(store))
    if not os.path.isdir(folder):
        raise StoreError("store %s: its folder %s does not exist" % (store, folder))
    try:
        connection = sqlite3.connect(store, timeout=BUSY_TIMEOUT, isolation_level=None)
        connection.execute("PRAGMA journal_mode = WAL")
        connection.execute("PRAGMA synchronous = NORMAL")  # WAL: a commit survives a killed process
        connection.execute("PRAGMA foreign_keys = ON")
    except sqlite3.DatabaseError as exc:
        raise StoreError("store %s: not an SQLite database, or unreadable: %s" % (store, exc))
    return SQLiteStore(store, connection)
