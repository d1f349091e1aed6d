"""Every rule's cases (rules/cases/<RULE_ID>.yml): facts in, findings out, through the real engine.

A case's facts are its changes to rules/cases/default_facts.json, a real facts record (ext4_facts
on this machine: kernel 6.18.44 and a 2 GiB ext4 made with mkfs.ext4's defaults, mounted at
/srv/data): mappings merge key by key, lists replace, but for two lists the tools edit:
a filesystem's `options` as `mount -o` does (`nobarrier` replaces `barrier`, `commit=60`
replaces `commit=5`; `^data` drops the option) and the superblock's `features` as `tune2fs -O`
does (`64bit` adds it, `^64bit` drops it). Each key must be one a facts record has
(ext4audit/model/fact_paths.py), so a misspelt field fails with the file and the field, never passes as
a field the rule does not read. A case expects the rule's findings (each with its severity and
mountpoint, and any other finding field worth pinning) and, where a fact is missing, its
undetermined entries; findings of other rules are not its business.

Every rule of the catalog has a case file with at least one case that raises a finding and one
that raises none and is not undetermined either, so a rule cannot be added without them.
"""

import copy
import glob
import json
import os

import pytest

from conftest import ROOT
from ext4audit.model import safe_yaml
from ext4audit.model import fact_paths
from ext4audit.rules import catalog as catalog_mod, engine
from ext4audit.parsers.ext4_parsers.mounts import option_map

CASES_DIR = os.path.join(ROOT, "rules", "cases")
DEFAULT_FACTS = os.path.join(CASES_DIR, "default_facts.json")
CATALOG = catalog_mod.load()
with open(DEFAULT_FACTS) as handle:
    DEFAULT = json.load(handle)
CASE_KEYS = {"name", "facts", "findings", "undetermined"}
# What a case may expect of a finding: the fields of a real one (the rule is the file's).
FINDING_KEYS = frozenset(engine.evaluate_host(DEFAULT, CATALOG)[0][0]) - {"rule"}
UNDETERMINED_KEYS = {"mountpoint", "device", "missing"}  # engine.evaluate_host's undetermined entries


def _fields(paths, prefix=""):
    """The keys fact_paths lists directly under prefix ("" for the top level of a record part)."""
    return frozenset(path[len(prefix):].split(".")[0] for path in paths if path.startswith(prefix))


_FILESYSTEM = fact_paths.FILESYSTEM + fact_paths.IMAGE_FILESYSTEM
_KERNEL = fact_paths.KERNEL + fact_paths.IMAGE_KERNEL
# What a case may set, by where it is in the record (of a disk image's record, what the engine reads:
# fact_paths.IMAGE).
FIELDS = {
    "facts": frozenset({"kernel", "filesystems", "netfs", "image"}),
    "kernel": _fields(_KERNEL), "kernel.os_release": _fields(_KERNEL, "os_release."),
    "filesystem": _fields(_FILESYSTEM), "filesystem.superblock": frozenset(fact_paths.SUPERBLOCK),
    "filesystem.queue": frozenset(fact_paths.QUEUE), "filesystem.jbd2": frozenset(fact_paths.JBD2),
    "filesystem.fstab": _fields(_FILESYSTEM, "fstab."), "filesystem.fsck": _fields(_FILESYSTEM, "fsck."),
    "filesystem.usage": _fields(_FILESYSTEM, "usage."),
    "filesystem.options_kernel": _fields(_FILESYSTEM, "options_kernel."),
    "netfs": frozenset(fact_paths.NETFS), "image": frozenset(fact_paths.IMAGE),
}


class CaseError(ValueError):
    """A case file is not valid; the message names the file, the case and the field."""


def _option_name(option):
    return next(iter(option_map([option])))


def _edit_options(options, changes, where):
    """options changed as `mount -o` would (an option replaces the one of the same name); ^name drops it."""
    result = list(options)
    for change in _strings(changes, where):
        name = _option_name(change.lstrip("^"))
        result = [option for option in result if _option_name(option) != name]
        if not change.startswith("^"):
            result.append(change)
    return result


def _edit_features(features, changes, where):
    """features changed as `tune2fs -O` would: name adds it, ^name drops it."""
    result = list(features)
    for change in _strings(changes, where):
        result = [feature for feature in result if feature != change.lstrip("^")]
        if not change.startswith("^"):
            result.append(change)
    return result


def _strings(value, where):
    if not isinstance(value, list) or not all(isinstance(item, str) and item.strip("^") for item in value):
        raise CaseError("%s must be a list of names, got %r" % (where, value))
    return value


