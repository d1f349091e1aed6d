"""The catalog as a whole and the engine, over facts built from real fixtures: what the defaults
raise, escalation by the probe, evidence order, undetermined lists, combinators and the catalog's
validation. Each rule's own facts-in, findings-out cases are beside it in rules/cases/
(test_rule_cases.py runs them); facts() and with_options() here also serve the report tests."""

import copy
import os

import pytest

from ext4audit.parsers import kernel_version
from ext4audit.parsers.ext4_parsers.mounts import option_map, parse_ext4_options
from ext4audit.parsers.ext4_parsers.superblock import parse_dumpe2fs, parse_jbd2_info
from conftest import ROOT, fixture_text
from ext4audit.model import contract, safe_yaml
from ext4audit.probe import analysis as probe
from ext4audit.rules import catalog as catalog_mod, engine

CATALOG = catalog_mod.load()
DEFAULT_OPTIONS = parse_ext4_options(fixture_text("ext4_options", "kernel-6.18-defaults.txt"))
DEFAULT_SB = parse_dumpe2fs(fixture_text("dumpe2fs", "e2fsprogs-1.47-default-2g.txt"))
MAINLINE_618 = dict(kernel_version.identify("6.18.44-fc-v669", "Linux version 6.18.44-fc-v669 #1 SMP"),
                    page_size=4096)


# statvfs of the same filesystem, freshly made and mounted (ext4_facts Collector.usage)
DEFAULT_USAGE = {"block_size": 4096, "blocks": 498138, "blocks_free": 498132, "blocks_avail": 467822,
                 "inodes": 131072, "inodes_free": 131061}


def facts(options=None, sb=None, kernel=None, queue=None, fstab_drift=(), netfs=(), source="proc", usage=None):
    fs = {"device": "/dev/loop0", "mountpoint": "/data", "fstype": "ext4", "options_source": source,
          "usage": dict(DEFAULT_USAGE) if usage is None else usage,
          "options": list(options if options is not None else DEFAULT_OPTIONS),
          "superblock": copy.deepcopy(DEFAULT_SB) if sb is None else sb,
          "queue": queue if queue is not None else {"write_cache": "write through", "rotational": 0},
          "fstab": {"line": 3, "options": ["defaults"]}, "fstab_drift": list(fstab_drift), "jbd2": None}
    return {"kernel": kernel or MAINLINE_618, "filesystems": [fs], "netfs": list(netfs)}


def with_options(*changes):
    """The default option list with some options replaced, e.g. with_options('nodelalloc')."""
    result = list(DEFAULT_OPTIONS)
    for change in changes:
        name = option_map([change]).popitem()[0]
        result = [o for o in result if option_map([o]).popitem()[0] != name] + [change]
    return result


KERNEL_RECORD_RULES = "KERNEL_EXT4_"  # the {kernel_records: CLASS} rules' prefix


def rules(fact_tree):
    """The findings' severities, but for the kernel CNA record rules: test_kernel_record_rules.py
    has theirs (6.18.44 lacks one hang fix, CVE-2026-74307)."""
    findings, undetermined, passed = engine.evaluate_host(fact_tree, CATALOG)
    return dict((f["rule"], f["severity"]) for f in findings if not f["rule"].startswith(KERNEL_RECORD_RULES))


def kernel(release, proc_version=""):
    return dict(kernel_version.identify(release, proc_version), page_size=4096)


def test_defaults_give_only_informational_findings():
    assert rules(facts()) == {"EXT4_AUTO_DA_ALLOC_RENAME": "info", "EXT4_ERRORS_CONTINUE": "info"}


def confirmed(fact_tree, rule_id, ratio):
    """The rule's severity after the probe measured `ratio` for its confirmation on /data."""
    findings = engine.evaluate_host(fact_tree, CATALOG)[0]
    spec = CATALOG.by_id[rule_id]["confirmation"]
    section = {"status": "ran", "reason": None, "mountpoint": "/data", "errors": [],
               "confirmations": [{"id": spec["probe"], "status": "measured", "ratio": ratio}]}
    probe.confirm(findings, section, CATALOG.by_id)
    return dict((f["rule"], f["severity"]) for f in findings)[rule_id]


