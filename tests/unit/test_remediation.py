"""rules/remediation.yml's loader and the plan and outcome of ext4audit/steps/remediation.py."""

import pytest

from ext4audit.rules import catalog
from ext4audit.steps import remediation

DATA = remediation.load(known_rules=list(catalog.load().by_id))
SB = {"block_count": 524288, "block_size": 4096, "features": ["has_journal", "flex_bg"], "inode_size": 128}


def report(*findings):
    return {"host": "h", "filesystems": [{"mountpoint": "/d", "device": "/dev/vdb", "superblock": SB}],
            "findings": [dict(dict(mountpoint="/d", device="/dev/vdb", waived=False, tags=[]), **f) for f in findings]}


def test_selection_severity_waivers_opt_in_and_tags():
    findings = report({"rule": "EXT4_LONG_COMMIT", "severity": "medium", "tags": []},
                      {"rule": "EXT4_DATA_WRITEBACK", "severity": "high", "waived": True},
                      {"rule": "EXT4_AUTO_DA_ALLOC_RENAME", "severity": "medium", "tags": ["rename"]},
                      {"rule": "EXT4_SMALL_JOURNAL", "severity": "low", "tags": ["journal"]})
    assert [i["rule"] for i in remediation.plan_host(findings, DATA)] == ["EXT4_LONG_COMMIT"]
    assert [i["rule"] for i in remediation.plan_host(findings, DATA, min_severity="low")] == \
        ["EXT4_LONG_COMMIT", "EXT4_SMALL_JOURNAL"]
    # opt-in only when named; a waived finding never, even when named
    named = remediation.plan_host(findings, DATA, rules=["EXT4_AUTO_DA_ALLOC_RENAME", "EXT4_DATA_WRITEBACK", "journal"])
    assert [i["rule"] for i in named] == ["EXT4_AUTO_DA_ALLOC_RENAME", "EXT4_SMALL_JOURNAL"]
    assert "zero-length files" in named[0]["tradeoff"]
    assert named[1]["commands"][-1] == ["tune2fs", "-O", "has_journal", "-J", "size=64", "/dev/vdb"]


def test_inode_128_is_a_rebuild_with_flex_bg_and_choices_pick_another_fix():
    [item] = remediation.plan_host(report({"rule": "EXT4_INODE_128", "severity": "medium"}), DATA)
    assert item["class"] == "rebuild" and "mkfs.ext4 -I 256" in item["plan"]
    [item] = remediation.plan_host(report({"rule": "EXT4_DIOREAD_NOLOCK_NODELALLOC", "severity": "medium"}), DATA,
                                   choices={"EXT4_DIOREAD_NOLOCK_NODELALLOC": "dioread_lock"})
    assert item["fstab"] == {"add": ["dioread_lock"], "drop": ["dioread_nolock"]}
    with pytest.raises(remediation.RemediationError, match="ext4_remediate_choices.EXT4_LONG_COMMIT: no choice 'x'"):
        remediation.plan_host(report({"rule": "EXT4_LONG_COMMIT", "severity": "medium"}), DATA,
                              choices={"EXT4_LONG_COMMIT": "x"})


def test_outcome_fixed_pending_failed():
    items = remediation.plan_host(report({"rule": "EXT4_LONG_COMMIT", "severity": "medium"},
                                         {"rule": "EXT4_DATA_WRITEBACK", "severity": "high"},
                                         {"rule": "EXT4_NOBARRIER", "severity": "medium"},
                                         {"rule": "EXT4_SMALL_JOURNAL", "severity": "medium"}), DATA)
    by_rule = dict((item["rule"], item) for item in items)
    applied = [{"item": by_rule["EXT4_DATA_WRITEBACK"],
                "pending": "the kernel refused the remount: takes effect at the next mount or reboot"},
               {"item": by_rule["EXT4_NOBARRIER"], "failed": True, "msg": "/etc/fstab: no entry for /d"}]
    after = report({"rule": "EXT4_DATA_WRITEBACK", "severity": "high"}, {"rule": "EXT4_NOBARRIER", "severity": "medium"},
                   {"rule": "EXT4_SMALL_JOURNAL", "severity": "medium"})
    result = dict((r["rule"], r) for r in remediation.outcome(items, applied, after))
    assert result["EXT4_LONG_COMMIT"]["status"] == "fixed"
    assert result["EXT4_DATA_WRITEBACK"]["status"] == "pending" and "next mount" in result["EXT4_DATA_WRITEBACK"]["reason"]
    assert result["EXT4_NOBARRIER"] == {"rule": "EXT4_NOBARRIER", "mountpoint": "/d", "class": "live",
                                        "status": "failed", "reason": "/etc/fstab: no entry for /d"}
    assert result["EXT4_SMALL_JOURNAL"]["status"] == "pending" and "ext4_remediate_offline" in \
        result["EXT4_SMALL_JOURNAL"]["reason"]


@pytest.mark.parametrize("text,error", [
    ("schema: x\n", "schema must be ext4-fleet-audit/remediation/v1"),
    ("schema: ext4-fleet-audit/remediation/v1\nfixes:\n  NO_SUCH: {tradeoff: t, choices: []}\n", "fixes.NO_SUCH: no such rule"),
    ("schema: ext4-fleet-audit/remediation/v1\nfixes:\n  EXT4_LONG_COMMIT: {choices: []}\n", "fixes.EXT4_LONG_COMMIT.tradeoff"),
    ("schema: ext4-fleet-audit/remediation/v1\nfixes:\n  EXT4_LONG_COMMIT:\n    tradeoff: t\n    choices:\n"
     "      - {name: a, class: soon, fstab: {add: [x]}}\n", "choices[0].class: one of live"),
    ("schema: ext4-fleet-audit/remediation/v1\nfixes:\n  EXT4_LONG_COMMIT:\n    tradeoff: t\n    choices:\n"
     "      - {name: a, class: live, fstab: {add: [x]}}\n", "choices[0].effective"),
])
def test_bad_data_names_the_file_and_field(tmp_path, text, error):
    path = tmp_path / "remediation.yml"
    path.write_text(text)
    with pytest.raises(remediation.RemediationError) as exc:
        remediation.load(str(path), known_rules=list(catalog.load().by_id))
    assert str(path) in str(exc.value) and error in str(exc.value)
