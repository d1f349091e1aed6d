"""Controller side of the ext4 fleet audit: rules, waivers, reports and the gate."""

import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
# The parsers and kernel-version logic live once, in module_utils/, shipped to targets inside
# the ext4_facts module; the controller imports the same files.
if os.path.join(ROOT, "module_utils") not in sys.path:
    sys.path.insert(0, os.path.join(ROOT, "module_utils"))

SEVERITIES = ("info", "low", "medium", "high", "critical")


def severity_rank(name):
    """info=0 .. critical=4; raises ValueError for an unknown name."""
    return SEVERITIES.index(name)
