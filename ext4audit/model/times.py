"""Moments in reports: UTC, to the second, written as STAMP and compared as moments, never as text."""

import datetime


def utc_now() -> datetime.datetime:
    return datetime.datetime.now(datetime.timezone.utc).replace(microsecond=0)


STAMP = "%Y-%m-%dT%H:%M:%SZ"  # every moment written into a report (UTC)


def stamp(moment: datetime.datetime) -> str:
    return moment.strftime(STAMP)


def moment_of(text: str) -> datetime.datetime:
    """The moment a stamp stands for; ValueError (or TypeError) if text is none. Stamps are
    compared as moments, never as text ("999-01-01T..." sorts after "2026-...")."""
    return datetime.datetime.strptime(text, STAMP).replace(tzinfo=datetime.timezone.utc)
