# -*- coding: utf-8 -*-
"""Tell which kernel a host really runs, and compare it with advisory version ranges.

``uname -r`` is a build label, not the upstream version: Debian names its
kernels after a frozen ABI (``6.1.0-17-amd64`` is really upstream 6.1.69,
package 6.1.69-1, visible only in ``/proc/version``); Ubuntu keeps a ``.0``
placeholder and its ABI number (``5.15.0-1034-aws``), with the real stable
version only in ``/proc/version_signature``; RHEL, Alibaba and SUSE keep the
``x.y.z`` of their baseline for a decade while backporting thousands of fixes
under the release number, so an upstream "fixed in 5.6.13" says nothing about
``4.18.0-513.el8``.  Only mainline-like and Amazon kernels carry a meaningful
leading ``x.y.z``.  Hence: identify the vendor first, derive the upstream
version only where it can be known, and compare vendor kernels with their own
``version-release`` using rpm's ordering (ext4kb.md section 5).

Stdlib only, Python >= 3.8: shipped to targets inside a module and imported
by controller code and tests as-is.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re
from typing import Any, Dict, Iterable, Optional, Tuple, Union

VENDORS = ("debian", "ubuntu", "rhel", "amazon", "alibaba", "suse", "mainline")
BACKPORT_VENDORS = ("rhel", "alibaba", "suse")
BACKPORT_NOTE = "vendor backports fixes; upstream version ranges do not apply"

# Leading x.y[.z][-rcN] of a release; the rest is flavour/build noise.
_LEAD_RE = re.compile(r"(\d+)\.(\d+)(?:\.(\d+))?(-rc(\d+))?")
_UPSTREAM_RE = re.compile(r"^(\d+)(?:\.(\d+))?(?:\.(\d+))?(?:-rc(\d+))?$")

# Vendor tags in the rpm release part; the lookahead keeps ".al7" from matching ".al7x".
_RHEL_RE = re.compile(r"\.el\d+")  # .el7, .el8_9, .el9uek (Oracle UEK)
_AMAZON_RE = re.compile(r"\.amzn\d*(?![0-9A-Za-z])")  # .amzn2, .amzn2023
_ALIBABA_RE = re.compile(r"\.a[ln]\d+(?![0-9A-Za-z])")  # .al7, .al8, Anolis .an8, .an8_6
# SUSE: dotted numeric release (150500.55.39) plus a SUSE flavour; Ubuntu's
# "-1052-azure" has no dot in the ABI part, so it does not match.
_SUSE_RE = re.compile(
    r"^\d+\.\d+\.\d+-\d+(?:\.\d+)+-(?:default|azure|rt|64kb|kvmsmall|preempt|vanilla)$")
_SUSE_IDS = ("sles", "sled", "sles_sap", "sle_hpc", "sle-micro", "sl-micro",
             "opensuse-leap", "opensuse")
# Ubuntu: x.y.0-ABI-flavour; only Ubuntu's own flavour names, so a custom
# "5.4.0-1-foo" stays mainline.
_UBUNTU_RE = re.compile(
    r"^\d+\.\d+\.0-\d+-(?:generic|lowlatency|aws|azure|gcp|gke|gkeop|oracle|kvm|ibm"
    r"|nvidia|raspi|oem|intel-iotg|realtime|virtual|server|fips)\b")
# Debian: ABI name ends in an architecture flavour (old x.y.0-N, new x.y.z+bpo/+debNN).
_DEBIAN_REL_RE = re.compile(
    r"^\d+\.\d+\.\d+(?:-\d+|\+bpo|\+deb\d+)?-(?:cloud-|rt-)?"
    r"(?:amd64|arm64|i386|686|686-pae|armmp|armmp-lpae|rpi|marvell|s390x|powerpc64le"
    r"|ppc64el|riscv64|loong64|octeon|loongson-3|[45]kc-malta|mips(?:32|64)r\d+el)$")
# Debian writes the package version into uname -v: "#1 SMP ... Debian 6.1.64-1 (2023-11-30)".
# Raspberry Pi OS adds an epoch ("Debian 1:6.12.20-1+rpt1~bpo12+1"), which we drop.
_DEBIAN_PV_RE = re.compile(r"Debian (?:\d+:)?(\d+\.\d+\.\d+)-([^\s()]+)")

# What uname -r appends after the rpm version-release.
_RPM_ARCH_RE = re.compile(
    r"\.(?:x86_64|aarch64|ppc64le|ppc64|s390x|i686|armv7hl|loongarch64|riscv64|noarch)$")
_PLUS_VARIANT_RE = re.compile(r"\+\w+$")  # RHEL "...x86_64+debug", "+64k"
_SUSE_FLAVOUR_RE = re.compile(r"-\d*[A-Za-z]\w*$")  # "-default", "-64kb"
_UBUNTU_FLAVOUR_RE = re.compile(r"^(\d+\.\d+\.\d+-\d+\.\d+\S*?)-[a-z][a-z0-9-]*$")

_DIGITS = "0123456789"
_LETTERS = "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ"


def _text(value: Any) -> str:
    """Accept str/bytes/None from callers; never raise on odd types."""
    if isinstance(value, bytes):
        value = value.decode("utf-8", "replace")
    return value.strip() if isinstance(value, str) else ""


def _os_release_id(os_release: Any) -> str:
    """ID from /etc/os-release given as a dict or as the file's text."""
    if isinstance(os_release, dict):
        for key in ("ID", "id"):
            if key in os_release:
                return _text(os_release[key]).strip("\"'").lower()
        return ""
    for line in _text(os_release).splitlines():
        if line.startswith("ID="):
            return line[3:].strip().strip("\"'").lower()
    return ""


