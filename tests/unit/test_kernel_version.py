# -*- coding: utf-8 -*-
"""Tests for plugins/module_utils/kernel_version.py.

Release strings, /proc/version and /proc/version_signature lines are copied
from real hosts (bug reports, boot logs, vendor kernel lists) unless a comment
says otherwise.  Expected values follow ext4kb.md section 5.
"""

import ast
import os

import pytest

REPO = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from ext4audit.parsers import kernel_version as kv  # noqa: E402

# ---------------------------------------------------------------------------
# Real /proc/version lines
# ---------------------------------------------------------------------------
DEB_TOOLCHAIN = ("(debian-kernel@lists.debian.org) (gcc-12 (Debian 12.2.0-14) 12.2.0, "
                 "GNU ld (GNU Binutils for Debian) 2.40)")
PV_DEB_6_1_69 = ("Linux version 6.1.0-17-amd64 " + DEB_TOOLCHAIN
                 + " #1 SMP PREEMPT_DYNAMIC Debian 6.1.69-1 (2023-12-30)")
PV_DEB_6_1_64 = ("Linux version 6.1.0-14-amd64 " + DEB_TOOLCHAIN
                 + " #1 SMP PREEMPT_DYNAMIC Debian 6.1.64-1 (2023-11-30)")
PV_DEB_6_1_66 = ("Linux version 6.1.0-15-amd64 " + DEB_TOOLCHAIN
                 + " #1 SMP PREEMPT_DYNAMIC Debian 6.1.66-1 (2023-12-09)")
# uname -v of 6.12.12+bpo is real ("Debian 6.12.12-1~bpo12+1 (2025-02-23)"); the
# toolchain part is the bookworm one used by every bookworm build (as in 6.6.13+bpo).
PV_DEB_BPO_6_12 = ("Linux version 6.12.12+bpo-cloud-amd64 " + DEB_TOOLCHAIN
                   + " #1 SMP PREEMPT_DYNAMIC Debian 6.12.12-1~bpo12+1 (2025-02-23)")
PV_DEB_RT = ("Linux version 6.1.0-17-rt-amd64 " + DEB_TOOLCHAIN
             + " #1 SMP PREEMPT_RT Debian 6.1.69-1 (2023-12-30)")
UNAME_V_DEB9 = "#1 SMP Debian 4.9.144-3.1 (2019-02-19)"
UNAME_V_RPI = "#1 SMP PREEMPT Debian 1:6.12.20-1+rpt1~bpo12+1 (2025-03-19)"
PV_PROXMOX = ("Linux version 6.2.16-19-pve (build@proxmox) (gcc (Debian 12.2.0-14) 12.2.0, "
              "GNU ld (GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC PMX 6.2.16-19 "
              "(2023-10-24T12:07Z)")

PV_U2004_GENERIC = ("Linux version 5.4.0-166-generic (buildd@lcy02-amd64-011) (gcc version 9.4.0 "
                    "(Ubuntu 9.4.0-1ubuntu1~20.04.2)) #183-Ubuntu SMP Mon Oct 2 11:28:33 UTC 2023")
SIG_U2004_GENERIC = "Ubuntu 5.4.0-166.183-generic 5.4.252"
PV_U2004_AWS = ("Linux version 5.15.0-1066-aws (buildd@lcy02-amd64-037) (gcc (Ubuntu "
                "9.4.0-1ubuntu1~20.04.2) 9.4.0, GNU ld (GNU Binutils for Ubuntu) 2.34) "
                "#72~20.04.1-Ubuntu SMP Thu Jul 18 10:41:27 UTC 2024")
SIG_U2004_AWS = "Ubuntu 5.15.0-1066.72~20.04.1-aws 5.15.158"
PV_U2204_GENERIC = ("Linux version 5.15.0-100-generic (buildd@lcy02-amd64-116) (gcc (Ubuntu "
                    "11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) "
                    "#110-Ubuntu SMP Wed Feb 7 13:27:48 UTC 2024")
SIG_U2204_GENERIC = "Ubuntu 5.15.0-100.110-generic 5.15.143"
PV_U2204_AWS = ("Linux version 6.8.0-1015-aws (buildd@lcy02-amd64-053) (x86_64-linux-gnu-gcc-11 "
                "(Ubuntu 11.4.0-1ubuntu1~22.04) 11.4.0, GNU ld (GNU Binutils for Ubuntu) 2.38) "
                "#16~22.04.1-Ubuntu SMP Mon Aug 19 19:38:17 UTC 2024")