def _merged(base, change, kind, where):
    """base (a part of the default record, or None) with the case's change to it."""
    if not isinstance(change, dict):
        raise CaseError("%s must be a mapping, got %r" % (where, change))
    result = copy.deepcopy(base) if isinstance(base, dict) else {}
    for key, value in change.items():
        field, inner = "%s.%s" % (where, key), "%s.%s" % (kind, key)
        if key not in FIELDS[kind]:
            raise CaseError("%s is not a field of a facts record (%s: %s)"
                            % (field, where, ", ".join(sorted(FIELDS[kind]))))
        if inner == "filesystem.options":
            result[key] = _edit_options(result.get(key) or [], value, field)
        elif inner == "filesystem.superblock.features":
            result[key] = _edit_features(result.get(key) or [], value, field)
        elif inner in FIELDS and value is not None:
            result[key] = _merged(result.get(key), value, inner, field)
        else:
            result[key] = copy.deepcopy(value)
    return result


def _listed(value, where):
    if not isinstance(value, list):
        raise CaseError("%s must be a list, got %r" % (where, value))
    return value


def case_facts(change):
    """The facts record of a case: the default record with the case's facts merged over it.
    Each filesystem or network mount of the case is merged over the default's first one."""
    record = copy.deepcopy(DEFAULT)
    change = change or {}
    if not isinstance(change, dict):
        raise CaseError("facts must be a mapping, got %r" % (change,))
    unknown = sorted(set(change) - FIELDS["facts"])
    if unknown:
        raise CaseError("facts.%s is not a field of a facts record (facts: %s)"
                        % (unknown[0], ", ".join(sorted(FIELDS["facts"]))))
    if "kernel" in change:
        record["kernel"] = _merged(DEFAULT["kernel"], change["kernel"], "kernel", "facts.kernel")
    for key, kind in (("filesystems", "filesystem"), ("netfs", "netfs")):
        if key in change:
            base = (DEFAULT[key] or [None])[0]
            record[key] = [_merged(base, entry, kind, "facts.%s[%d]" % (key, index))
                           for index, entry in enumerate(_listed(change[key], "facts." + key))]
    if "image" in change:
        record["image"] = _merged(None, change["image"], "image", "facts.image")
    return record


def _shaped(actual, expected):
    """actual, cut to the shape of expected: the keys a mapping of expected names, lists element by
    element (a list of another length stays whole, so the comparison shows it)."""
    if isinstance(expected, dict) and isinstance(actual, dict):
        return dict((key, _shaped(actual.get(key), value)) for key, value in expected.items())
    if isinstance(expected, list) and isinstance(actual, list) and len(expected) == len(actual):
        return [_shaped(a, e) for a, e in zip(actual, expected)]
    return actual


def _entries(value, keys, required, where, what):
    """value: the expected entries (findings or undetermined), each a mapping of known keys."""
    for index, entry in enumerate(_listed(value, where)):
        field = "%s[%d]" % (where, index)
        if not isinstance(entry, dict):
            raise CaseError("%s must be a mapping, got %r" % (field, entry))
        unknown = sorted(set(entry) - keys)
        if unknown:
            raise CaseError("%s.%s is not a field of %s (%s)" % (field, unknown[0], what, ", ".join(sorted(keys))))
        missing = [key for key in required if key not in entry]
        if missing:
            raise CaseError("%s has no %s" % (field, missing[0]))
    return value


def read_case_file(path):
    """(rule id, [case]) of one case file, checked: the rule exists, each case has a name and
    findings, and names only known keys. Errors name the file."""
    try:
        doc = safe_yaml.load(path)
    except (OSError, safe_yaml.Error, ValueError) as exc:
        raise CaseError("cannot read %s: %s" % (path, exc))
    name = os.path.splitext(os.path.basename(path))[0]
    if not isinstance(doc, dict) or set(doc) != {"rule", "cases"}:
        raise CaseError("%s: a case file is a mapping with exactly rule and cases" % path)
    if doc["rule"] != name:
        raise CaseError("%s: rule %r is not the file's name (%s)" % (path, doc["rule"], name))
    if doc["rule"] not in CATALOG.by_id:
        raise CaseError("%s: rule %s is not a rule of rules/catalog.yml" % (path, doc["rule"]))
    cases = doc["cases"]
    if not isinstance(cases, list) or not all(isinstance(case, dict) for case in cases):
        raise CaseError("%s: cases must be a list of mappings" % path)
    names = set()
    for index, case in enumerate(cases):
        where = "%s: case %s" % (path, case.get("name", "#%d" % (index + 1)))
        unknown = sorted(set(case) - CASE_KEYS, key=str)
        if unknown:
            raise CaseError("%s: unknown field %s (fields: %s)" % (where, unknown[0], ", ".join(sorted(CASE_KEYS))))
        if not isinstance(case.get("name"), str) or "findings" not in case:
            raise CaseError("%s: a case needs a name and findings (a list, [] for none)" % where)
        if case["name"] in names:
            raise CaseError("%s: two cases have this name" % where)
        names.add(case["name"])
    return doc["rule"], cases