def _upstream_of(match: Any) -> str:  # a _LEAD_RE match (its callers know it matched)
    """Normalise a _LEAD_RE match to "x.y.z" or "x.y.z-rcN"."""
    text = "%d.%d.%d" % (int(match.group(1)), int(match.group(2)), int(match.group(3) or 0))
    if match.group(5):
        text += "-rc%d" % int(match.group(5))
    return text


def _rpm_version_release(release: str) -> str:
    """"4.18.0-513.5.1.el8_9.x86_64+debug" -> "4.18.0-513.5.1.el8_9" (as rpm -q shows it)."""
    return _RPM_ARCH_RE.sub("", _PLUS_VARIANT_RE.sub("", release))


def _detect_vendor(release: str, build: str, signature: str, os_id: str) -> str:
    if _RHEL_RE.search(release):
        return "rhel"
    if _AMAZON_RE.search(release):
        return "amazon"
    if _ALIBABA_RE.search(release):
        return "alibaba"
    # Ubuntu before Debian: both can look like "x.y.0-N-flavour".
    if signature or re.search(r"\bUbuntu\b", build) or _UBUNTU_RE.match(release):
        return "ubuntu"
    if re.search(r"\bDebian\b", build) or _DEBIAN_REL_RE.match(release):
        return "debian"
    if _SUSE_RE.match(release) or os_id in _SUSE_IDS:
        return "suse"
    return "mainline"