# Signature rebuilt from the build number (#16~22.04.1); every 6.8 Ubuntu kernel
# after 6.8 went EOL reports upstream 6.8.12.
SIG_U2204_AWS = "Ubuntu 6.8.0-1015.16~22.04.1-aws 6.8.12"
PV_U2404_GENERIC = ("Linux version 6.8.0-60-generic (buildd@lcy02-amd64-054) "
                    "(x86_64-linux-gnu-gcc-13 (Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0, "
                    "GNU ld (GNU Binutils for Ubuntu) 2.42) "
                    "#63-Ubuntu SMP PREEMPT_DYNAMIC Tue Apr 15 19:04:15 UTC 2025")
SIG_U2404_GENERIC = "Ubuntu 6.8.0-60.63-generic 6.8.12"
PV_U2404_AWS = ("Linux version 6.8.0-1029-aws (buildd@lcy02-amd64-108) (x86_64-linux-gnu-gcc-13 "
                "(Ubuntu 13.3.0-6ubuntu2~24.04) 13.3.0, GNU ld (GNU Binutils for Ubuntu) 2.42) "
                "#31-Ubuntu SMP Wed Apr 23 18:42:41 UTC 2025")
SIG_U2404_AWS = "Ubuntu 6.8.0-1029.31-aws 6.8.12"  # rebuilt from #31, see SIG_U2204_AWS

UNAME_V_AL2023 = "#1 SMP PREEMPT_DYNAMIC Wed Nov  8 00:39:18 UTC 2023"
UNAME_V_SLES = "#1 SMP PREEMPT_DYNAMIC Tue Dec 5 10:06:35 UTC 2023 (2e4092e)"
PV_THIS_HOST = ("Linux version 6.18.44-fc-v669 (builder@sandboxing) (gcc (GCC) 15.3.0, "
                "GNU ld (GNU Binutils) 2.46) #1 SMP PREEMPT_DYNAMIC @0")

