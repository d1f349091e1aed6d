"""Controller side of the ext4 fleet audit: rules, waivers, reports and the gate."""

import os

# The release: the same as galaxy.yml's (tests/unit/test_packaging.py checks they agree).
__version__ = "1.0.0"
ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

SEVERITIES = ("info", "low", "medium", "high", "critical")
# The lowest unwaived severity that fails a host whose policy does not say. The role's variable
# ext4_audit_fail_on is YAML (defaults, argument specs): tests/unit/test_contract.py checks it is this.
DEFAULT_FAIL_ON = "high"
# The exit codes of the gate's commands by verdict; "incomplete" (2) is also every command that
# could not run, never a pass. report.yml and kernel_gate.yml read them (the same test checks).
EXIT_CODES = {"pass": 0, "fail": 1, "incomplete": 2}
ERROR = EXIT_CODES["incomplete"]


def severity_rank(name: str) -> int:
    """info=0 .. critical=4; raises ValueError for an unknown name."""
    return SEVERITIES.index(name)


def umask() -> int:
    """This process's umask (reading it means setting it, briefly)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
