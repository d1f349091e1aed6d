"""ext4audit/rules/boot_tools.py: what an image's GRUB and e2fsck read, by the versions in its dpkg
database (rules/boot_tools.yml). End to end on real images: tests/integration/test_image_facts.py."""

import pytest

from ext4audit.rules import boot_tools
from ext4audit.parsers.ext4_parsers.os_files import parse_dpkg_status


@pytest.mark.parametrize("version, numbers", [
    ("2.06-13+deb12u1", (2, 6)), ("1:2.12-1ubuntu7", (2, 12)), ("2.12~rc1-1", (2, 12)),
    ("1.47.0-2", (1, 47, 0)), ("1.46.5-2ubuntu1.2", (1, 46, 5)), ("2.06", (2, 6)),
    ("1:2.02+dfsg1-20+deb10u4", (2, 2)), ("git20240101-1", None),
])
def test_a_package_version_is_judged_by_its_upstream_part(version, numbers):
    assert boot_tools.upstream_version(version) == numbers


@pytest.mark.parametrize("tool, packages, features, expected", [
    ("grub", {"grub-common": "2.06-13"}, ["metadata_csum_seed", "large_dir", "orphan_file", "extent"],
     ("2.06-13", ["metadata_csum_seed", "large_dir"])),  # orphan_file is compat: GRUB never minds it
    ("grub", {"grub-common": "2.12-1"}, ["metadata_csum_seed", "large_dir", "casefold"], ("2.12-1", ["casefold"])),
    ("grub", {"grub2-common": "2.06-3"}, ["needs_recovery", "mmp", "64bit", "flex_bg"], ("2.06-3", [])),
    ("grub", {"e2fsprogs": "1.47.0-2"}, ["inline_data"], ("", [])),  # no GRUB in the image
    ("grub", None, ["inline_data"], (None, None)),  # no dpkg database: unknown
    ("grub", {"grub-common": "snapshot"}, ["inline_data"], ("snapshot", None)),
    ("e2fsprogs", {"e2fsprogs": "1.46.5-2"}, ["orphan_file", "orphan_present", "fast_commit"],
     ("1.46.5-2", ["orphan_file", "orphan_present"])),
    ("e2fsprogs", {"e2fsprogs": "1.42.9-3"}, ["metadata_csum", "extent"], ("1.42.9-3", ["metadata_csum"])),
    ("e2fsprogs", {"e2fsprogs": "1.47.0-2"}, ["orphan_file"], ("1.47.0-2", [])),
])
def test_what_each_tool_cannot_read(tool, packages, features, expected):
    assert boot_tools.unreadable(tool, features, packages) == expected


def test_grub_reads_from_the_boot_filesystem():
    assert boot_tools.boot_mountpoint([{"mountpoint": "/"}, {"mountpoint": "/boot"}]) == "/boot"
    assert boot_tools.boot_mountpoint([{"mountpoint": "/"}, {"mountpoint": "/boot/efi"}]) == "/"


def test_the_dpkg_database_parser_reads_only_installed_packages():
    text = ("Package: grub-common\nStatus: install ok installed\nVersion: 2.06-13\nDescription: x\n"
            " Version: 9.9 (a continuation line)\n\n"
            "Package: e2fsprogs\nStatus: deinstall ok config-files\nVersion: 1.46.0-1\n\n"
            "Package: grub2-common\nStatus: install ok half-configured\nVersion: 2.12-1\n")
    assert parse_dpkg_status(text, ("grub-common", "grub2-common", "e2fsprogs")) == {
        "grub-common": "2.06-13"}


@pytest.mark.parametrize("change, message", [
    (lambda t: t.replace("large_dir: \"2.12\"", "large_dir: soon"), "grub.reads_since.large_dir 'soon' is not a release"),
    (lambda t: t.replace("reads: [filetype,", "reads: [orphan_file, filetype,"),
     "grub: 'orphan_file' is not one of its incompat_features"),
    (lambda t: t.replace("schema: ext4-fleet-audit/boot-tools/v1", "schema: other/v1"), r"\$\.schema"),
    (lambda t: t.replace("  packages: [e2fsprogs]\n", ""), "packages"),
])
def test_a_broken_data_file_names_the_file_and_field(tmp_path, change, message):
    path = tmp_path / "boot_tools.yml"
    path.write_text(change(open(boot_tools.DATA_FILE).read()))
    with pytest.raises(boot_tools.BootToolsError, match=message) as info:
        boot_tools.load(str(path))
    assert str(path) in str(info.value)