# (release, proc_version, version_signature, os_release, vendor, upstream, vendor_version)
REAL_KERNELS = [
    # Debian 12: ABI name hides the upstream version; /proc/version has it.
    ("6.1.0-17-amd64", PV_DEB_6_1_69, "", None, "debian", "6.1.69", "6.1.69-1"),
    ("6.1.0-14-amd64", PV_DEB_6_1_64, "", None, "debian", "6.1.64", "6.1.64-1"),
    ("6.1.0-15-amd64", PV_DEB_6_1_66, "", None, "debian", "6.1.66", "6.1.66-1"),
    ("6.1.0-17-rt-amd64", PV_DEB_RT, "", None, "debian", "6.1.69", "6.1.69-1"),
    ("6.12.12+bpo-cloud-amd64", PV_DEB_BPO_6_12, "", None, "debian", "6.12.12",
     "6.12.12-1~bpo12+1"),
    ("4.9.0-8-amd64", UNAME_V_DEB9, "", None, "debian", "4.9.144", "4.9.144-3.1"),
    ("6.12.20+rpt-rpi-v8", UNAME_V_RPI, "", None, "debian", "6.12.20", "6.12.20-1+rpt1~bpo12+1"),
    # Ubuntu 20.04 / 22.04 / 24.04, generic and aws.
    ("5.4.0-166-generic", PV_U2004_GENERIC, SIG_U2004_GENERIC, None, "ubuntu", "5.4.252",
     "5.4.0-166.183"),
    ("5.15.0-1066-aws", PV_U2004_AWS, SIG_U2004_AWS, None, "ubuntu", "5.15.158",
     "5.15.0-1066.72~20.04.1"),
    ("5.15.0-100-generic", PV_U2204_GENERIC, SIG_U2204_GENERIC, None, "ubuntu", "5.15.143",
     "5.15.0-100.110"),
    ("6.8.0-1015-aws", PV_U2204_AWS, SIG_U2204_AWS, None, "ubuntu", "6.8.12",
     "6.8.0-1015.16~22.04.1"),
    ("6.8.0-60-generic", PV_U2404_GENERIC, SIG_U2404_GENERIC, None, "ubuntu", "6.8.12",
     "6.8.0-60.63"),
    ("6.8.0-1029-aws", PV_U2404_AWS, SIG_U2404_AWS, None, "ubuntu", "6.8.12", "6.8.0-1029.31"),
    # Amazon Linux 2 (4.14, 5.10) and 2023.
    ("4.14.287-215.504.amzn2.x86_64", "", "", None, "amazon", "4.14.287",
     "4.14.287-215.504.amzn2"),
    ("5.10.201-191.748.amzn2.x86_64", "", "", None, "amazon", "5.10.201",
     "5.10.201-191.748.amzn2"),
    ("6.1.61-85.141.amzn2023.x86_64", UNAME_V_AL2023, "", None, "amazon", "6.1.61",
     "6.1.61-85.141.amzn2023"),
    # Alibaba Cloud Linux 2 (al7) and 3 (al8), Anolis (an8).
    ("4.19.24-9.al7.x86_64", "", "", None, "alibaba", "4.19.24", "4.19.24-9.al7"),
    ("4.19.57-15.1.al7.x86_64", "", "", None, "alibaba", "4.19.57", "4.19.57-15.1.al7"),
    ("4.19.91-22.fc.1.al7.x86_64", "", "", None, "alibaba", "4.19.91", "4.19.91-22.fc.1.al7"),
    ("4.19.91-26.al7.x86_64", "", "", None, "alibaba", "4.19.91", "4.19.91-26.al7"),
    ("5.10.134-16.al8.x86_64", "", "", None, "alibaba", "5.10.134", "5.10.134-16.al8"),
    ("4.18.0-372.32.1.an8_6.x86_64", "", "", None, "alibaba", "4.18.0",
     "4.18.0-372.32.1.an8_6"),
    # RHEL 7/8/9, a RHEL debug kernel, Oracle UEK.
    ("3.10.0-1160.el7.x86_64", "", "", None, "rhel", "3.10.0", "3.10.0-1160.el7"),
    ("4.18.0-513.5.1.el8_9.x86_64", "", "", None, "rhel", "4.18.0", "4.18.0-513.5.1.el8_9"),
    ("5.14.0-362.8.1.el9_3.x86_64", "", "", None, "rhel", "5.14.0", "5.14.0-362.8.1.el9_3"),
    ("5.14.0-362.8.1.el9_3.x86_64+debug", "", "", None, "rhel", "5.14.0",
     "5.14.0-362.8.1.el9_3"),
    ("5.15.0-200.131.27.el9uek.x86_64", "", "", None, "rhel", "5.15.0",
     "5.15.0-200.131.27.el9uek"),
    # SUSE SLES 15 SP5 (update and GA kernels).
    ("5.14.21-150500.55.39-default", UNAME_V_SLES, "", None, "suse", "5.14.21",
     "5.14.21-150500.55.39"),
    ("5.14.21-150500.53-default", "", "", {"ID": "sles"}, "suse", "5.14.21",
     "5.14.21-150500.53"),
    # Mainline / custom builds.
    ("6.8.0-rc3", "", "", None, "mainline", "6.8.0-rc3", None),
    ("6.8.0-rc3+", "", "", None, "mainline", "6.8.0-rc3", None),
    ("6.10.0-rc1-00001-gabcdef", "", "", None, "mainline", "6.10.0-rc1", None),
    ("6.18.44-fc-v669", PV_THIS_HOST, "", None, "mainline", "6.18.44", None),
    ("6.9", "", "", None, "mainline", "6.9.0", None),
    ("6.5.6-300.fc39.x86_64", "", "", None, "mainline", "6.5.6", None),
    # Proxmox: Debian toolchain in the banner must not make it "debian".
    ("6.2.16-19-pve", PV_PROXMOX, "", None, "mainline", "6.2.16", None),
]


@pytest.mark.parametrize(
    "release, proc_version, signature, os_release, vendor, upstream, vendor_version",
    REAL_KERNELS, ids=[case[0] for case in REAL_KERNELS])
def test_identify_real_kernels(release, proc_version, signature, os_release, vendor,
                               upstream, vendor_version):
    info = kv.identify(release, proc_version, signature, os_release)
    assert info["release"] == release
    assert info["vendor"] == vendor
    assert info["upstream"] == upstream
    assert info["vendor_version"] == vendor_version
    assert info["backports"] is (vendor in ("rhel", "alibaba", "suse"))


def test_identify_returns_exactly_the_documented_keys():
    info = kv.identify("6.1.0-17-amd64", PV_DEB_6_1_69)
    assert sorted(info) == ["backports", "notes", "release", "upstream", "vendor",
                            "vendor_version"]
    assert isinstance(info["notes"], list)


@pytest.mark.parametrize("release", [
    "4.18.0-513.5.1.el8_9.x86_64", "4.19.91-26.al7.x86_64", "5.14.21-150500.55.39-default"])
