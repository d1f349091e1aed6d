"""Property-based tests (hypothesis) of every parser: plugins/module_utils/ext4_parsers.py,
plugins/module_utils/kernel_version.py and the waiver loader.

Each parser, on any input, returns a parsed value or raises its documented error (ParseError,
ValueError, WaiverError): never another exception. Where a format can be written back, the
round trip holds: a mount point with spaces, tabs, newlines, backslashes, markup or bytes that
are not UTF-8, octal-escaped as the kernel does, decodes back to the original.

Derandomized (the same examples every run, so CI cannot fail by luck); EXT4AUDIT_HYPOTHESIS=explore
draws new examples each run, for hunting.
"""

import codecs
import datetime
import os
import re
import string

import yaml
from hypothesis import HealthCheck, example, given, settings, strategies as st

from ext4audit.parsers import kernel_version as kv
from ext4audit.parsers.ext4_parsers.common import ParseError, split_options, unescape_octal
from ext4audit.parsers.ext4_parsers.disk_image import (
    parse_bzimage_version, parse_debugfs_fast_link, parse_debugfs_ls, parse_partition_table, plain_image_path,
)
from ext4audit.parsers.ext4_parsers.fstab import (
    fstab_drift, fstab_mount_tokens, fstab_spec_target, parse_fstab,
)
from ext4audit.parsers.ext4_parsers.kernel_defaults import infer_options
from ext4audit.parsers.ext4_parsers.mounts import NEGATIONS, option_map, parse_ext4_options, parse_mountinfo
from ext4audit.parsers.ext4_parsers.os_files import (
    parse_grub_first_kernel, parse_os_release, release_sort_key,
)
from ext4audit.parsers.ext4_parsers.superblock import (
    SUPERBLOCK_DEFAULT_OPTIONS, e2fsprogs_default_journal_blocks, ext_fstype, parse_dumpe2fs, parse_dumpe2fs_identity, parse_jbd2_info, parse_size, superblock_option_map,
)
from ext4audit.rules import waivers

