"""Which of a filesystem's fstab options a kernel refuses, by rules/removed_mount_options.yml.

A kernel is judged by its upstream version (module_utils/kernel_version.identify): one at or past
an entry's removed_in refuses its options, whatever the vendor (vendors do not bring removed
options back); one before it accepts them, unless it backports (RHEL, Alibaba, SUSE, Ubuntu
without version_signature), which may carry the removal under its old version: then the answer
is unknown and says why. Used by the rule EXT4_FSTAB_OPTION_REFUSED (the running kernel,
engine.py) and by the kernel gate (the candidate's kernel, kernel_gate.py).
"""

import functools
import os

from ext4audit.model import contract
from ext4audit.rules import RULES_DIR
from ext4audit.parsers import kernel_version

DATA_FILE = os.path.join(RULES_DIR, "removed_mount_options.yml")


class MountOptionsError(ValueError):
    """The data file cannot be used; the message names the file and the field."""


def load(path: str = DATA_FILE) -> dict:
    """The data file, checked: its shape (contract.RemovedMountOptions) and every removed_in."""
    doc = contract.load_data(path, contract.RemovedMountOptions, MountOptionsError)
    for index, entry in enumerate(doc["removed"]):
        try:
            kernel_version.compare_upstream(entry["removed_in"], entry["removed_in"])
        except ValueError as exc:
            raise MountOptionsError("%s: removed[%d].removed_in %r is not an upstream version (%s)"
                                    % (path, index, entry["removed_in"], exc))
    return doc


@functools.lru_cache(maxsize=None)
def shipped() -> dict:
    """The repository's data file, read once (the catalog loader reads it first, so a broken file
    fails `ext4audit check` before any host is contacted)."""
    return load()


def _name(token: str) -> str:
    return token.partition("=")[0]


def refused(tokens, kernel: dict, doc: dict = None) -> tuple:
    """(refused, unknown) for the option tokens of an fstab entry on this kernel: refused lists
    {option, removed_in, commit, refused_as} for each token the kernel refuses; unknown lists the
    same for tokens it may refuse (a backporting vendor's kernel before removed_in, or a kernel
    whose upstream version is not known), each with a `why`."""
    doc = doc if doc is not None else shipped()
    kernel = kernel or {}
    found, unknown = [], []
    for token in tokens or ():
        for entry in doc["removed"]:
            if token not in entry["options"] and _name(token) not in entry["options"]:
                continue
            item = {"option": token, "removed_in": entry["removed_in"], "commit": entry["commit"][:12],
                    "refused_as": entry["refused_as"]}
            verdict, why = _judge(kernel, entry["removed_in"])
            if verdict:
                found.append(item)
            elif verdict is None:
                unknown.append(dict(item, why=why))
    return found, unknown


def _judge(kernel: dict, removed_in: str) -> tuple:
    """(True: refused, False: accepted, None: unknown; why it is unknown)."""
    upstream = kernel.get("upstream")
    try:
        at_or_after = upstream and kernel_version.compare_upstream(upstream, removed_in) >= 0
    except ValueError:
        upstream = None
    if not upstream:
        return None, "kernel %s: upstream version unknown" % kernel.get("release")
    if at_or_after:
        return True, None
    if kernel.get("backports"):
        return None, ("%s kernel %s is based on %s, before %s, and may carry the removal"
                      % (kernel.get("vendor"), kernel.get("release"), upstream, removed_in))
    return False, None


def describe(items) -> str:
    """'noacl (removed in 6.1.0-rc1, 2d544ec923db), ...' for messages."""
    return ", ".join("%s (removed in %s, %s)" % (item["option"], item["removed_in"], item["commit"])
                     for item in items)