def test_backport_vendors_carry_the_warning_note(release):
    info = kv.identify(release)
    assert info["backports"] is True
    assert kv.BACKPORT_NOTE in info["notes"]
    # The upstream x.y.z is still reported, for display only.
    assert info["upstream"] is not None


def test_debian_without_proc_version_has_unknown_upstream():
    info = kv.identify("6.1.0-17-amd64")
    assert info["vendor"] == "debian"
    assert info["upstream"] is None
    assert info["vendor_version"] is None
    assert any("Debian" in note for note in info["notes"])


def test_debian_toolchain_banner_alone_is_not_a_package_version():
    # gcc says "(Debian 12.2.0-14)" but uname -v has no "Debian x.y.z-rev".
    proc = ("Linux version 6.1.0-17-amd64 " + DEB_TOOLCHAIN
            + " #1 SMP PREEMPT_DYNAMIC Sat Dec 30 2023")
    info = kv.identify("6.1.0-17-amd64", proc)
    assert info["vendor"] == "debian"
    assert info["upstream"] is None  # never "12.2.0" from the compiler


def test_debian_package_version_is_the_last_one_when_build_marker_is_missing():
    # Without the '#' of uname -v the whole text is searched; the compiler's
    # "(Debian 12.2.0-14)" comes first and must lose to the kernel's own version.
    proc = "(gcc-12 (Debian 12.2.0-14) 12.2.0) SMP PREEMPT_DYNAMIC Debian 6.1.64-1 (2023-11-30)"
    info = kv.identify("6.1.0-14-amd64", proc)
    assert (info["upstream"], info["vendor_version"]) == ("6.1.64", "6.1.64-1")


def test_custom_kernel_built_on_debian_is_mainline():
    proc = ("Linux version 6.9.0 (root@build) (gcc (Debian 12.2.0-14) 12.2.0, GNU ld "
            "(GNU Binutils for Debian) 2.40) #1 SMP PREEMPT_DYNAMIC Mon Jun  3 10:00:00 UTC 2024")
    info = kv.identify("6.9.0", proc)
    assert info["vendor"] == "mainline"
    assert info["upstream"] == "6.9.0"


@pytest.mark.parametrize("release, proc_version", [
    ("6.8.0-1029-aws", PV_U2404_AWS),
    ("5.15.0-1034-aws", ""),  # release alone is enough to call it Ubuntu
    ("6.8.0-1021-azure", "#25-Ubuntu SMP Wed Jan 15 20:45:09 UTC 2025"),
])
def test_ubuntu_without_version_signature_has_unknown_upstream(release, proc_version):
    info = kv.identify(release, proc_version)
    assert info["vendor"] == "ubuntu"
    assert info["upstream"] is None
    assert info["vendor_version"] is None
    assert any("version_signature" in note for note in info["notes"])


def test_ubuntu_detected_from_signature_alone():
    info = kv.identify("5.4.0-166-generic", "", SIG_U2004_GENERIC)
    assert (info["vendor"], info["upstream"]) == ("ubuntu", "5.4.252")


def test_ubuntu_garbled_signature_does_not_raise():
    info = kv.identify("5.4.0-166-generic", "", "Ubuntu nonsense here")
    assert info["vendor"] == "ubuntu"
    assert info["upstream"] is None
    assert info["notes"]


def test_suse_from_os_release_only():
    # A release without flavour does not match the SUSE pattern on its own ...
    assert kv.identify("5.14.21-150500.55.39")["vendor"] == "mainline"
    # ... but /etc/os-release (dict or text) settles it.
    assert kv.identify("5.14.21-150500.55.39", os_release={"ID": "sles"})["vendor"] == "suse"
    text = 'NAME="openSUSE Leap"\nVERSION="15.5"\nID="opensuse-leap"\nID_LIKE="suse opensuse"\n'
    info = kv.identify("5.14.21-150500.55.39", os_release=text)
    assert info["vendor"] == "suse"
    assert info["backports"] is True


def test_tumbleweed_release_is_treated_as_upstream():
    # Rolling openSUSE follows upstream stable; "-1" is only the rpm release.
    info = kv.identify("6.6.6-1-default")
    assert (info["vendor"], info["upstream"], info["backports"]) == ("mainline", "6.6.6", False)


def test_amazon_note_says_upstream_is_approximate():
    info = kv.identify("5.10.201-191.748.amzn2.x86_64")
    assert info["backports"] is False
    assert any("Amazon" in note for note in info["notes"])


def test_mainline_suffix_is_noted():
    info = kv.identify("6.18.44-fc-v669", PV_THIS_HOST)
    assert any("-fc-v669" in note for note in info["notes"])
    assert kv.identify("6.8.0-rc3")["notes"] == []


