"""rules/removed_mount_options.yml and ext4audit/rules/mount_options.py: which fstab options a kernel
refuses, at the release boundary, for vendors that backport, and a broken data file's errors.
(tests/integration/test_removed_mount_options.py checks the data against this machine's kernel.)"""

import pytest

from ext4audit.rules import mount_options
from ext4audit.parsers import kernel_version


def kernel(release, proc_version="", signature=""):
    return kernel_version.identify(release, proc_version, signature)


def refused(tokens, info):
    found, unknown = mount_options.refused(tokens, info)
    return [item["option"] for item in found], [item["option"] for item in unknown]


@pytest.mark.parametrize("info, expected", [
    (kernel("6.0.19"), ([], [])),                       # the last release before the removal mounts them
    (kernel("6.1.0-rc1"), (["noacl", "nouser_xattr"], [])),
    (kernel("6.18.44-fc-v595"), (["noacl", "nouser_xattr"], [])),
    (kernel("6.1.0-40-amd64", "Linux version 6.1.0-40-amd64 #1 SMP Debian 6.1.153-1 (2025-09-20)"),
     (["noacl", "nouser_xattr"], [])),
    (kernel("5.15.0-1034-aws", "", "Ubuntu 5.15.0-1034.38-aws 5.15.98"), ([], [])),
    (kernel("5.10.201-191.748.amzn2.x86_64"), ([], [])),
    (kernel("5.14.0-427.13.1.el9_4.x86_64"), ([], ["noacl", "nouser_xattr"])),   # RHEL may backport it
    (kernel("4.18.0-513.5.1.el8_9.x86_64"), ([], ["noacl", "nouser_xattr"])),
])
def test_which_kernels_refuse_noacl_and_nouser_xattr(info, expected):
    assert refused(["defaults", "noacl", "nouser_xattr", "acl", "nobh", "errors=remount-ro"], info) == expected


def test_an_unknown_upstream_version_is_unknown_with_the_reason():
    found, unknown = mount_options.refused(["noacl"], {"release": "weird", "upstream": None})
    assert found == [] and unknown[0]["why"] == "kernel weird: upstream version unknown"
    assert mount_options.refused(["defaults"], {"release": "weird", "upstream": None}) == ([], [])
    assert mount_options.refused(None, kernel("6.18.44")) == ([], [])


def test_the_shipped_data_cites_the_removing_commit():
    entry, = [e for e in mount_options.load()["removed"] if "noacl" in e["options"]]
    assert entry["removed_in"] == "6.1.0-rc1" and entry["commit"].startswith("2d544ec923db")
    assert any("git.kernel.org" in ref and entry["commit"] in ref for ref in entry["references"])


@pytest.mark.parametrize("text, message", [
    ("schema: ext4-fleet-audit/removed-mount-options/v1\nremoved:\n  - {options: [x], removed_in: soon, "
     "commit: 2d544ec923db, refused_as: r, note: n, references: ['https://x']}\n",
     r"removed\[0\].removed_in 'soon' is not an upstream version"),
    ("schema: ext4-fleet-audit/removed-mount-options/v1\nremoved:\n  - {options: [x], removed_in: '6.1', "
     "commit: 2d544ec923db, refused_as: r, note: n, references: ['https://x'], remvoed: 1}\n", r"remvoed"),
    ("schema: ext4-fleet-audit/removed-mount-options/v1\nremoved:\n  - {options: [], removed_in: '6.1', "
     "commit: 2d544ec923db, refused_as: r, note: n, references: ['https://x']}\n", r"options"),
    ("removed: [\n", "cannot read"),
])
def test_a_broken_data_file_names_the_file_and_field(tmp_path, text, message):
    path = tmp_path / "removed_mount_options.yml"
    path.write_text(text)
    with pytest.raises(mount_options.MountOptionsError, match=message) as info:
        mount_options.load(str(path))
    assert str(path) in str(info.value)
