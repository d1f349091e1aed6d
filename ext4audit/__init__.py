"""Controller side of the ext4 fleet audit: rules, waivers, reports and the gate."""

import os

# The release: the same as galaxy.yml's (tests/unit/test_packaging.py checks they agree).
__version__ = "1.0.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SEVERITIES = ("info", "low", "medium", "high", "critical")


def severity_rank(name):
    """info=0 .. critical=4; raises ValueError for an unknown name."""
    return SEVERITIES.index(name)


def umask():
    """This process's umask (reading it means setting it, briefly)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