def test_this_machine_if_running_the_expected_kernel():
    release = os.uname().release
    if release != "6.18.44-fc-v669":
        pytest.skip("not the reference machine")
    with open("/proc/version") as handle:
        info = kv.identify(release, handle.read())
    assert (info["vendor"], info["upstream"]) == ("mainline", "6.18.44")


@pytest.mark.parametrize("release", [
    "", "foo", "abc.def", "6", "   ", "\x00", "Linux", "v", ".", "-rc1", None, 12345, b"\xff",
    ["6.1.0"],
])
def test_garbage_never_raises(release):
    info = kv.identify(release, proc_version=release, version_signature=release,
                       os_release=release)
    assert info["vendor"] == "mainline"
    assert info["upstream"] is None
    assert info["vendor_version"] is None
    assert "unrecognised release string" in info["notes"]
    assert info["release"] is release


@pytest.mark.parametrize("proc_version, signature, os_release", [
    (None, None, None), (42, 42, 42), ("#", "Ubuntu", "ID"), ("Debian", "", ["sles"]),
    ("#1 SMP Debian 6.1", "", {"ID": None}),
])
def test_garbage_side_inputs_never_raise(proc_version, signature, os_release):
    info = kv.identify("6.1.0-17-amd64", proc_version, signature, os_release)
    assert info["vendor"] in kv.VENDORS
    assert info["upstream"] is None


# ---------------------------------------------------------------------------
# compare_upstream
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("a, b, expected", [
    ("6.8.0-rc3", "6.8.0-rc10", -1),   # numeric rc, not string order
    ("6.8.0-rc10", "6.8.0", -1),       # every rc before the release
    ("6.8.0-rc3", "6.8.0", -1),
    ("6.8.0", "6.8.1", -1),
    ("6.8.1", "6.8.0-rc10", 1),
    ("6.8.0-rc1", "6.7.12", 1),        # an rc is still after the previous release
    ("6.8.0-rc3", "6.8.0-rc3", 0),
    ("6.9", "6.9.0", 0),               # missing parts are 0
    ("6.9.0", "6.9", 0),
    ("6", "6.0.0", 0),
    ("6.10.0", "6.9.12", 1),           # numeric minor, not string order
    ("5.6.13", "5.6.12", 1),
    ("4.19.0", "4.9.300", 1),
    ("5.10.201", "5.10.201", 0),
])
def test_compare_upstream(a, b, expected):
    assert kv.compare_upstream(a, b) == expected
    assert kv.compare_upstream(b, a) == -expected


@pytest.mark.parametrize("bad", [
    "", "abc", "6.8.0-rc3+", "5.10.201-191.748.amzn2", "6.1.0-17-amd64", "6.8.0-rc", None, 6.8,
])
def test_compare_upstream_rejects_unparsable(bad):
    with pytest.raises(ValueError, match="upstream version"):
        kv.compare_upstream(bad, "6.8.0")
    with pytest.raises(ValueError):
        kv.compare_upstream("6.8.0", bad)