settings.register_profile("ci", max_examples=100, deadline=None, derandomize=True, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("explore", max_examples=3000, deadline=None, database=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.load_profile("explore" if os.environ.get("EXT4AUDIT_HYPOTHESIS") == "explore" else "ci")

# ------------------------------------------------------------------ strategies
# Pieces of hostile names: the kernel's escaped characters, markup, shell syntax, separators the
# parsers split on, line breaks str.splitlines() knows but the kernel does not escape, bytes that
# are not UTF-8 (alone, truncated sequences) and valid multi-byte characters.
NAME_PIECES = [b" ", b"\t", b"\n", b"\\", b"\\040", b" - ", b"-", b",", b":", b"=", b"#", b"<script>", b"&amp;",
               b"'", b'"', b"$(id)", b"`uname`", b"\xff", b"\xfe", b"\xc3", b"\xe2\x82", b"\x80", b"\xc3\xa9",
               b"\xe2\x80\xa8", b"\xc2\x85", b"\r", b"\x0b", b"\x0c", b"\x1c", b"\x1e", b"\x01", b"\x7f",
               b"x", b"data", b"0"]
name_bytes = st.one_of(
    st.lists(st.sampled_from(NAME_PIECES), min_size=1, max_size=8).map(b"".join),
    st.binary(min_size=1, max_size=24),
).map(lambda raw: raw.replace(b"\0", b"_").replace(b"/", b"_"))
path_bytes = st.lists(name_bytes, min_size=1, max_size=3).map(lambda parts: b"/" + b"/".join(parts))
any_text = st.one_of(st.text(max_size=300), st.binary(max_size=300).map(lambda b: b.decode("utf-8", "surrogateescape")))
option_token = st.builds(lambda name, value: name + ("=" + value if value else ""),
                         st.text(string.ascii_lowercase + "_", min_size=1, max_size=14),
                         st.one_of(st.just(""), st.text(string.ascii_letters + string.digits + "_.:-", max_size=10)))


def kernel_escape(raw):
    """What the kernel writes for a name in mountinfo and fstab wants: space, tab, newline and
    backslash as \\ooo (fs/proc_namespace.c, seq_escape with " \\t\\n\\\\")."""
    return b"".join(b"\\%03o" % c if c in b" \t\n\\" else bytes([c]) for c in raw)


@st.composite
def mutated(draw, text_strategy):
    """Valid documents, then cut short, with a line dropped or doubled, a character replaced or
    text inserted (lines as str.splitlines() cuts them)."""
    text = draw(text_strategy)
    kind = draw(st.sampled_from(["keep", "truncate", "drop", "dup", "flip", "insert"]))
    lines = text.splitlines(True)
    if kind == "truncate" and text:
        return text[:draw(st.integers(0, len(text) - 1))]
    if kind in ("drop", "dup") and lines:
        i = draw(st.integers(0, len(lines) - 1))
        return "".join(lines[:i] + ([lines[i]] * 2 if kind == "dup" else []) + lines[i + 1:])
    if kind == "flip" and text:
        i = draw(st.integers(0, len(text) - 1))
        return text[:i] + draw(st.characters()) + text[i + 1:]
    if kind == "insert":
        i = draw(st.integers(0, len(text)))
        return text[:i] + draw(st.text(max_size=20)) + text[i:]
    return text


# ------------------------------------------------------------------ mountinfo
@st.composite
def mountinfo_entry(draw):
    return {"mount_id": draw(st.integers(0, 10 ** 6)), "parent_id": draw(st.integers(0, 10 ** 6)),
            "major": draw(st.integers(0, 4095)), "minor": draw(st.integers(0, 2 ** 20 - 1)),
            "root": draw(st.one_of(st.just(b"/"), path_bytes)), "mountpoint": draw(path_bytes),
            "mount_options": draw(st.lists(option_token, min_size=1, max_size=4)),
            "optional": draw(st.lists(st.sampled_from(["shared:1", "master:7", "propagate_from:2", "unbindable"]),
                                      max_size=2)),
            "fstype": draw(st.sampled_from(["ext4", "ext3", "ext2", "tmpfs", "fuse.sshfs", "nfs4", "proc"])),
            "source": draw(st.one_of(st.just(b"none"), path_bytes)),
            "super_options": draw(st.lists(option_token, max_size=4))}


def mountinfo_line(entry):
    return b" ".join([str(entry["mount_id"]).encode(), str(entry["parent_id"]).encode(),
                      ("%d:%d" % (entry["major"], entry["minor"])).encode(), kernel_escape(entry["root"]),
                      kernel_escape(entry["mountpoint"]), ",".join(entry["mount_options"]).encode()]
                     + [o.encode() for o in entry["optional"]]
                     + [b"-", entry["fstype"].encode(), kernel_escape(entry["source"]),
                        ",".join(entry["super_options"]).encode() or b"rw"])


def shown(raw):
    """The documented text form of a name: UTF-8, with bytes that are not UTF-8 as \\xNN."""
    return raw.decode("utf-8", "backslashreplace")


@given(st.lists(mountinfo_entry(), min_size=1, max_size=5),
       st.sampled_from(["surrogateescape", "backslashreplace"]))
@example([{"mount_id": 30, "parent_id": 1, "major": 7, "minor": 3, "root": b"/", "optional": [],
           "mountpoint": b"/mnt/odd <script>'$(id)`\n\xff\\name\xe2\x80\xa8\r\x0c", "mount_options": ["rw"],
           "fstype": "ext4", "source": b"/dev/loop3", "super_options": ["rw"]}], "surrogateescape")
def test_mountinfo_round_trip_of_hostile_names(entries, decoding):
    # surrogateescape: how the probe reads mountinfo; backslashreplace: how ext4_facts reads it
    text = b"\n".join(mountinfo_line(e) for e in entries).decode("utf-8", decoding) + "\n"
    parsed = parse_mountinfo(text)
    assert len(parsed) == len(entries)
    for got, want in zip(parsed, entries):
        for key in ("mountpoint", "root", "source"):
            assert got[key] == shown(want[key]), key
            if b"\\" not in want[key]:  # the original bytes come back from the text form
                assert codecs.escape_decode(got[key].encode("utf-8"))[0] == want[key]
        for key in ("mount_id", "parent_id", "major", "minor", "mount_options", "optional", "fstype"):
            assert got[key] == want[key], key
        assert got["super_options"] == (want["super_options"] or ["rw"])
        assert "\udcff" not in got["mountpoint"]  # never a lone surrogate (JSON and XML could not hold it)


utf8_path = st.lists(st.one_of(st.sampled_from([" ", "\t", "\n", "\\", "\\040", "<script>", "$(id)", "`", "'", '"',
                                                "\u2028", "\r", "\u00e9", "\u2603", "\U0001F600", " - "]),
                                st.text(max_size=8)), min_size=1, max_size=6).map(
    lambda parts: "/" + "".join(parts).replace("\0", "_"))


@given(utf8_path)
def test_utf8_names_decode_to_exactly_the_original(name):
    raw = name.encode("utf-8")
    assert unescape_octal(kernel_escape(raw).decode("utf-8")) == name
    assert unescape_octal(kernel_escape(raw)) == name


@given(any_text)
def test_unescape_octal_never_raises(text):
    assert isinstance(unescape_octal(text), str)


@given(mutated(st.lists(mountinfo_entry(), min_size=1, max_size=4).map(
    lambda es: b"\n".join(mountinfo_line(e) for e in es).decode("utf-8", "backslashreplace"))))
def test_mountinfo_mutated_parses_or_says_which_line(text):
    try:
        parsed = parse_mountinfo(text)
    except ParseError as exc:
        assert "mountinfo line" in str(exc)
    else:
        assert all(isinstance(m["mountpoint"], str) and isinstance(m["major"], int) for m in parsed)


@given(any_text)
def test_mountinfo_garbage_parses_or_raises_parse_error(text):
    try:
        parse_mountinfo(text)
    except ParseError:
        pass


# ------------------------------------------------------------------ /proc/fs/ext4/<dev>/options
@given(st.sampled_from(["rw", "ro"]), st.lists(option_token, max_size=20))
def test_ext4_options_round_trip(mode, options):
    assert parse_ext4_options("\n".join([mode] + options) + "\n") == [mode] + options


@given(st.one_of(any_text, mutated(st.lists(option_token, max_size=10).map(lambda o: "\n".join(["rw"] + o)))))
def test_ext4_options_garbage(text):
    try:
        options = parse_ext4_options(text)
    except ParseError:
        return
    assert options[0] in ("rw", "ro") and all(" " not in o for o in options)


@given(st.lists(st.one_of(option_token, st.sampled_from(sorted(NEGATIONS)), st.text(max_size=12)), max_size=12))
def test_option_map_and_inferred_options_never_raise(options):
    mapped = option_map(options)
    assert all(isinstance(k, str) for k in mapped)
    for name, value in mapped.items():
        assert isinstance(value, (bool, str))
    assert isinstance(infer_options(None, options, "6.1.0"), list)


@given(st.sampled_from(sorted(NEGATIONS)))
def test_negations_map_to_false(token):
    assert option_map([token]) == {NEGATIONS[token]: False}


# ------------------------------------------------------------------ fstab
@st.composite
def fstab_entry(draw):
    return {"spec": draw(st.one_of(st.sampled_from([b"/dev/sda1", b"UUID=0b9f-11", b"LABEL=data"]), path_bytes)),
            "mountpoint": draw(path_bytes), "fstype": draw(st.sampled_from(["ext4", "xfs", "nfs", "swap"])),
            "options": draw(st.lists(option_token, min_size=1, max_size=5))}


@given(st.lists(fstab_entry(), min_size=1, max_size=5))
def test_fstab_round_trip(entries):
    text = b"# a comment\n\n" + b"\n".join(
        b"%s %s\t%s %s 0 2" % (kernel_escape(e["spec"]), kernel_escape(e["mountpoint"]), e["fstype"].encode(),
                                ",".join(e["options"]).encode()) for e in entries)
    parsed, errors = parse_fstab(text.decode("utf-8", "backslashreplace"))
    assert errors == []
    assert [(e["spec"], e["mountpoint"], e["fstype"], e["options"]) for e in parsed] == [
        (shown(e["spec"]), shown(e["mountpoint"]), e["fstype"], e["options"]) for e in entries]


@given(any_text, st.lists(option_token, max_size=5))
def test_fstab_garbage_gives_entries_and_errors(text, effective):
    entries, errors = parse_fstab(text)
    assert all(isinstance(e, str) for e in errors)
    for entry in entries:
        drift = fstab_drift(entry["options"], option_map(effective), set(effective))
        assert isinstance(drift, list)
        assert isinstance(fstab_mount_tokens(entry["options"]), list)
        assert isinstance(fstab_spec_target(entry["spec"]), tuple)


# ------------------------------------------------------------------ dumpe2fs -h
FEATURES = ["has_journal", "ext_attr", "resize_inode", "dir_index", "filetype", "extent", "64bit", "flex_bg",
            "sparse_super", "large_file", "huge_file", "dir_nlink", "extra_isize", "metadata_csum", "fast_commit"]


@st.composite
def superblock(draw):
    block_size = draw(st.sampled_from([1024, 2048, 4096, 65536]))
    return {"block_size": block_size, "block_count": draw(st.integers(64, 2 ** 40)),
            "inode_count": draw(st.integers(16, 2 ** 32 - 1)), "inode_size": draw(st.sampled_from([128, 256, 512, 1024])),
            "features": draw(st.lists(st.sampled_from(FEATURES), unique=True)),
            "journal_blocks": draw(st.one_of(st.none(), st.integers(1024, 2 ** 20))),
            "total_fields": draw(st.booleans()), "raid_stride": draw(st.integers(0, 4096)),
            "errors": draw(st.sampled_from(["Continue", "Remount read-only", "Panic"])),
            "default_mount_options": draw(st.lists(st.sampled_from(sorted(SUPERBLOCK_DEFAULT_OPTIONS)), unique=True)),
            "mount_options": draw(st.lists(option_token, max_size=3))}


def dumpe2fs_text(sb):
    lines = ["dumpe2fs 1.47.0 (5-Feb-2023)", "Filesystem volume name:   <none>",
             "Filesystem features:      %s" % (" ".join(sb["features"]) or "(none)"),
             "Default mount options:    %s" % (" ".join(sb["default_mount_options"]) or "(none)"),
             "Filesystem state:         clean", "Errors behavior:          %s" % sb["errors"],
             "Inode count:              %d" % sb["inode_count"], "Block count:              %d" % sb["block_count"],
             "Block size:               %d" % sb["block_size"], "Inode size:\t          %d" % sb["inode_size"],
             "RAID stride:              %d" % sb["raid_stride"],
             "Mount options:            %s" % (",".join(sb["mount_options"]) or "(none)")]
    if sb["journal_blocks"]:
        size = sb["journal_blocks"] * sb["block_size"]
        human = "%dM" % (size >> 20) if size >= 8 << 20 else "%dk" % (size >> 10)
        if sb["total_fields"]:  # e2fsprogs >= 1.46
            lines += ["Total journal size:       %s" % human, "Total journal blocks:     %d" % sb["journal_blocks"]]
        else:
            lines += ["Journal size:             %s" % human, "Journal length:           %d" % sb["journal_blocks"]]
    return "\n".join(lines) + "\n"


@given(superblock())
def test_dumpe2fs_round_trip(sb):
    parsed = parse_dumpe2fs(dumpe2fs_text(sb))
    assert parsed["block_size"] == sb["block_size"] and parsed["block_count"] == sb["block_count"]
    assert parsed["inode_size"] == sb["inode_size"] and parsed["inode_count"] == sb["inode_count"]
    assert parsed["features"] == sb["features"]
    assert parsed["default_mount_options"] == sb["default_mount_options"]
    assert parsed["mount_options"] == sb["mount_options"]
    assert parsed["raid_stride"] == sb["raid_stride"]
    assert parsed["errors_behavior"] == sb["errors"].lower()
    want = sb["journal_blocks"] * sb["block_size"] if sb["journal_blocks"] else None
    assert parsed["journal_bytes"] == want and parsed["journal_blocks"] == sb["journal_blocks"]
    assert parsed["e2fsprogs_fields"] == ("total" if sb["total_fields"] and sb["journal_blocks"] else "legacy")
    assert isinstance(superblock_option_map(parsed), dict)
    assert isinstance(infer_options(parsed, sb["mount_options"], "6.1.0"), list)
    identity = parse_dumpe2fs_identity(dumpe2fs_text(sb))
    assert identity == {"uuid": None, "label": None}
    assert ext_fstype(parsed["features"]) in ("ext2", "ext3", "ext4")


@given(st.one_of(any_text, mutated(superblock().map(dumpe2fs_text))))
@example("Block size: \u00b2\nFilesystem features: (none)\n")  # str.isdigit() is True, int() refuses it
@example("Block size: 4096\nFilesystem features: x\nJournal size: \u00b2M\n")
def test_dumpe2fs_garbage_parses_or_raises_parse_error(text):
    try:
        sb = parse_dumpe2fs(text)
    except ParseError:
        return
    assert sb["block_size"] is None or isinstance(sb["block_size"], int)
    assert isinstance(infer_options(sb, [], "6.1.0"), list)
    assert isinstance(parse_dumpe2fs_identity(text), dict)


@given(st.text(max_size=20))
def test_parse_size_parses_or_raises_parse_error(text):
    try:
        assert parse_size(text) >= 0
    except ParseError:
        pass


@given(st.integers(0, 2 ** 48))
def test_default_journal_blocks(block_count):
    blocks = e2fsprogs_default_journal_blocks(block_count)
    assert blocks is None or blocks >= 1024


# ------------------------------------------------------------------ jbd2 info
@st.composite
def jbd2_info(draw):
    return {"transactions": draw(st.integers(0, 10 ** 9)), "requested": draw(st.one_of(st.none(), st.integers(0, 10 ** 6))),
            "max_transaction_blocks": draw(st.integers(1, 10 ** 6)),
            "stats": draw(st.lists(st.tuples(st.integers(0, 10 ** 6), st.sampled_from(["ms", "us", ""]),
                                             st.from_regex(r"\A[a-z][a-z ]{0,30}[a-z]\Z")),
                                   max_size=8, unique_by=lambda s: (re.sub(r"[^a-z0-9]+", "_", s[2]), s[1])))}


def jbd2_text(info):
    head = "%d transactions%s, each up to %d blocks" % (
        info["transactions"], " (%d requested)" % info["requested"] if info["requested"] is not None else "",
        info["max_transaction_blocks"])
    return "\n".join([head, "average: "] + ["  %d%s %s" % s for s in info["stats"]]) + "\n"


@given(jbd2_info())
def test_jbd2_round_trip(info):
    parsed = parse_jbd2_info(jbd2_text(info))
    assert parsed["transactions"] == info["transactions"] and parsed["requested"] == info["requested"]
    assert parsed["max_transaction_blocks"] == info["max_transaction_blocks"]
    for value, unit, label in info["stats"]:
        key = re.sub(r"[^a-z0-9]+", "_", label).strip("_") + ("_" + unit if unit else "")
        assert parsed[key] == value


@given(st.one_of(any_text, mutated(jbd2_info().map(jbd2_text))))
def test_jbd2_garbage_parses_or_raises_parse_error(text):
    try:
        info = parse_jbd2_info(text)
    except ParseError:
        return
    assert all(isinstance(v, int) or v is None for v in info.values())


# ------------------------------------------------------------------ os-release
@given(st.dictionaries(st.from_regex(r"\A[A-Z][A-Z_]{0,12}\Z"),
                       st.text(alphabet=string.ascii_letters + string.digits + " .-_()/", max_size=30).map(str.strip),
                       max_size=6),
       st.sampled_from(['"', "'", ""]))
def test_os_release_round_trip(fields, quote):
    text = "# comment\n" + "\n".join("%s=%s%s%s" % (k, quote, v, quote) for k, v in fields.items()) + "\n"
    assert parse_os_release(text) == fields


@given(any_text)
def test_os_release_and_text_helpers_never_raise(text):
    assert isinstance(parse_os_release(text), dict)
    assert isinstance(split_options(text), list)
    assert isinstance(parse_debugfs_ls(text), list)
    assert parse_debugfs_fast_link(text) is None or isinstance(parse_debugfs_fast_link(text), str)
    assert parse_grub_first_kernel(text) is None or isinstance(parse_grub_first_kernel(text), str)
    assert isinstance(plain_image_path(text), bool)
    assert isinstance(release_sort_key(text), list)
    assert isinstance(fstab_spec_target(text), tuple)


# ------------------------------------------------------------------ disk images (ext4_image_facts)
@given(st.one_of(st.binary(max_size=4096),
                 st.binary(min_size=2048, max_size=4096).map(lambda b: b[:510] + b"\x55\xaa" + b[512:]),
                 st.binary(min_size=2048, max_size=4096).map(
                     lambda b: b[:446 + 4] + b"\xee" + b[451:510] + b"\x55\xaa" + b[512:1024] + b"EFI PART" + b[1032:])))
def test_partition_table_garbage_parses_or_raises_parse_error(data):
    try:
        table = parse_partition_table(lambda offset, length: data[offset:offset + length], len(data))
    except ParseError:
        return
    assert table["table"] in ("gpt", "mbr", "none")


@given(st.one_of(st.binary(max_size=2048),
                 st.binary(min_size=0x210, max_size=2048).map(lambda b: b[:0x202] + b"HdrS" + b[0x206:])))
def test_bzimage_garbage_parses_or_raises_parse_error(head):
    try:
        found = parse_bzimage_version(head)
    except ParseError:
        return
    assert found["version"].startswith(found["release"])


# ------------------------------------------------------------------ kernel strings
release_text = st.one_of(
    any_text,
    st.from_regex(r"\A[0-9]{1,2}\.[0-9]{1,3}(\.[0-9]{1,3})?(-rc[0-9])?([-+.~][A-Za-z0-9_.+~-]{0,30})?\Z"),
    st.sampled_from(["6.1.0-28-cloud-amd64", "5.15.0-1034-aws", "4.18.0-513.5.1.el8_9.x86_64",
                     "5.10.134-16.al8.x86_64", "6.1.79-99.167.amzn2023.x86_64", "5.14.21-150500.55.39-default"]))


@given(release_text, any_text, any_text, st.one_of(any_text, st.dictionaries(st.text(max_size=5), any_text, max_size=3)))
def test_identify_never_raises(release, proc_version, signature, os_release):
    info = kv.identify(release, proc_version, signature, os_release)
    assert set(info) == {"release", "vendor", "upstream", "vendor_version", "backports", "notes"}
    assert info["vendor"] in kv.VENDORS
    assert info["upstream"] is None or re.match(r"^\d+\.\d+\.\d+(-rc\d+)?$", info["upstream"])
    if info["upstream"]:
        assert kv.compare_upstream(info["upstream"], info["upstream"]) == 0


upstream = st.tuples(st.integers(0, 99), st.integers(0, 999), st.integers(0, 999), st.one_of(st.none(), st.integers(1, 20)))


def upstream_text(v):
    return "%d.%d.%d%s" % (v[0], v[1], v[2], "" if v[3] is None else "-rc%d" % v[3])


def upstream_key(v):
    return (v[0], v[1], v[2], float("inf") if v[3] is None else v[3])


@given(upstream, upstream)
def test_compare_upstream_is_the_numeric_order(a, b):
    want = (upstream_key(a) > upstream_key(b)) - (upstream_key(a) < upstream_key(b))
    assert kv.compare_upstream(upstream_text(a), upstream_text(b)) == want
    assert kv.compare_upstream(upstream_text(b), upstream_text(a)) == -want


@given(any_text, any_text)
def test_compare_upstream_garbage_raises_value_error(a, b):
    try:
        assert kv.compare_upstream(a, b) in (-1, 0, 1)
    except ValueError:
        pass


rpm_text = st.one_of(st.from_regex(r"\A[0-9a-z.~^_+-]{0,20}\Z"), st.text(max_size=20))


@given(rpm_text, rpm_text)
def test_rpmvercmp_is_antisymmetric_and_reflexive(a, b):
    assert kv.rpmvercmp(a, a) == 0
    assert kv.rpmvercmp(a, b) == -kv.rpmvercmp(b, a)
    assert kv.compare_evr(a, b) == -kv.compare_evr(b, a)


@given(st.one_of(rpm_text, st.none(), st.integers()), st.one_of(rpm_text, st.none(), st.integers()))
def test_compare_evr_garbage_raises_value_error(a, b):
    try:
        assert kv.compare_evr(a, b) in (-1, 0, 1)
    except ValueError:
        pass


range_bound = st.one_of(st.none(), st.sampled_from(["6.1.0", "5.6.13", "4.18.0-513.el8"]), st.text(max_size=10),
                        st.integers())


@given(release_text, any_text,
       st.lists(st.fixed_dictionaries({"vendor": st.one_of(st.none(), st.sampled_from(list(kv.VENDORS) + ["upstream",
                                                                                                          "UPSTREAM"]),
                                                          st.text(max_size=8)),
                                       "min": range_bound, "max": range_bound}), max_size=3))
def test_in_range_answers_or_raises_value_error(release, proc_version, ranges):
    info = kv.identify(release, proc_version)
    try:
        assert kv.in_range(info, ranges) in (True, False, None)
    except ValueError:
        pass


# ------------------------------------------------------------------ waiver files
yaml_scalar = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=20),
                        st.dates(), st.sampled_from(["2027-01-01", "2027-02-30", "EXT4_NOBARRIER", "*", "next week"]))
