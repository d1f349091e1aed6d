"""`ext4audit --version`: the version, and whether the installed requirements satisfy it.

The roles' preflight runs it on the controller before any host is contacted, so a missing or old
dependency (numpy, matplotlib... are imported only when a step needs them) stops the play at once
with one line instead of a traceback after the fleet was audited.
"""

import importlib.metadata
import re

from ext4audit import __version__

DISTRIBUTION = "ext4audit"
_REQUIREMENT = re.compile(r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)\s*(?:\[[^\]]*\])?\s*(==|>=)?\s*([^\s,;]*)")


def _release(text):
    return tuple(int(part) for part in re.findall(r"\d+", text.split("+")[0])[:3])


def problems():
    """What is wrong with the installed requirements, one phrase each (empty: all fine). A checkout
    that is not installed has no metadata to check: its venv comes from requirements.txt."""
    try:
        requirements = importlib.metadata.requires(DISTRIBUTION) or []
    except importlib.metadata.PackageNotFoundError:
        return []
    found = []
    for requirement in requirements:
        if ";" in requirement and "extra ==" in requirement:
            continue
        name, operator, wanted = _REQUIREMENT.match(requirement).groups()
        try:
            have = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            found.append("%s is missing" % requirement.split(";")[0].strip())
            continue
        if operator == "==" and _release(have) != _release(wanted) or operator == ">=" and _release(have) < _release(wanted):
            found.append("%s is installed, %s%s is needed" % (name + " " + have, name, operator + wanted))
    return found


def report():
    """(exit code, line) for --version."""
    found = problems()
    if found:
        # No package index has ext4audit: it installs from the collection's folder.
        return 1, "ext4audit %s: %s (pip install <the ext4audit.fleet collection's folder>)" % (__version__, "; ".join(found))
    return 0, "ext4audit %s" % __version__