# ---------------------------------------------------------------------------
# rpmvercmp: every case of rpm's tests/rpmvercmp.at (rpm-software-management/rpm,
# including the caret and tilde+caret blocks of newer rpm).
# ---------------------------------------------------------------------------
RPMVERCMP_AT = [
    ("1.0", "1.0", 0), ("1.0", "2.0", -1), ("2.0", "1.0", 1),
    ("2.0.1", "2.0.1", 0), ("2.0", "2.0.1", -1), ("2.0.1", "2.0", 1),
    ("2.0.1a", "2.0.1a", 0), ("2.0.1a", "2.0.1", 1), ("2.0.1", "2.0.1a", -1),
    ("5.5p1", "5.5p1", 0), ("5.5p1", "5.5p2", -1), ("5.5p2", "5.5p1", 1),
    ("5.5p10", "5.5p10", 0), ("5.5p1", "5.5p10", -1), ("5.5p10", "5.5p1", 1),
    ("10xyz", "10.1xyz", -1), ("10.1xyz", "10xyz", 1),
    ("xyz10", "xyz10", 0), ("xyz10", "xyz10.1", -1), ("xyz10.1", "xyz10", 1),
    ("xyz.4", "xyz.4", 0), ("xyz.4", "8", -1), ("8", "xyz.4", 1),
    ("xyz.4", "2", -1), ("2", "xyz.4", 1),
    ("5.5p2", "5.6p1", -1), ("5.6p1", "5.5p2", 1),
    ("5.6p1", "6.5p1", -1), ("6.5p1", "5.6p1", 1),
    ("6.0.rc1", "6.0", 1), ("6.0", "6.0.rc1", -1),
    ("10b2", "10a1", 1), ("10a2", "10b2", -1),
    ("1.0aa", "1.0aa", 0), ("1.0a", "1.0aa", -1), ("1.0aa", "1.0a", 1),
    ("10.0001", "10.0001", 0), ("10.0001", "10.1", 0), ("10.1", "10.0001", 0),
    ("10.0001", "10.0039", -1), ("10.0039", "10.0001", 1),
    ("4.999.9", "5.0", -1), ("5.0", "4.999.9", 1),
    ("20101121", "20101121", 0), ("20101121", "20101122", -1), ("20101122", "20101121", 1),
    ("2_0", "2_0", 0), ("2.0", "2_0", 0), ("2_0", "2.0", 0),
    # RhBug:178798
    ("a", "a", 0), ("a+", "a+", 0), ("a+", "a_", 0), ("a_", "a+", 0),
    ("+a", "+a", 0), ("+a", "_a", 0), ("_a", "+a", 0),
    ("+_", "+_", 0), ("_+", "+_", 0), ("_+", "_+", 0), ("+", "_", 0), ("_", "+", 0),
    # tilde
    ("1.0~rc1", "1.0~rc1", 0), ("1.0~rc1", "1.0", -1), ("1.0", "1.0~rc1", 1),
    ("1.0~rc1", "1.0~rc2", -1), ("1.0~rc2", "1.0~rc1", 1),
    ("1.0~rc1~git123", "1.0~rc1~git123", 0), ("1.0~rc1~git123", "1.0~rc1", -1),
    ("1.0~rc1", "1.0~rc1~git123", 1),
    # caret
    ("1.0^", "1.0^", 0), ("1.0^", "1.0", 1), ("1.0", "1.0^", -1),
    ("1.0^git1", "1.0^git1", 0), ("1.0^git1", "1.0", 1), ("1.0", "1.0^git1", -1),
    ("1.0^git1", "1.0^git2", -1), ("1.0^git2", "1.0^git1", 1),
    ("1.0^git1", "1.01", -1), ("1.01", "1.0^git1", 1),
    ("1.0^20160101", "1.0^20160101", 0), ("1.0^20160101", "1.0.1", -1),
    ("1.0.1", "1.0^20160101", 1),
    ("1.0^20160101^git1", "1.0^20160101^git1", 0),
    ("1.0^20160102", "1.0^20160101^git1", 1), ("1.0^20160101^git1", "1.0^20160102", -1),
    # tilde and caret
    ("1.0~rc1^git1", "1.0~rc1^git1", 0), ("1.0~rc1^git1", "1.0~rc1", 1),
    ("1.0~rc1", "1.0~rc1^git1", -1),
    ("1.0^git1~pre", "1.0^git1~pre", 0), ("1.0^git1", "1.0^git1~pre", 1),
    ("1.0^git1~pre", "1.0^git1", -1),
]


@pytest.mark.parametrize("a, b, expected", RPMVERCMP_AT)
def test_rpmvercmp_matches_rpm_test_suite(a, b, expected):
    assert kv.rpmvercmp(a, b) == expected


@pytest.mark.parametrize("a, b, expected", [
    # Documented oddities of rpm (commented out in rpmvercmp.at, RhBug:811992):
    # a letter glued to a number is a new, alpha segment that loses to a number.
    ("1b.fc17", "1.fc17", -1), ("1.fc17", "1b.fc17", 1),
    ("1g.fc17", "1.fc17", 1), ("1.fc17", "1g.fc17", -1),
    # Non-ASCII characters are separators, so these compare equal.
    (u"1.1.\u03b1", u"1.1.\u03b2", 0),
    # Numbers compare by value, not as text.
    ("1.9", "1.10", -1), ("2.0.10", "2.0.9", 1), ("9.al7", "10.al7", -1),
    # Kernel-shaped releases.
    ("26.al7", "25.8.al7", 1), ("9.al7", "7.14.al7", 1), ("513.5.1.el8_9", "513.el8", 1),
    ("150500.55.39", "150500.55.39.1", -1), ("1~bpo12+1", "1", -1),
])
def test_rpmvercmp_kernel_and_oddity_cases(a, b, expected):
    assert kv.rpmvercmp(a, b) == expected