@pytest.mark.parametrize("rule_id, fact_tree", [
    ("EXT4_DIOREAD_NOLOCK_NODELALLOC", lambda: facts(options=with_options("nodelalloc"), kernel=kernel("5.6.12"))),
    ("EXT4_SMALL_JOURNAL", lambda: facts(sb=parse_dumpe2fs(
        fixture_text("dumpe2fs", "e2fsprogs-1.45-luks-music-journal-128m.txt")))),
])
def test_static_performance_findings_stay_medium_until_the_probe_confirms(rule_id, fact_tree):
    threshold = CATALOG.by_id[rule_id]["confirmation"]["confirmed_at"]
    assert rules(fact_tree())[rule_id] == "medium"
    assert confirmed(fact_tree(), rule_id, threshold - 0.01) == "medium"
    assert confirmed(fact_tree(), rule_id, threshold) == "high"


def test_no_performance_rule_fails_the_default_gate_statically():
    for rule in CATALOG.rules:
        if rule["kind"] == "performance":
            levels = [rule["severity"]] + [e["severity"] for e in rule.get("escalate") or []]
            assert all(level in ("info", "low", "medium") for level in levels), rule["id"]


def test_journal_checksum_v2_is_not_a_finding():
    # set_journal_csum_feature_set() clears CSUM_V2 from the journal on every journalled mount
    # (since journal checksum v3, db9ee220361d, 2014): a filesystem mounted by any kernel the
    # audit supports never keeps it, so the rule was removed rather than kept unreachable.
    sb = copy.deepcopy(DEFAULT_SB)
    sb["journal_features"] = ["journal_incompat_revoke", "journal_checksum_v2"]
    assert rules(facts(sb=sb)) == rules(facts())


def test_evidence_order_and_missing_lists_are_pinned():
    # Reports show evidence in reading order (dict equality would not notice a reordering). The
    # kernel CNA record rules have their own tests (test_kernel_record_rules.py).
    def without_records(items):
        return [item for item in items if not item["rule"].startswith(KERNEL_RECORD_RULES)]
    findings, undetermined, _ = engine.evaluate_host(facts(
        options=with_options("nodelalloc", "nobarrier"), kernel=kernel("5.15.40"),
        queue={"write_cache": "write back"}), CATALOG)
    assert [(f["rule"], list(f["evidence"].items())) for f in without_records(findings)] == [
        ("KERNEL_MB_OPTIMIZE_SCAN_REGRESSION", [("derived.mb_optimize_scan", True),
                                                ("kernel_issue.MB_OPTIMIZE_SCAN_REGRESSION", True)]),
        ("EXT4_NOBARRIER", [("opt.barrier", False)]),
        ("EXT4_ERRORS_CONTINUE", [("opt.errors", "continue")])]
    assert without_records(undetermined) == []
    # No superblock on a backporting kernel: every undetermined rule with exactly what it missed (the
    # use rules read the live counts of statvfs, which need no superblock).
    _, undetermined, _ = engine.evaluate_host(facts(sb=False, kernel=kernel("4.18.0-513.5.1.el8_9.x86_64")), CATALOG)
    rhel = "(kernel 4.18.0-513.5.1.el8_9.x86_64 cannot be compared)"
    assert [(u["mountpoint"], u["rule"], u["missing"]) for u in without_records(undetermined)] == [
        ("/data", "EXT4_SMALL_JOURNAL", ["derived.journal_ratio"]),
        ("/data", "EXT4_INODE_128", ["sb.inode_size"]),
        (None, "KERNEL_DIO_CORRUPTION_6_1_64", ["kernel_issue.DIO_POSITION_CORRUPTION_6_1_64 " + rhel]),
        ("/data", "KERNEL_MB_OPTIMIZE_SCAN_REGRESSION",
         ["derived.mb_optimize_scan", "kernel_issue.MB_OPTIMIZE_SCAN_REGRESSION " + rhel]),
        ("/data", "KERNEL_FAST_COMMIT_EARLY", ["kernel_issue.FAST_COMMIT_EARLY " + rhel, "sb.features"]),
        ("/data", "KERNEL_DIOREAD_NOLOCK_SUBPAGE",
         ["derived.block_smaller_than_page", "kernel_issue.DIOREAD_NOLOCK_SUBPAGE_BLOCKS " + rhel]),
        ("/data", "EXT4_ERRORS_RECORDED", ["sb.error_count", "sb.state"]),
        ("/data", "EXT4_NO_64BIT", ["derived.growth_room_32bit", "sb.features"]),
        ("/data", "EXT4_NO_METADATA_CSUM", ["sb.features"]),
        ("/data", "EXT4_LEGACY_FEATURES", ["derived.missing_ext4_features"]),
        ("/data", "EXT4_RESERVED_BLOCKS_LARGE", ["derived.reserved_bytes"])]


