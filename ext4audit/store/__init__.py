"""The results store: every reported run in a database, for history, trends and the night's gate.

SQLite by default (reports/history.sqlite, beside the run folders: nothing to install or start),
PostgreSQL when the store is a postgresql:// URL (psycopg 3; the password from PGPASSWORD or
PGPASSFILE, libpq's own variables, never from the URL given on a command line). One schema for
both (schema.py), created and upgraded by the tool; ingest.py records a run folder, history.py
answers questions about the nights recorded.
"""

import os
from typing import Optional

DEFAULT_NAME = "history.sqlite"  # beside the run folders
OFF = "off"  # ext4_audit_store / --store: record nothing


class StoreError(ValueError):
    """A store that cannot be opened, read or written; the message names it and says why."""


def default_location(reports_dir: str) -> str:
    """The embedded store of a reports folder."""
    return os.path.join(reports_dir, DEFAULT_NAME)


def location(store: Optional[str], reports_dir: str) -> Optional[str]:
    """The store to use: `store` as given, the embedded one of reports_dir when it is empty, None when off."""
    if store == OFF:
        return None
    return store or default_location(reports_dir)


def is_url(store: str) -> bool:
    return store.startswith(("postgresql://", "postgres://"))


def display(store: str) -> str:
    """The store for a message: a URL without its password (one given there despite the docs)."""
    if not is_url(store):
        return store
    scheme, _, rest = store.partition("://")
    userinfo, at, host = rest.rpartition("@")
    return "%s://%s%s%s" % (scheme, userinfo.split(":", 1)[0], at, host) if at else store