def identify(release: Any, proc_version: Any = "", version_signature: Any = "",
             os_release: Any = None) -> Dict[str, Any]:
    """Classify a running kernel; see the module docstring for why this is needed.

    release: uname -r; proc_version: /proc/version; version_signature:
    /proc/version_signature (Ubuntu only); os_release: /etc/os-release as a
    dict or text.  Returns a dict with release, vendor, upstream,
    vendor_version, backports and notes.  Never raises.
    """
    rel = _text(release)
    proc = _text(proc_version)
    signature = _text(version_signature)
    info = {"release": release, "vendor": "mainline", "upstream": None,
            "vendor_version": None, "backports": False, "notes": []}
    notes = info["notes"]

    lead = _LEAD_RE.match(rel)
    if lead is None:
        notes.append("unrecognised release string")
        return info

    # Only the uname -v part (from '#') is trusted: the compiler banner before
    # it says "(Debian 12.2.0-14)" or "(Ubuntu 11.4.0-...)" on any host built there.
    build = proc[proc.find("#"):] if "#" in proc else proc
    vendor = _detect_vendor(rel, build, signature, _os_release_id(os_release))
    info["vendor"] = vendor

    if vendor == "debian":
        found = _DEBIAN_PV_RE.findall(build)
        if found:
            upstream, revision = found[-1]
            info["upstream"] = _upstream_of(_LEAD_RE.match(upstream))
            info["vendor_version"] = "%s-%s" % (upstream, revision)
        else:
            notes.append("Debian kernel but /proc/version has no 'Debian x.y.z-rev';"
                         " the ABI name in uname -r does not give the upstream version")
    elif vendor == "ubuntu":
        fields = signature.split()
        if len(fields) >= 3 and fields[0] == "Ubuntu":
            last = _LEAD_RE.match(fields[-1])
            info["upstream"] = _upstream_of(last) if last else None
            abi = _UBUNTU_FLAVOUR_RE.match(fields[1])
            info["vendor_version"] = abi.group(1) if abi else None
            if last is None:
                notes.append("unreadable upstream field in /proc/version_signature")
        else:
            notes.append("Ubuntu kernel without /proc/version_signature;"
                         " x.y.0-ABI in uname -r does not give the upstream version")
    elif vendor == "mainline":
        info["upstream"] = _upstream_of(lead)
        if lead.group(3) is None:
            notes.append("no sublevel in release; assumed %s" % info["upstream"])
        if rel[lead.end():]:
            notes.append("assumed upstream/stable kernel; local suffix %r ignored"
                         % rel[lead.end():])
    else:  # rpm-packaged vendors: rhel, amazon, alibaba, suse
        info["upstream"] = _upstream_of(lead)
        if vendor == "suse":
            info["vendor_version"] = _SUSE_FLAVOUR_RE.sub("", rel)
            notes.append("uname -r omits SUSE's last rpm release field"
                         " (rpm 150500.55.39.1 shows as 150500.55.39)")
        else:
            info["vendor_version"] = _rpm_version_release(rel)
        if vendor == "amazon":
            notes.append("Amazon carries extra patches; upstream version is an approximation")

    if vendor in BACKPORT_VENDORS:
        info["backports"] = True
        notes.append(BACKPORT_NOTE)
    return info


# The kernel whose ext4 defaults offline option inference assumes when it knows of none: Debian
# 12's 6.1, an LTS kernel past every default change that decides a rule (dioread_nolock, 5.6).
OPTIONS_DEFAULT_KERNEL = "6.1.0"


def options_kernel(kernel_info: Optional[Dict[str, Any]], known_as: str) -> Dict[str, str]:
    """The upstream version whose ext4 option defaults apply to a kernel, and why: its upstream
    version; else the x.y of its release (defaults change at x.y releases); else
    OPTIONS_DEFAULT_KERNEL. kernel_info: identify()'s answer or None; known_as: what the kernel is
    ("the running kernel", "the image's boot kernel"). Returns {upstream, why}."""
    info = kernel_info or {}
    if info.get("upstream"):
        return {"upstream": info["upstream"], "why": "%s (%s)" % (known_as, info.get("release"))}
    lead = _LEAD_RE.match(_text(info.get("release")))
    if lead:
        upstream = "%d.%d.0" % (int(lead.group(1)), int(lead.group(2)))
        return {"upstream": upstream, "why": "%s (%s): upstream version unknown, %s assumed from the release"
                % (known_as, info.get("release"), upstream)}
    return {"upstream": OPTIONS_DEFAULT_KERNEL, "why": "no known kernel: the defaults of %s assumed"
            % OPTIONS_DEFAULT_KERNEL}


def _upstream_key(version: Any) -> Tuple[int, int, int, Union[int, float]]:
    """Sort key for "x.y.z[-rcN]"; an rc sorts before its release."""
    if not isinstance(version, str):
        raise ValueError("upstream version must be a string like '6.8.0-rc3', got %r"
                         % (version,))
    match = _UPSTREAM_RE.match(version.strip())
    if match is None:
        raise ValueError("not an upstream version 'x.y.z' or 'x.y.z-rcN': %r" % (version,))
    major, minor, patch, rc = match.groups()
    # A release is "rc infinity": every -rcN of the same x.y.z comes before it.
    rc_key = int(rc) if rc is not None else float("inf")
    return (int(major), int(minor or 0), int(patch or 0), rc_key)


def compare_upstream(a: str, b: str) -> int:
    """-1/0/1 for upstream versions; 6.8.0-rc3 < 6.8.0-rc10 < 6.8.0 < 6.8.1, "6.9" == "6.9.0"."""
    ka, kb = _upstream_key(a), _upstream_key(b)
    return (ka > kb) - (ka < kb)