yaml_value = st.recursive(yaml_scalar, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                               st.dictionaries(st.text(max_size=12), inner, max_size=4)),
                          max_leaves=12)
waiver_entry = st.fixed_dictionaries(
    {"rule": st.one_of(st.sampled_from(["EXT4_NOBARRIER", "EXT4_INODE_128", "NOPE"]), yaml_value)},
    optional={"justification": yaml_value, "approver": yaml_value, "expires": yaml_value, "hosts": yaml_value,
              "groups": yaml_value, "mountpoints": yaml_value})
RULES = {"EXT4_NOBARRIER", "EXT4_INODE_128"}


@given(st.one_of(yaml_value, st.fixed_dictionaries({"waivers": st.one_of(yaml_value, st.lists(waiver_entry, max_size=4))})))
def test_waiver_documents_parse_or_raise_waiver_error(doc):
    try:
        parsed = waivers.parse(doc, RULES)
    except waivers.WaiverError as exc:
        assert str(exc)
        return
    for waiver in parsed:
        assert waiver["rule"] in RULES and 2000 <= waiver["expires"].year <= 2100 and waiver["expires"].tzinfo
        assert waivers.matches(waiver, "h", ["g"], {"rule": waiver["rule"], "mountpoint": "/x"}) in (True, False)


