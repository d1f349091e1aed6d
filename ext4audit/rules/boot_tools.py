"""What a disk image's own boot loader and fsck can read of its filesystems (rules/boot_tools.yml).

An image made on a newer machine than the one it targets can carry ext4 features that its own GRUB
cannot read (grub-install and the boot say "unknown filesystem") or that its own e2fsck refuses
("has unsupported feature(s)", exit 8: the boot's fsck of that filesystem fails, and the image's
tools cannot repair it). The versions come from the image's dpkg database (ext4_image_facts:
image.packages), each judged by its upstream part. Used by the rules IMAGE_GRUB_CANNOT_READ_BOOT_FS
and IMAGE_FSCK_UNSUPPORTED_FEATURES (engine.filesystem_context).
"""

import functools
import os
import re
from typing import Dict, Iterable, List, Optional, Tuple

from ext4audit.model import contract
from ext4audit.rules import RULES_DIR

DATA_FILE = os.path.join(RULES_DIR, "boot_tools.yml")
TOOLS = ("grub", "e2fsprogs")
_UPSTREAM_NUMBERS = re.compile(r"^\d+(?:\.\d+)*")
_RELEASE = re.compile(r"^\d+(?:\.\d+)+$")


class BootToolsError(ValueError):
    """The data file cannot be used; the message names the file and the field."""


def load(path: str = DATA_FILE) -> dict:
    """The data file, checked against contract.BootTools."""
    doc = contract.load_data(path, contract.BootTools, BootToolsError)
    for tool in TOOLS:
        for feature, release in doc[tool]["reads_since"].items():
            if not _RELEASE.match(release):
                raise BootToolsError("%s: %s.reads_since.%s %r is not a release (x.y or x.y.z)"
                                     % (path, tool, feature, release))
    grub = doc["grub"]
    for name in grub["reads"] + list(grub["reads_since"]):
        if name not in grub["incompat_features"]:
            raise BootToolsError("%s: grub: %r is not one of its incompat_features" % (path, name))
    return doc


@functools.lru_cache(maxsize=None)
def shipped() -> dict:
    """The repository's data file, read once (the catalog loader reads it first, so a broken file
    fails `ext4audit check` before any host is contacted)."""
    return load()


def upstream_version(package_version: str) -> Optional[Tuple[int, ...]]:
    """dpkg's [epoch:]upstream[-revision] as the upstream part's leading numbers
    ("1:2.06-13+deb12u1" -> (2, 6)); None when it starts with no number."""
    upstream = package_version.partition(":")[2] if ":" in package_version else package_version
    upstream = upstream.rsplit("-", 1)[0] if "-" in upstream else upstream
    match = _UPSTREAM_NUMBERS.match(upstream)
    return tuple(int(part) for part in match.group(0).split(".")) if match else None


def _since(version: str) -> Tuple[int, ...]:
    return tuple(int(part) for part in version.split("."))


def unreadable(tool: str, features: Iterable[str], packages: Optional[Dict[str, str]],
               doc: Optional[dict] = None) -> Tuple[Optional[str], Optional[List[str]]]:
    """(the tool's package version, the features of a filesystem it cannot read) for an image whose
    installed packages are `packages` (image.packages). The version is "" and the list empty when
    the tool is not installed (nothing of the image needs it to read anything); both are None when
    the image's packages are unknown (no dpkg database) or its version has no number."""
    doc = doc if doc is not None else shipped()
    if packages is None:
        return None, None
    data = doc[tool]
    version = next((packages[name] for name in data["packages"] if name in packages), None)
    if version is None:
        return "", []
    numbers = upstream_version(version)
    if numbers is None:
        return version, None
    since = data["reads_since"]
    if tool == "grub":
        reads = set(data["reads"])
        unread = [f for f in features if f in data["incompat_features"] and f not in reads
                  and (f not in since or numbers < _since(since[f]))]
    else:
        unread = [f for f in features if f in since and numbers < _since(since[f])]
    return version, unread


def boot_mountpoint(filesystems: Iterable[dict]) -> str:
    """Where GRUB reads the kernel and its modules from: /boot when it is a filesystem of its own,
    else the root filesystem."""
    return "/boot" if any(fs.get("mountpoint") == "/boot" for fs in filesystems) else "/"