def run_case(rule_id, case):
    """(expected, got) for one case: the rule's findings and undetermined entries, got cut to the
    fields the case names."""
    try:
        findings = _entries(case["findings"], FINDING_KEYS, ("severity", "mountpoint"), "findings", "a finding")
        undetermined = _entries(case.get("undetermined") or [], UNDETERMINED_KEYS, ("mountpoint", "missing"),
                                "undetermined", "an undetermined entry")
        record = case_facts(case.get("facts"))
    except CaseError as exc:
        raise CaseError("case %s: %s" % (case["name"], exc))
    found, unknown, _ = engine.evaluate_host(record, CATALOG)
    expected = {"findings": findings, "undetermined": undetermined}
    got = {"findings": [f for f in found if f["rule"] == rule_id],
           "undetermined": [u for u in unknown if u["rule"] == rule_id]}
    return expected, _shaped(got, expected)


def case_files():
    return sorted(glob.glob(os.path.join(CASES_DIR, "*.yml")))


def all_cases():
    """pytest params: one per case of every case file (a file that cannot be read is one failing param)."""
    params = []
    for path in case_files():
        try:
            rule_id, cases = read_case_file(path)
        except CaseError as exc:
            params.append(pytest.param(path, None, exc, id=os.path.basename(path)))
            continue
        params += [pytest.param(rule_id, case, None, id="%s: %s" % (rule_id, case["name"])) for case in cases]
    return params


@pytest.mark.parametrize("rule_id, case, error", all_cases())
def test_rule_case(rule_id, case, error):
    if error is not None:
        raise error
    try:
        expected, got = run_case(rule_id, case)
    except CaseError as exc:
        raise CaseError("%s/%s.yml: %s" % (CASES_DIR, rule_id, exc))
    assert got == expected


@pytest.mark.parametrize("rule_id", [rule["id"] for rule in CATALOG.rules])
def test_every_rule_has_a_positive_and_a_negative_case(rule_id):
    path = os.path.join(CASES_DIR, rule_id + ".yml")
    assert os.path.isfile(path), "rule %s has no cases: add %s (docs/rules.md, Adding a rule)" % (rule_id, path)
    _, cases = read_case_file(path)
    positive = [case["name"] for case in cases if case["findings"]]
    negative = [case["name"] for case in cases if not case["findings"] and not case.get("undetermined")]
    assert positive, "%s: no case in which rule %s raises a finding" % (path, rule_id)
    assert negative, "%s: no case in which rule %s raises none (the risky combination absent)" % (path, rule_id)


def test_the_default_record_is_a_facts_record_with_one_ext4_filesystem():
    assert DEFAULT["schema"] == "ext4-fleet-audit/facts/v1"
    assert len(DEFAULT["filesystems"]) == 1 and DEFAULT["netfs"] == []
    fs = DEFAULT["filesystems"][0]
    assert fs["options_source"] == "proc" and fs["superblock"] and set(fs["superblock"]) == set(fact_paths.SUPERBLOCK)
    assert set(fs) == _fields(fact_paths.FILESYSTEM) and set(DEFAULT["kernel"]) == _fields(fact_paths.KERNEL)


# ------------------------------------------------ the case runner itself: it must not pass a wrong case
@pytest.mark.parametrize("name, text, message", [
    ("EXT4_NOPE", "rule: EXT4_NOPE\ncases: []\n", "EXT4_NOPE.yml: rule EXT4_NOPE is not a rule of rules/catalog.yml"),
    ("EXT4_NOBARRIER", "rule: EXT4_DATA_JOURNAL\ncases: []\n", "rule 'EXT4_DATA_JOURNAL' is not the file's name"),
    ("EXT4_NOBARRIER", "rule: EXT4_NOBARRIER\ncases: [{name: a, findings: [], expect: []}]\n",
     "case a: unknown field expect"),
    ("EXT4_NOBARRIER", "rule: EXT4_NOBARRIER\ncases: [{name: a}]\n", "case a: a case needs a name and findings"),
    ("EXT4_NOBARRIER", "rule: EXT4_NOBARRIER\ncases: [{name: a, findings: []}, {name: a, findings: []}]\n",
     "case a: two cases have this name"),
])
def test_a_broken_case_file_names_the_file_and_the_field(tmp_path, name, text, message):
    path = tmp_path / (name + ".yml")
    path.write_text(text)
    with pytest.raises(CaseError) as raised:
        read_case_file(str(path))
    assert str(path) in str(raised.value) and message in str(raised.value)