# ---------------------------------------------------------------------------
# compare_evr
# ---------------------------------------------------------------------------
@pytest.mark.parametrize("a, b, expected", [
    ("4.19.91-26.al7", "4.19.91-25.8.al7", 1),
    ("4.19.91-26.al7", "4.19.91-26.1.al7", -1),
    ("4.19.24-9.al7", "4.19.24-7.14.al7", 1),
    ("4.19.24-9.al7", "4.19.24-9.al7", 0),
    ("5.10.134-16.al8", "4.19.91-27.al7", 1),           # version decides first
    ("4.18.0-513.5.1.el8_9", "4.18.0-513.el8", 1),
    ("5.14.21-150500.55.39", "5.14.21-150500.55.39.1", -1),
    ("6.12.12-1~bpo12+1", "6.12.12-1", -1),             # dpkg-like '~'
    ("6.1.64-1", "6.1.66-1", -1),
    ("5.15.0-1066.72~20.04.1", "5.15.0-1034.38", 1),
    ("1.0", "1.0-1", -1),                              # no release < any release
    ("a-b-c", "a-b-d", -1),                            # split at the LAST '-'
])
def test_compare_evr(a, b, expected):
    assert kv.compare_evr(a, b) == expected
    assert kv.compare_evr(b, a) == -expected


def test_compare_evr_rejects_non_strings():
    with pytest.raises(ValueError):
        kv.compare_evr(None, "1-1")


# ---------------------------------------------------------------------------
# in_range
# ---------------------------------------------------------------------------
ALIBABA_RANGE = [{"vendor": "alibaba", "min": "4.19.24-9.al7", "max": "4.19.91-26.al7"}]
UPSTREAM_5_6 = [{"vendor": "upstream", "min": "5.6.0", "max": "5.6.13"}]
DEBIAN_BUG_UPSTREAM = [{"vendor": "upstream", "min": "6.1.64", "max": "6.1.66"}]


@pytest.mark.parametrize("release, expected", [
    ("4.19.24-7.14.al7.x86_64", False),  # just below min
    ("4.19.24-9.al7.x86_64", True),      # at min (inclusive)
    ("4.19.57-15.1.al7.x86_64", True),   # inside
    ("4.19.91-22.fc.1.al7.x86_64", True),
    ("4.19.91-25.8.al7.x86_64", True),   # last build before max
    ("4.19.91-26.al7.x86_64", False),    # at max (exclusive)
    ("4.19.91-26.1.al7.x86_64", False),  # above
    ("5.10.134-16.al8.x86_64", False),
])
def test_in_range_alibaba_advisory(release, expected):
    assert kv.in_range(kv.identify(release), ALIBABA_RANGE) is expected


@pytest.mark.parametrize("release, expected", [
    ("5.6.12", True), ("5.6.0", True), ("5.6.13", False), ("5.7.0", False),
    ("5.5.19", False), ("5.6.0-rc7", False),
])
def test_in_range_upstream_on_mainline(release, expected):
    assert kv.in_range(kv.identify(release), UPSTREAM_5_6) is expected


def test_in_range_both_kinds_alibaba_rule():
    ranges = UPSTREAM_5_6 + ALIBABA_RANGE
    assert kv.in_range(kv.identify("4.19.57-15.1.al7.x86_64"), ranges) is True
    assert kv.in_range(kv.identify("4.19.91-26.al7.x86_64"), ranges) is False
    assert kv.in_range(kv.identify("5.6.12"), ranges) is True


@pytest.mark.parametrize("release", [
    "4.18.0-513.5.1.el8_9.x86_64", "5.14.0-362.8.1.el9_3.x86_64",
    "5.15.0-200.131.27.el9uek.x86_64", "5.14.21-150500.55.39-default",
])
def test_in_range_backport_vendor_with_only_upstream_ranges_is_unknown(release):
    # RHEL 4.18.0 "is in" 4.18.0..4.19 by its label, but that label means nothing.
    ranges = [{"vendor": "upstream", "min": "4.18.0", "max": "6.0.0"}]
    assert kv.in_range(kv.identify(release), ranges) is None


def test_in_range_other_vendor_range_does_not_apply():
    assert kv.in_range(kv.identify("4.18.0-513.5.1.el8_9.x86_64"), ALIBABA_RANGE) is None
    assert kv.in_range(kv.identify("6.1.0-14-amd64", PV_DEB_6_1_64), ALIBABA_RANGE) is None


