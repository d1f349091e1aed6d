"""The results store: every reported run in a database, for history, trends and the night's gate.

SQLite by default (reports/history.sqlite, beside the run folders: nothing to install or start),
PostgreSQL when the store is a postgresql:// URL (psycopg 3; the password from PGPASSWORD or
PGPASSFILE, libpq's own variables, never from the URL given on a command line). One schema for
both (schema.py), created and upgraded by the tool; ingest.py records a run folder, history.py
answers questions about the nights recorded.
"""

import os
from typing import List, Optional

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


def _pattern_terms(pattern: str) -> List[str]:
    """An Ansible host pattern's terms, as Ansible splits them: on commas, or else on colons
    outside [ranges] (an IPv6 address is one term)."""
    pattern = pattern.strip()
    if "," in pattern:
        terms = pattern.split(",")
    elif pattern.count(":") > 1 and all(c in "0123456789abcdefABCDEF:." for c in pattern):
        terms = [pattern]  # fe80::1
    else:
        terms, depth, start = [], 0, 0
        for index, char in enumerate(pattern):
            depth += (char == "[") - (char == "]")
            if char == ":" and depth == 0:
                terms.append(pattern[start:index])
                start = index + 1
        terms.append(pattern[start:])
    return [t.strip() for t in terms if t.strip()]


def _canonical(pattern: str) -> str:
    """A pattern written so that the same selection reads the same: Ansible applies the plain
    terms, then the &intersections, then the !exclusions, each in any order; duplicates are one."""
    terms = set("all" if t == "*" else t for t in _pattern_terms(pattern))
    return ",".join(sorted(terms, key=lambda t: ("&!".find(t[0]) + 1, t)))


def scope(hosts: str, limit: str = "") -> str:
    """The run's scope in the store: the facts play's hosts pattern (ext4_audit_hosts) narrowed by
    --limit, normalised (web:db and db,web are one scope; `all` or `*` narrowed by web is web).
    Empty: unknown (a run recorded before scopes were, or ingested without one)."""
    hosts, limit = _canonical(hosts), _canonical(limit)
    if limit in ("", "all", hosts):
        return hosts
    if hosts in ("", "all"):
        return limit
    return "%s --limit %s" % (hosts, limit)