@given(st.one_of(st.binary(max_size=300), st.text(max_size=300).map(lambda t: t.encode("utf-8")),
                 st.fixed_dictionaries({"waivers": st.lists(waiver_entry, max_size=3)}).map(
                     lambda d: yaml.safe_dump(d, allow_unicode=True).encode("utf-8")).flatmap(
                     lambda b: st.integers(0, len(b)).map(lambda n: b[:n]))))  # valid YAML, cut anywhere
@example(b"[" * 3000)  # PyYAML recurses per nesting level
@example(b"waivers:\n - {rule: EXT4_NOBARRIER, justification: j, approver: a, expires: 2027-02-30}\n")
@example(b"waivers: \xff\xfe\n")
def test_waiver_files_load_or_raise_waiver_error(tmp_path_factory, content):
    path = tmp_path_factory.mktemp("waivers", numbered=True) / "waivers.yml"
    path.write_bytes(content)
    try:
        assert isinstance(waivers.load(str(path), RULES), list)
    except waivers.WaiverError as exc:
        assert str(path) in str(exc) or "waiver #" in str(exc) or "expected a mapping" in str(exc)


@given(st.lists(st.fixed_dictionaries({
    "rule": st.sampled_from(sorted(RULES)), "justification": st.text(min_size=1, max_size=30).filter(str.strip),
    "approver": st.text(min_size=1, max_size=20).filter(str.strip),
    "expires": st.dates(datetime.date(2000, 1, 1), datetime.date(2100, 12, 31)),
    "hosts": st.lists(st.text(min_size=1, max_size=10), max_size=2),
    "mountpoints": st.lists(path_bytes.map(shown), max_size=2)}), max_size=4))
def test_waiver_file_round_trip(entries):
    # double-quoted: PyYAML's plain style would write U+0085 raw and read it back as a line break
    text = yaml.safe_dump({"waivers": entries}, allow_unicode=True, default_style='"')
    parsed = waivers.parse(yaml.safe_load(text), RULES)
    assert [(w["rule"], w["justification"], w["approver"], w["hosts"], w["mountpoints"], w["expires"]) for w in parsed] == [
        (e["rule"], e["justification"].strip(), e["approver"].strip(), e["hosts"], e["mountpoints"],
         datetime.datetime(e["expires"].year, e["expires"].month, e["expires"].day, tzinfo=datetime.timezone.utc))
        for e in entries]