@pytest.mark.parametrize("release, proc_version, expected", [
    ("6.1.0-14-amd64", PV_DEB_6_1_64, True),
    ("6.1.0-15-amd64", PV_DEB_6_1_66, False),
    ("6.1.0-17-amd64", PV_DEB_6_1_69, False),
    ("6.1.0-14-amd64", "", None),  # upstream unknown without /proc/version
])
def test_in_range_debian_6_1_64_bug(release, proc_version, expected):
    info = kv.identify(release, proc_version)
    assert kv.in_range(info, DEBIAN_BUG_UPSTREAM) is expected
    debian_range = [{"vendor": "debian", "min": "6.1.64-1", "max": "6.1.66-1"}]
    assert kv.in_range(info, debian_range) is expected


def test_in_range_debian_backport_tilde_sorts_before_release():
    info = kv.identify("6.12.12+bpo-cloud-amd64", PV_DEB_BPO_6_12)
    assert kv.in_range(info, [{"vendor": "debian", "max": "6.12.12-1"}]) is True
    assert kv.in_range(info, [{"vendor": "debian", "min": "6.12.12-1"}]) is False


def test_in_range_ubuntu_uses_signature_upstream():
    info = kv.identify("5.15.0-1066-aws", PV_U2004_AWS, SIG_U2004_AWS)
    assert kv.in_range(info, [{"vendor": "upstream", "min": "5.15.33"}]) is True
    assert kv.in_range(info, [{"vendor": "upstream", "max": "5.15.158"}]) is False
    no_sig = kv.identify("5.15.0-1066-aws", PV_U2004_AWS)
    assert kv.in_range(no_sig, [{"vendor": "upstream", "min": "5.15.33"}]) is None
    assert kv.in_range(no_sig, [{"vendor": "ubuntu", "min": "5.15.0-1000.1"}]) is None


def test_in_range_amazon_takes_upstream_and_vendor_ranges():
    info = kv.identify("5.10.201-191.748.amzn2.x86_64")
    assert kv.in_range(info, [{"vendor": "upstream", "min": "5.10.0", "max": "5.10.202"}]) is True
    assert kv.in_range(info, [{"vendor": "amazon", "max": "5.10.201-191.748.amzn2"}]) is False


def test_in_range_rhel_vendor_range_applies():
    info = kv.identify("4.18.0-513.5.1.el8_9.x86_64")
    ranges = UPSTREAM_5_6 + [{"vendor": "rhel", "min": "4.18.0-477.el8", "max": "4.18.0-553.el8"}]
    assert kv.in_range(info, ranges) is True


def test_in_range_suse_uname_drops_rpm_build_counter():
    # Known limitation: uname -r "…55.39" sorts before rpm's fixed "…55.39.1".
    info = kv.identify("5.14.21-150500.55.39-default")
    assert kv.in_range(info, [{"vendor": "suse", "max": "5.14.21-150500.55.39.1"}]) is True
    assert kv.in_range(info, [{"vendor": "suse", "max": "5.14.21-150500.55.39"}]) is False


def test_in_range_misc():
    info = kv.identify("5.6.12")
    assert kv.in_range(info, []) is None
    assert kv.in_range(info, [{"vendor": "upstream"}]) is True  # unbounded
    assert kv.in_range(info, [{"min": "5.6.0"}]) is True  # vendor defaults to upstream
    ali = kv.identify("4.19.57-15.1.al7.x86_64")
    assert kv.in_range(ali, [dict(ALIBABA_RANGE[0], vendor="Alibaba")]) is True
    assert kv.in_range(kv.identify("garbage"), UPSTREAM_5_6) is None


def test_in_range_bad_bound_raises_value_error():
    with pytest.raises(ValueError):
        kv.in_range(kv.identify("5.6.12"), [{"vendor": "upstream", "min": "five"}])
    with pytest.raises(ValueError):
        kv.in_range(kv.identify("4.19.91-26.al7.x86_64"), [{"vendor": "alibaab", "max": "5"}])


def test_in_range_vendor_none_means_upstream():
    assert kv.in_range(kv.identify("5.6.12"), [{"vendor": None, "max": "5.6.13"}]) is True


# ---------------------------------------------------------------------------
# Packaging constraints
# ---------------------------------------------------------------------------
def test_module_imports_no_project_code():
    path = os.path.join(REPO, "plugins", "module_utils", "kernel_version.py")
    with open(path) as handle:
        tree = ast.parse(handle.read())
    imported = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            imported.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import"
            imported.add(node.module.split(".")[0])
    assert imported - {"__future__", "typing"} == {"re"}  # (__future__: ansible-test's boilerplate for 2.15; typing: annotations)