@pytest.mark.parametrize("facts, message", [
    ({"filesystems": [{"superblok": {"inode_size": 128}}]}, "facts.filesystems[0].superblok is not a field"),
    ({"filesystems": [{"superblock": {"inode_sise": 128}}]}, "facts.filesystems[0].superblock.inode_sise is not"),
    ({"filesystems": [{"queue": {"write_cache": "write back", "cache": 1}}]}, "facts.filesystems[0].queue.cache is"),
    ({"kernel": {"relase": "6.1.64"}}, "facts.kernel.relase is not a field"),
    ({"netfs": [{"mountpoint": "/n", "type": "nfs"}]}, "facts.netfs[0].type is not a field"),
    ({"hosts": []}, "facts.hosts is not a field"),
    ({"filesystems": [{"options": "nobarrier"}]}, "facts.filesystems[0].options must be a list of names"),
])
def test_a_case_naming_an_unknown_field_fails_with_the_field(facts, message):
    case = {"name": "typo", "facts": facts, "findings": []}
    with pytest.raises(CaseError) as raised:
        run_case("EXT4_NOBARRIER", case)
    assert "case typo: " + message in str(raised.value)


@pytest.mark.parametrize("finding, message", [
    ({"severity": "high"}, "findings[0] has no mountpoint"),
    ({"severity": "high", "mountpoint": "/srv/data", "sevrity": "low"}, "findings[0].sevrity is not a field"),
])
def test_an_expected_finding_names_known_fields(finding, message):
    with pytest.raises(CaseError, match=message.replace("[", r"\[").replace("]", r"\]")):
        run_case("EXT4_NOBARRIER", {"name": "x", "facts": {}, "findings": [finding]})


def test_a_wrong_expectation_is_a_difference_not_a_pass():
    """The nobarrier case with its severity flipped, a finding too many or too few, or a wrong
    message: each comes out different from what the engine says."""
    facts = {"filesystems": [{"options": ["nobarrier"]}]}
    right = {"severity": "high", "mountpoint": "/srv/data"}
    expected, got = run_case("EXT4_NOBARRIER", {"name": "x", "facts": facts, "findings": [right]})
    assert got == expected
    for wrong in ([dict(right, severity="medium")], [], [right, right], [dict(right, message="nobarrier")]):
        expected, got = run_case("EXT4_NOBARRIER", {"name": "x", "facts": facts, "findings": wrong})
        assert got != expected, wrong


def test_options_and_features_are_edited_as_the_tools_do():
    fs = case_facts({"filesystems": [{"options": ["nobarrier", "commit=60", "^data"],
                                      "superblock": {"features": ["^64bit", "fast_commit"]}}]})["filesystems"][0]
    default_fs = DEFAULT["filesystems"][0]
    options = option_map(fs["options"])
    assert options["barrier"] is False and options["commit"] == "60" and "data" not in options
    assert len(fs["options"]) == len(default_fs["options"]) - 1
    assert "64bit" not in fs["superblock"]["features"] and fs["superblock"]["features"][-1] == "fast_commit"
    assert fs["superblock"]["inode_size"] == default_fs["superblock"]["inode_size"]  # the rest merged
    with open(DEFAULT_FACTS) as handle:
        assert json.load(handle) == DEFAULT  # a case never changes the default record


def test_the_worked_example_in_the_docs_is_a_real_case_file():
    """docs/rules.md shows EXT4_LONG_COMMIT's cases as a rule's author writes them: the file itself."""
    page = open(os.path.join(ROOT, "docs", "rules.md")).read()
    example = page.split("and `rules/cases/EXT4_LONG_COMMIT.yml`:\n\n```yaml\n", 1)[1].split("```", 1)[0]
    with open(os.path.join(CASES_DIR, "EXT4_LONG_COMMIT.yml")) as handle:
        assert example == "".join(line for line in handle if not line.startswith("#"))
