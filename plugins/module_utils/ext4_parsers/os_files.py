# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""What a system's own files say about it: os-release, cloud build info and image identity, the dpkg
status database, GRUB's first kernel, and the order of kernel releases.
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

import re


def parse_os_release(text):
    """Parse /etc/os-release (shell-style KEY=value, optionally quoted)."""
    result = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition("=")
        if sep and key and not key.startswith("#"):
            value = value.strip()
            if len(value) >= 2 and value[0] == value[-1] and value[0] in "\"'":
                value = value[1:-1]
            result[key] = value
    return result


# A build date in an image's identity: YYYYMMDD (Amazon's image_date adds hhmmss) or YYYY-MM-DD,
# not inside a longer number.
_BUILD_DATE = re.compile(r"(?<![0-9])((?:19|20)[0-9]{2})(-?)(0[1-9]|1[0-2])\2(0[1-9]|[12][0-9]|3[01])"
                         r"(?:[0-9]{6})?(?![0-9])")


def parse_build_info(text: str) -> dict:
    """Parse Ubuntu cloud images' /etc/cloud/build.info (YAML-like "key: value" lines)."""
    result = {}
    for line in text.splitlines():
        key, sep, value = line.strip().partition(":")
        if sep and key and not key.startswith("#"):
            result[key.strip()] = value.strip().strip("\"'")
    return result


def image_identity(os_release: dict, image_id: dict, build_info: dict, file_name: str) -> dict:
    """The identity of a disk image, from what its distribution records (each dict may be None):
    os-release's IMAGE_ID, IMAGE_VERSION and BUILD_ID (systemd's os-release(5)); /etc/image-id
    (Amazon Linux: image_name, image_file, image_date as YYYYMMDDhhmmss UTC); Ubuntu cloud
    images' /etc/cloud/build.info (build_name, serial YYYYMMDD[.N]). The build date is the first
    date found, in that order, then in the names (Alibaba's are <os>_<version>_..._alibase_YYYYMMDD.vhd)
    and last in the image file's own name; build_date_source says which field it came from."""
    os_release, image_id, build_info = os_release or {}, image_id or {}, build_info or {}
    fields = [("os-release IMAGE_ID", os_release.get("IMAGE_ID")),
              ("/etc/image-id image_name", image_id.get("image_name")),
              ("/etc/cloud/build.info build_name", build_info.get("build_name"))]
    name_source, name = next(((source, value) for source, value in fields if value), (None, None))
    dated = [("/etc/image-id image_date", image_id.get("image_date")),
             ("/etc/cloud/build.info serial", build_info.get("serial")),
             ("os-release BUILD_ID", os_release.get("BUILD_ID")),
             ("os-release IMAGE_VERSION", os_release.get("IMAGE_VERSION")),
             ("/etc/image-id image_file", image_id.get("image_file"))] + fields + [("image file name", file_name)]
    build_date, date_source = None, None
    for source, value in dated:
        match = _BUILD_DATE.search(value or "")
        if match:
            build_date, date_source = "%s-%s-%s" % (match.group(1), match.group(3), match.group(4)), source
            break
    return {"name": name, "name_source": name_source,
            "version": os_release.get("IMAGE_VERSION") or image_id.get("image_version"),
            "build_id": os_release.get("BUILD_ID") or build_info.get("serial"),
            "vendor_image_id": image_id.get("image_file") or image_id.get("image_id") or image_id.get("image_name"),
            "build_date": build_date, "build_date_source": date_source}


def parse_dpkg_status(text, packages):
    """The installed version of each of packages in a dpkg status database (/var/lib/dpkg/status:
    RFC 822-style stanzas separated by blank lines); a package not installed is left out."""
    wanted, found = frozenset(packages), {}
    for stanza in re.split(r"\n\s*\n", text):
        fields = {}
        for line in stanza.splitlines():
            if line[:1] not in (" ", "\t"):  # a continuation line belongs to a field not read here
                key, sep, value = line.partition(":")
                if sep:
                    fields[key.strip().lower()] = value.strip()
        name = fields.get("package")
        if name in wanted and fields.get("status", "").endswith(" installed") and fields.get("version"):
            found[name] = fields["version"]
    return found


def parse_grub_first_kernel(text):
    """The kernel path of grub.cfg's first `linux` line (GRUB boots the first entry by default)."""
    match = re.search(r"^\s*linux(?:efi|16)?\s+(\S+)", text, re.M)
    return match.group(1) if match else None


def release_sort_key(release):
    """Orders kernel releases by their numbers: 6.12.57+deb12-cloud-amd64 after 6.1.0-28-cloud-amd64."""
    return [int(number) for number in re.findall(r"\d+", release)]