def test_combinators_read_every_fact_and_present_settles_missing():
    when = {"all": [{"fact": "sb.inode_size", "gt": 0}, {"fact": "sb.inode_size", "present": False},
                    {"not": {"fact": "opt.nonexistent", "eq": True}},
                    {"any": [{"fact": "queue.write_cache", "eq": "write back"}, {"fact": "jbd2.transactions", "gt": 0}]}]}
    rule = dict(CATALOG.by_id["EXT4_NOBARRIER"], id="T", escalate=[], when=when)
    catalog = catalog_mod.Catalog([rule], CATALOG.kernel_issues)
    # sb.inode_size is unreadable, but present: false is about exactly that; an unlisted option
    # is unknown in fstab options and off in the complete /proc list.
    assert engine.evaluate_host(facts(sb=False, source="fstab"), catalog)[1][0]["missing"] == \
        ["jbd2.transactions", "opt.nonexistent"]
    assert engine.evaluate_host(facts(sb=False), catalog)[1][0]["missing"] == ["jbd2.transactions"]


def test_every_rule_traces_to_a_source():
    for rule in CATALOG.rules:
        assert rule["references"] and all(r.startswith("https://") for r in rule["references"]), rule["id"]
        assert rule["remediation"]["steps"].strip() and rule["remediation"]["cost"].strip(), rule["id"]
    seeds = set(r.get("seed") for r in CATALOG.rules)
    assert {"000", "001", "002", "003"} <= seeds
    seed_files = os.listdir(os.path.join(ROOT, "..", "shared", "seeds")) if os.path.isdir(
        os.path.join(ROOT, "..", "shared", "seeds")) else []
    for seed in seeds - {None}:
        assert not seed_files or any(name.startswith(seed + "_") for name in seed_files), seed


def test_the_small_block_dioread_rule_cites_its_fixing_commit():
    """d1e18b8824dd fixed the bs < ps unwritten-extent conversion: the rule and its kernel issue
    cite it where the commit lives (git.kernel.org), not only by its id in the text."""
    commit = "https://git.kernel.org/pub/scm/linux/kernel/git/torvalds/linux.git/commit/?id=d1e18b8824dd"
    assert any(ref.startswith(commit) for ref in CATALOG.by_id["KERNEL_DIOREAD_NOLOCK_SUBPAGE"]["references"])
    assert any(ref.startswith(commit) for ref in CATALOG.kernel_issues["DIOREAD_NOLOCK_SUBPAGE_BLOCKS"]["references"])


