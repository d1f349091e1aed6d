"""plugins/module_utils/disk_formats.py on bytes: the CRC-32C of VHDX against the published check
value, and images too short for their own headers. The headers of real qemu-img output, whole
and damaged, are tested in tests/integration/test_image_facts.py."""

import pytest

from ext4audit.parsers import disk_formats


def reader(data):
    return lambda offset, length: data[offset:offset + length]


def test_crc32c_check_value():
    # the CRC catalogue's check value of CRC-32/ISCSI (Castagnoli), the one VHDX uses
    assert disk_formats.crc32c(b"123456789") == 0xE3069283


@pytest.mark.parametrize("data, message", [
    (b"QFI\xfb\0\0\0\x03", "the qcow2 header ends at byte 72"),
    (b"KDMV" + b"\0" * 60, "the VMDK sparse extent header ends at byte 512"),
    (b"vhdxfile" + b"\0" * 100, "the VHDX headers and region tables ends at byte 327680"),
    (b"\0" * 4096 + b"conectix" + b"\0" * 100, "VHD footer not at the file's last 512 bytes (found at byte 4096)"),
    (b"# Disk DescriptorFile\nRW 8 SPARSE \"other.vmdk\"\n", "a VMDK descriptor file: refused"),
])
def test_headers_cut_short_are_refused_naming_the_file(data, message):
    with pytest.raises(disk_formats.FormatError) as error:
        disk_formats.identify(reader(data), len(data), "/images/x.img")
    assert str(error.value).startswith("/images/x.img: ") and message in str(error.value)


def test_anything_else_is_raw_and_read_in_place():
    data = b"\0" * 510 + b"\x55\xaa" + b"\0" * 4096
    assert disk_formats.identify(reader(data), len(data), "/images/x.img") == {
        "format": "raw", "subformat": None, "data_size": len(data)}