def rpmvercmp(a: str, b: str) -> int:
    """Port of rpm's lib/rpmvercmp.c: -1/0/1.

    Alphanumeric segments are compared pairwise, everything else separates
    them; numbers compare numerically (leading zeros dropped, longer wins) and
    beat letters; '~' sorts before anything (even the end of the string);
    '^' sorts after the end of the string but before any other segment.
    """
    if a == b:
        return 0
    i, j, la, lb = 0, 0, len(a), len(b)
    while i < la or j < lb:
        # Skip separators, but keep '~' and '^': they carry meaning.
        while i < la and a[i] not in _DIGITS and a[i] not in _LETTERS and a[i] not in "~^":
            i += 1
        while j < lb and b[j] not in _DIGITS and b[j] not in _LETTERS and b[j] not in "~^":
            j += 1
        ca = a[i] if i < la else ""
        cb = b[j] if j < lb else ""
        if ca == "~" or cb == "~":
            if ca != "~":
                return 1
            if cb != "~":
                return -1
            i, j = i + 1, j + 1
            continue
        if ca == "^" or cb == "^":
            if not ca:
                return -1
            if not cb:
                return 1
            if ca != "^":
                return 1
            if cb != "^":
                return -1
            i, j = i + 1, j + 1
            continue
        if not (ca and cb):
            break
        # The segment type is decided by a; b is cut with the same class.
        isnum = ca in _DIGITS
        chars = _DIGITS if isnum else _LETTERS
        ei, ej = i, j
        while ei < la and a[ei] in chars:
            ei += 1
        while ej < lb and b[ej] in chars:
            ej += 1
        one, two = a[i:ei], b[j:ej]
        if not two:
            return 1 if isnum else -1  # numeric segments are newer than alpha ones
        if isnum:
            one, two = one.lstrip("0"), two.lstrip("0")
            if len(one) != len(two):
                return 1 if len(one) > len(two) else -1
        if one != two:
            return 1 if one > two else -1
        i, j = ei, ej
    if i >= la and j >= lb:
        return 0
    return -1 if i >= la else 1


def compare_evr(a: str, b: str) -> int:
    """-1/0/1 for "version-release" strings, split at the last '-' (rpm labelCompare style).

    A string without '-' is all version with an empty release.
    """
    if not isinstance(a, str) or not isinstance(b, str):
        raise ValueError("version-release must be strings, got %r and %r" % (a, b))
    va, _unused, ra = a.rpartition("-") if "-" in a else (a, "", "")
    vb, _unused, rb = b.rpartition("-") if "-" in b else (b, "", "")
    return rpmvercmp(va, vb) or rpmvercmp(ra, rb)


def in_range(kernel_info: Dict[str, Any], ranges: Iterable[Dict[str, Any]]) -> Optional[bool]:
    """True/False/None: is this kernel inside any applicable range?

    ranges: [{"vendor": "upstream"|"debian"|..., "min": inclusive, "max": exclusive}].
    "upstream" ranges apply to non-backporting hosts with a known upstream
    version; vendor ranges apply to that vendor only and compare vendor_version
    with rpm ordering.  For debian/ubuntu this stands in for dpkg ordering: for
    their numeric package versions (and '~' for backports) the two agree.
    None means no range applied (e.g. RHEL host, upstream ranges only) or the
    needed version is unknown.  Unknown vendor names and malformed bounds
    raise ValueError.
    """
    vendor = kernel_info.get("vendor")
    applicable = False
    for rng in ranges:
        kind = str(rng.get("vendor") or "upstream").lower()
        if kind not in VENDORS and kind != "upstream":
            # A typo in a rule must not quietly turn into "unknown".
            raise ValueError("unknown vendor %r in range %r" % (kind, rng))
        if kind == "upstream":
            version = kernel_info.get("upstream")
            if kernel_info.get("backports") or not version:
                continue
            compare = compare_upstream
        else:
            version = kernel_info.get("vendor_version")
            if kind != vendor or not version:
                continue
            compare = compare_evr
        applicable = True
        low, high = rng.get("min"), rng.get("max")
        if (low is None or compare(version, low) >= 0) and \
                (high is None or compare(version, high) < 0):
            return True
    return False if applicable else None