@pytest.mark.parametrize("broken, message", [
    ({"severity": "severe"}, "severity"),
    ({"scope": "cluster"}, "scope"),
    ({"when": {"fact": "opt.data", "equals": "x"}}, "fact predicate"),
    ({"when": {"kernel_issue": "NOPE"}}, "unknown kernel issue"),
    ({"remediation": {"steps": "x"}}, "remediation"),
    ({"kind": None}, "has no kind"),
    ({"kind": "speed"}, "kind 'speed' is not one of"),
    ({"kind": "performance", "severity": "high"}, "severity high is above medium"),
    ({"kind": "performance", "escalate": [{"when": {"fact": "opt.data", "eq": "x"}, "severity": "high",
                                           "because": "x"}]}, "severity high is above medium"),
    ({"when": {"fstab_options_refused": "yes"}}, "fstab_options_refused needs a filesystem rule and the value true"),
    ({"scope": "host", "when": {"fstab_options_refused": True}}, "fstab_options_refused needs a filesystem rule"),
])
def test_catalog_validation(tmp_path, broken, message):
    import yaml
    doc = yaml.safe_load(open(os.path.join(catalog_mod.RULES_DIR, "catalog.yml")))
    doc["rules"][0].update(broken)
    doc["rules"][0] = dict((k, v) for k, v in doc["rules"][0].items() if v is not None)
    (tmp_path / "catalog.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "kernel_issues.yml").write_text(open(os.path.join(catalog_mod.RULES_DIR, "kernel_issues.yml")).read())
    with pytest.raises(catalog_mod.CatalogError, match=message):
        catalog_mod.load(str(tmp_path))


def catalog_with(tmp_path, change):
    """A copy of rules/ whose catalog.yml (as data) went through change(rules by id)."""
    import yaml
    doc = yaml.safe_load(open(os.path.join(catalog_mod.RULES_DIR, "catalog.yml")))
    change(dict((rule["id"], rule) for rule in doc["rules"]))
    (tmp_path / "catalog.yml").write_text(yaml.safe_dump(doc))
    (tmp_path / "kernel_issues.yml").write_text(open(os.path.join(catalog_mod.RULES_DIR, "kernel_issues.yml")).read())
    return str(tmp_path)


def set_in(rule_id, *keys, value):
    """change(): rules[rule_id][keys...] = value."""
    def change(rules):
        node = rules[rule_id]
        for key in keys[:-1]:
            node = node[key]
        node[keys[-1]] = value
    return change


# (id, change, what the error must say: the rule, the field and the bad value)
TYPOS = [
    ("fact-misspelt", set_in("EXT4_NOBARRIER", "when", value={"fact": "opt.barier", "eq": False}),
     "rule EXT4_NOBARRIER: fact 'opt.barier' is not a fact a filesystem rule can read"),
    ("fact-no-such-root", set_in("EXT4_DATA_JOURNAL", "when", value={"fact": "nosuch.data", "eq": "journal"}),
     "rule EXT4_DATA_JOURNAL: fact 'nosuch.data' is not"),
    ("fact-inside-a-list", set_in("EXT4_DATA_WRITEBACK", "when", value={"fact": "sb.features.csum", "eq": 1}),
     "rule EXT4_DATA_WRITEBACK: fact 'sb.features.csum' is not"),
    ("fact-of-another-scope", set_in("KERNEL_DIO_CORRUPTION_6_1_64", "when", "all", 0,
                                     value={"fact": "opt.data", "eq": "ordered"}),
     "rule KERNEL_DIO_CORRUPTION_6_1_64: fact 'opt.data' is not a fact a host rule can read"),
    ("fact-in-escalate", set_in("EXT4_NOBARRIER", "escalate", 0, "when", value={"fact": "queue.writecache", "eq": "x"}),
     "rule EXT4_NOBARRIER: fact 'queue.writecache' is not"),
    ("placeholder-unknown", set_in("EXT4_DATA_WRITEBACK", "message", value="{mountpiont}: data=writeback"),
     "rule EXT4_DATA_WRITEBACK: message placeholder {mountpiont} is not one of the plain fields"),
    ("placeholder-attribute", set_in("EXT4_DATA_WRITEBACK", "message", value="{mountpoint.__class__.__mro__}"),
     "rule EXT4_DATA_WRITEBACK: message placeholder {mountpoint.__class__.__mro__} is not"),
    ("placeholder-index", set_in("EXT4_DATA_WRITEBACK", "message", value="{mountpoint[0]}"),
     "rule EXT4_DATA_WRITEBACK: message placeholder {mountpoint[0]} is not"),
    ("placeholder-conversion", set_in("EXT4_DATA_WRITEBACK", "message", value="{mountpoint!r}"),
     "rule EXT4_DATA_WRITEBACK: message placeholder {mountpoint!r} is not"),
    ("placeholder-positional", set_in("EXT4_DATA_WRITEBACK", "message", value="{} is bad"),
     "rule EXT4_DATA_WRITEBACK: message placeholder {} is not"),
    ("placeholder-unbalanced", set_in("EXT4_DATA_WRITEBACK", "message", value="{mountpoint: bad"),
     "rule EXT4_DATA_WRITEBACK: message '{mountpoint: bad' is not a valid template"),
    ("placeholder-in-because", set_in("EXT4_NOBARRIER", "escalate", 0, "because", value="cache {cache_mode}"),
     "rule EXT4_NOBARRIER: because placeholder {cache_mode} is not"),
    ("probe-misspelt", set_in("EXT4_AUTO_DA_ALLOC_RENAME", "confirmation", "probe", value="rename_over_existng"),
     "rule EXT4_AUTO_DA_ALLOC_RENAME: confirmation.probe 'rename_over_existng' is not one of rename_over_existing, "),
    ("field-misspelt", set_in("EXT4_NOBARRIER", "escalte", value=[]), "rule EXT4_NOBARRIER: unknown field escalte"),
    ("escalate-field-misspelt", set_in("EXT4_NOBARRIER", "escalate", 0, "becuase", value="x"),
     "rule EXT4_NOBARRIER: escalate[0]: unknown field becuase (fields: when, severity, because)"),
    ("all-and-any", set_in("EXT4_DATA_JOURNAL", "when", value={"all": [{"fact": "opt.data", "eq": "journal"}],
                                                             "any": [{"fact": "opt.nosuch", "eq": 1}]}),
     "rule EXT4_DATA_JOURNAL: predicate"),
]


@pytest.mark.parametrize("case", TYPOS, ids=[c[0] for c in TYPOS])
def test_a_typo_in_a_rule_fails_the_load(tmp_path, case):
    name, change, message = case
    with pytest.raises(catalog_mod.CatalogError) as raised:
        catalog_mod.load(catalog_with(tmp_path, change))
    assert message in str(raised.value)


def test_a_typo_in_a_kernel_issue_fails_the_load(tmp_path):
    rules_dir = catalog_with(tmp_path, lambda rules: None)
    path = tmp_path / "kernel_issues.yml"
    path.write_text(path.read_text().replace("{vendor: upstream, min: \"6.1.64\"", "{vendor: upstrem, min: \"6.1.64\""))
    with pytest.raises(catalog_mod.CatalogError, match="kernel issue DIO_POSITION_CORRUPTION_6_1_64: vendor 'upstrem'"):
        catalog_mod.load(rules_dir)
    path.write_text(path.read_text().replace("upstrem", "upstream").replace('max: "6.1.66"', 'max: "6.1.x"'))
    with pytest.raises(catalog_mod.CatalogError, match="DIO_POSITION_CORRUPTION_6_1_64: max '6.1.x' is not"):
        catalog_mod.load(rules_dir)


@pytest.mark.parametrize("name", ["catalog.yml", "kernel_issues.yml"])
def test_aliases_in_the_catalog_are_refused_with_file_and_line(tmp_path, name):
    rules_dir = catalog_with(tmp_path, lambda rules: None)
    path = tmp_path / name
    path.write_text(path.read_text() + "extra: &x [1]\nmore: *x\n")
    lines = path.read_text().count("\n")
    with pytest.raises(catalog_mod.CatalogError) as raised:
        catalog_mod.load(rules_dir)
    assert "found the alias *x" in str(raised.value)
    assert 'in "%s", line %d' % (path, lines) in str(raised.value)


def test_a_catalog_without_aliases_is_read_by_libyaml(monkeypatch, tmp_path):
    """The report step reads the catalog twice (rules, and SARIF's line numbers): libyaml's C
    parser reads it in a tenth of the time of the pure-Python loader that refuses aliases as it
    composes, which only a file with an alias (or an error, or deep nesting) still goes through."""
    def pure_python(*args):
        raise AssertionError("the pure-Python loader read a catalog without aliases")

    monkeypatch.setattr(safe_yaml.Loader, "compose_node", pure_python)
    assert catalog_mod.load().by_id == CATALOG.by_id
    assert safe_yaml.compose(os.path.join(ROOT, "rules", "catalog.yml")).tag == "tag:yaml.org,2002:map"
    path = tmp_path / "deep.yml"
    path.write_text("a: " + "[" * (safe_yaml.MAX_FAST_DEPTH + 1) + "]" * (safe_yaml.MAX_FAST_DEPTH + 1) + "\n")
    with pytest.raises(AssertionError, match="pure-Python loader"):
        safe_yaml.load(str(path))


def test_the_fact_paths_are_what_the_engine_computes():
    """derived and host are the engine's own facts: fact_paths lists exactly those."""
    from ext4audit.model import fact_paths
    record = facts()
    assert set(engine.filesystem_context(record["filesystems"][0], record)["derived"]) == set(fact_paths.DERIVED)
    assert set(engine.host_context(record)["host"]) == set(fact_paths.HOST)
    assert set(fact_paths.BY_SCOPE) == set(contract.RULE_SCOPES)


def test_the_fact_paths_cover_every_fixture():
    """Every superblock field, option and jbd2 statistic in the real output kept as fixtures is a
    path rules may read (tests/integration/test_fact_paths.py checks a live facts record)."""
    from ext4audit.model import fact_paths
    for name in os.listdir(os.path.join(ROOT, "tests", "fixtures", "dumpe2fs")):
        assert set(parse_dumpe2fs(fixture_text("dumpe2fs", name))) == set(fact_paths.SUPERBLOCK), name
    for name in os.listdir(os.path.join(ROOT, "tests", "fixtures", "ext4_options")):
        options = option_map(parse_ext4_options(fixture_text("ext4_options", name)))
        assert set(options) <= set(fact_paths.OPTIONS), (name, set(options) - set(fact_paths.OPTIONS))
    for name in os.listdir(os.path.join(ROOT, "tests", "fixtures", "jbd2")):
        if "fc_info" not in name:  # the fast-commit statistics file, not jbd2's info
            assert set(parse_jbd2_info(fixture_text("jbd2", name))) <= set(fact_paths.JBD2), name


