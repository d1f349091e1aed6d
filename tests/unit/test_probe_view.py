"""The probe section as an operator reads it, from the host reports of two real probe runs
(tests/fixtures/probe/README.md): the sentences it opens with, "for reference; not your
configuration" on confirmations of option sets the host does not use (report.html and
summary.md), the allocator verdicts, the tail-region check, and plot axes that name levels."""

import copy
import datetime
import json
import os
import re

import pytest

from conftest import ROOT
from ext4audit.formats import html as report_html, markdown
from ext4audit.probe import analysis as probe, sentences as probe_actions
from ext4audit.report import reports
from ext4audit.rules import catalog as catalog_mod
from test_html import HOSTILE, Page

FIXTURES = os.path.join(ROOT, "tests", "fixtures", "probe")
NOW = datetime.datetime(2026, 11, 25, 6, 18, 27, tzinfo=datetime.timezone.utc)
# /mnt/data: 4 MiB journal, 128-byte inodes, default options (data=ordered, delalloc, auto_da_alloc)
SMALL_JOURNAL = "host-report-6.18-journal4m-inode128.json"
# /mnt/data: mounted -o nodelalloc,sync
NODELALLOC_SYNC = "host-report-6.18-nodelalloc-sync.json"


def load(name):
    with open(os.path.join(FIXTURES, name)) as handle:
        return json.load(handle)


def page_of(report):
    summary = reports.summarize([report], report["run_id"], "high", True, NOW)
    return report_html.render(summary, [report], catalog_mod.load())


def probe_part(page):
    """The host's probe section, from its heading to the end of the host."""
    start = page.index("<h3>Probe: ")
    return page[start:page.index("</details>\n", page.index('<details class="replica">', start) + 1)]


def texts(report):
    return [probe_actions.text(sentence) for sentence in probe_actions.sentences(report)]


def allocator(**fields):
    """probe.allocator as the allocator diagnostics write it (the shape agreed for issue 17)."""
    issue = {"id": "scheduler_dependency", "name": "Scheduler Dependency", "verdict": "present", "reason": None,
             "pairs": 16, "effect": {"dspan_p50_ratio": 1.4, "dspan_p90_ratio": 3.1, "tail_share_trigger": 0.4,
                                     "tail_share_control": 0.1}, "p_value": 0.004, "test": "wilcoxon signed-rank"}
    issues = [issue,
              dict(issue, id="special_end", name="Special End", verdict="absent", reason="no d-span difference",
                   p_value=0.62, effect={"dspan_p50_ratio": 1.0, "dspan_p90_ratio": 1.02, "tail_share_trigger": 0.1,
                                         "tail_share_control": 0.1}),
              dict(issue, id="shared_global", name="Shared Global", verdict="absent", reason="no d-span difference",
                   p_value=0.41),
              dict(issue, id="normalization_bug", name="Normalization Bug", verdict="inconclusive",
                   reason="too few pairs before the time budget", pairs=3, p_value=None)]
    return dict({"status": "ran", "reason": None, "issues": issues}, **fields)


# ------------------------------------------------------------------ the sentences
def test_the_probe_section_opens_with_what_was_measured_for_the_host():
    report = load(SMALL_JOURNAL)
    part = probe_part(page_of(report))
    text = Page(part).text
    lead = "What the probe measured for this host (kernel 6.18.44-fc-v782):"
    # the sentences come first, the statistics after them
    assert text.index(lead) < text.index("The numbers behind it, for those who want them") < text.index("The sweep: ")
    assert part.index('<div class="probe-actions">') < part.index("<table") < part.index('class="confirmations"')
    assert [Page(li).text for li in re.findall(r"<li>(.*?)</li>", part[:part.index("</ul>")], re.S)] == [
        "Rename over an existing file: 2.2x slower with auto_da_alloc than with noauto_da_alloc on this kernel, "
        "measured on a replica of /mnt/data (5 repetitions, 1.7x to 11x); your /mnt/data uses it. Confirms "
        "EXT4_AUTO_DA_ALLOC_RENAME on /mnt/data (2x or more confirms it; raised to medium).",
        "Setting an extended attribute: 1.7x slower with journal 4 MiB, inode 128 than with journal 1024 MiB, "
        "inode 256 on this kernel, measured on a replica of /mnt/data (5 repetitions, 1.6x to 1.9x); your "
        "/mnt/data uses it. Confirms EXT4_SMALL_JOURNAL on /mnt/data (1.5x or more confirms it; raised to high). "
        "Confirms EXT4_INODE_128 on /mnt/data (1.5x or more confirms it; raised to medium).",
        "Buffered write + fsync: 1.7x slower with dioread_nolock,nodelalloc than with dioread_nolock,delalloc on "
        "this kernel, measured on a replica of /mnt/data (5 repetitions, 1.6x to 2x). For reference; not your "
        "configuration: /mnt/data does not use nodelalloc.",
        "Your disk size (1 GiB: /mnt/data is 1 GiB) is not in the tail region: 10% of the 128 runs at that level "
        "ended in the tail (d-span at or above 119.9 MiB), against 11% of all runs, within chance.",
        "The other factors (space already used, free-space fragmentation, CPUs writing, file size, share of each "
        "chunk written, chunk write order, fsync pattern, close + sync pattern, files written together, directory "
        "spread) depend on the applications' writes and the filesystem's history: the host's facts do not tell "
        "their levels."]
    # mount points and the probe's option labels are marked as host data; rule ids are code
    assert '<code class="host-data">/mnt/data</code> uses it' in part and "<code>EXT4_SMALL_JOURNAL</code>" in part


def test_statistics_are_in_plain_words():
    text = Page(probe_part(page_of(load(SMALL_JOURNAL)))).text
    assert ("What the d-span depends on most: fsync pattern explains 13% of its variance (5.9% by chance alone), "
            "chunk write order 11% (9.0%), close + sync pattern 8.7% (2.7%).") in text
    assert "Pairs that matter beyond each factor alone: disk size with free-space fragmentation 10% (2.0% by chance)" in text
    assert "d-span: first to last block of a run's files" in text and "p90 (the tail starts here)" in text
    assert "S_i" not in text and "Top factors" not in text and "chance 0." not in text


def test_a_confirmation_of_options_the_host_does_not_use_is_for_reference_only():
    """/mnt/data runs nodelalloc: the rename confirmation (it mounts delalloc + auto_da_alloc) is
    not its configuration; the buffered-write one (dioread_nolock + nodelalloc) is."""
    report = load(NODELALLOC_SYNC)
    part = probe_part(page_of(report))
    rows = dict((row[0], row) for row in Page(part[part.index('class="confirmations"'):]).rows[1:])
    assert rows["rename_over_existing"][-1] == "for reference; not your configuration (no delalloc)"
    assert rows["rename_over_existing"][3] == "auto_da_alloc against noauto_da_alloc"
    assert rows["buffered_write_fsync"][-1] == "yes" and rows["xattr_set"][-1] == "yes"
    assert rows["netfs_mkdir_existing"][-1] == "-"  # skipped: nothing measured
    said = texts(report)
    assert said[0].startswith("Buffered write + fsync: 1.8x slower with dioread_nolock,nodelalloc than with "
                              "dioread_nolock,delalloc on this kernel") and said[0].endswith("; your /mnt/data uses it.")
    assert said[2] == ("Rename over an existing file: 2.2x slower with auto_da_alloc than with noauto_da_alloc on this "
                       "kernel, measured on a replica of /mnt/data (5 repetitions, 1.8x to 5.8x). For reference; not "
                       "your configuration: /mnt/data does not use delalloc.")
    summary = reports.summarize([report], report["run_id"], "high", True, NOW)
    lines = markdown.document(summary, [report]).splitlines()
    [rename] = [line for line in lines if line.startswith("  - confirmation rename\\_over\\_existing")]
    [buffered] = [line for line in lines if line.startswith("  - confirmation buffered\\_write\\_fsync")]
    assert rename.endswith(", measured (for reference; not your configuration: no delalloc)")
    assert "not your configuration" not in buffered
    # the sentences open the host's probe in summary.md too, host strings escaped for Markdown
    rename_sentence = probe_actions.sentences(report)[2]
    assert "  - " + probe_actions.text(rename_sentence, markdown.md) in lines
    assert "  - Rename over an existing file: 2.2x slower with auto\\_da\\_alloc than with noauto\\_da\\_alloc" \
        in "\n".join(lines)


def test_findings_not_reproduced_or_not_measured_are_said_with_their_measurement():
    """The rename finding below its threshold, and the same rule on another filesystem (as confirm()
    words it), in the rename measurement's sentence."""
    report = load(SMALL_JOURNAL)
    [entry] = [c for c in report["probe"]["confirmations"] if c["id"] == "rename_over_existing"]
    entry.update(ratio=1.04, ratio_spread=[0.9, 1.3], repetitions=1)
    [finding] = [f for f in report["findings"] if f["rule"] == "EXT4_AUTO_DA_ALLOC_RENAME"]
    finding["confirmation"].update(status="not_reproduced", ratio=1.04, spread=[0.9, 1.3])
    finding.update(severity="info", escalated_because=None)
    other = copy.deepcopy(finding)
    other.update(mountpoint="/srv", device="/dev/vdb")
    other["confirmation"].update(status="not_measured", ratio=None, spread=None,
                                 reason="the probe replicated /mnt/data, not this filesystem")
    report["findings"].append(other)
    assert texts(report)[0] == (
        "Rename over an existing file: about as fast (1x) with auto_da_alloc as with noauto_da_alloc on this kernel, "
        "measured on a replica of /mnt/data (1 repetition, 0.9x to 1.3x); your /mnt/data uses it. Below the 2x that "
        "confirms EXT4_AUTO_DA_ALLOC_RENAME on /mnt/data: not reproduced on this kernel. EXT4_AUTO_DA_ALLOC_RENAME on "
        "/srv is not measured: the probe replicated /mnt/data, not this filesystem.")
    # a finding whose probe measured nothing at all gets a sentence of its own
    report["probe"]["confirmations"].remove(entry)
    finding["confirmation"].update(status="not_measured", reason="rename_over_existing error: mount failed")
    assert ("EXT4_AUTO_DA_ALLOC_RENAME on /mnt/data: the probe could not measure it on this kernel: "
            "rename_over_existing error: mount failed.") in texts(report)


def scope_skipped(probe_id, seed, missing, mountpoint="/mnt/data"):
    """The entry the probe writes for a confirmation its scope `own` did not run."""
    return {"id": probe_id, "seed": seed, "status": "skipped", "metric": None, "unit": "s", "mountpoint": None,
            "repetitions": 0, "ratio": None, "ratio_spread": None, "risky": None, "safe": None,
            "reason": "not your configuration: the replica of %s does not use %s (set chopper_probe_confirm_scope: "
                      "all to measure it)" % (mountpoint, missing)}


def test_a_confirmation_the_scope_skipped_is_no_sentence_and_its_finding_is_told_why():
    """chopper_probe_confirm_scope `own`: no number for an option set the host does not use, so no
    "for reference" sentence; a finding whose probe was skipped is never confirmed, and says why."""
    report = load(SMALL_JOURNAL)
    confirmations = report["probe"]["confirmations"]
    [buffered] = [c for c in confirmations if c["id"] == "buffered_write_fsync"]
    confirmations[confirmations.index(buffered)] = scope_skipped("buffered_write_fsync", "001", "nodelalloc")
    said = texts(report)
    assert not [s for s in said if "Buffered write" in s or "For reference" in s], said
    assert said[0].startswith("Rename over an existing file: 2.2x slower")
    # the same for a finding of the skipped probe, as confirm() records it
    [rename] = [c for c in confirmations if c["id"] == "rename_over_existing"]
    confirmations[confirmations.index(rename)] = scope_skipped("rename_over_existing", "000", "delalloc")
    [finding] = [f for f in report["findings"] if f["rule"] == "EXT4_AUTO_DA_ALLOC_RENAME"]
    finding.update(severity=finding["base_severity"], escalated_because=None)
    probe.confirm([finding], dict(report["probe"], status="ran"), catalog_mod.load().by_id)
    assert finding["confirmation"]["status"] == "not_measured" and finding["severity"] == "info"
    reason = ("rename_over_existing skipped: not your configuration: the replica of /mnt/data does not use delalloc "
              "(set chopper_probe_confirm_scope: all to measure it)")
    assert finding["confirmation"]["reason"] == reason
    assert "EXT4_AUTO_DA_ALLOC_RENAME on /mnt/data: the probe did not measure it: %s." % reason in texts(report)
    assert not [s for s in texts(report) if "Confirms EXT4_AUTO_DA_ALLOC_RENAME" in s]
    part = probe_part(page_of(report))  # the table gives the reason, and no verdict on the configuration
    rows = dict((row[0], row) for row in Page(part[part.index('class="confirmations"'):]).rows[1:])
    assert rows["buffered_write_fsync"][-2] == "skipped: " + scope_skipped("buffered_write_fsync", "001",
                                                                             "nodelalloc")["reason"]
    assert rows["buffered_write_fsync"][-1] == "-"


def test_a_sync_mount_places_the_host_on_the_fsync_level():
    said = texts(load(NODELALLOC_SYNC))
    assert ("Your fsync pattern (fsync after every write: /mnt/data is mounted sync) is not in the tail region: 0% "
            "of the 16 runs at that level ended in the tail (d-span at or above 51.34 MiB), against 10% of all runs, "
            "within chance.") in said
    assert said[-1].startswith("The other factors (space already used, ") and "fsync pattern" not in said[-1]


def test_tail_region_is_judged_against_chance():
    report = load(SMALL_JOURNAL)
    level = report["probe"]["sweep"]["mapping"]["factors"]["DiskSize"]["1 GiB"]
    level["tail_share"] = 30 / 128   # 30 of 128 runs against 10.5% of all: chance gives that once in 10^4
    assert ("Your disk size (1 GiB: /mnt/data is 1 GiB) is in the tail region: 23% of the 128 runs at that level "
            "ended in the tail (d-span at or above 119.9 MiB), against 11% of all runs, more than chance explains."
            ) in texts(report)
    level["tail_share"] = 3 / 128
    assert any(t.startswith("Your disk size (1 GiB: /mnt/data is 1 GiB) is clear of the tail: 2.3% of the 128 runs")
               for t in texts(report))
    for fs in report["filesystems"]:
        fs["superblock"] = dict(fs["superblock"] or {}, block_count=64 << 20)  # 256 GiB
    assert ("Your /mnt/data is 256 GiB, outside the sweep's disk sizes (256 MiB to 1 GiB): its size has no place "
            "in the tail map.") in texts(report)
    assert texts(report)[-1].startswith("Whether your configuration is in the tail region cannot be inferred: "
                                        "the sweep's factors (disk size, space already used, ")


# ------------------------------------------------------------------ the allocator verdicts
def test_allocator_verdicts_when_the_probe_diagnosed_them():
    report = load(SMALL_JOURNAL)
    assert not [t for t in texts(report) if "allocator" in t]  # no allocator key: nothing said
    report["probe"]["allocator"] = allocator()
    said = texts(report)
    expected = ("This kernel shows 1 of Chopper's four allocator issues (paired runs, trigger against control). "
                "Present: Scheduler Dependency (d-span p90 3.1x with the trigger than without; 40% of trigger runs "
                "in the tail against 10%; p = 0.004, 16 pairs). Inconclusive: Normalization Bug (too few pairs before "
                "the time budget). Absent: Special End (no d-span difference), Shared Global (no d-span difference).")
    assert expected in said
    # after the confirmations, before the tail
    assert said.index(expected) == 3 and said[4].startswith("Your disk size")
    assert expected in Page(probe_part(page_of(report))).text
    for issue in report["probe"]["allocator"]["issues"]:
        issue.update(verdict="absent", reason=None)
    assert texts(report)[3] == ("This kernel shows none of Chopper's four allocator issues (paired runs, trigger "
                                "against control). Absent: Scheduler Dependency, Special End, Shared Global, "
                                "Normalization Bug.")


@pytest.mark.parametrize("status, said", [
    ("skipped", "Chopper's four allocator issues were not diagnosed on this kernel: the diagnostics were skipped: "
                "one CPU: Scheduler Dependency cannot be measured."),
    ("error", "Chopper's four allocator issues were not diagnosed on this kernel: the diagnostics failed: "
              "one CPU: Scheduler Dependency cannot be measured.")])
def test_allocator_that_did_not_run_is_one_sentence(status, said):
    report = load(SMALL_JOURNAL)
    report["probe"]["allocator"] = {"status": status, "reason": "one CPU: Scheduler Dependency cannot be measured",
                                    "issues": []}
    assert [t for t in texts(report) if "allocator" in t] == [said]


# ------------------------------------------------------------------ host strings stay text
def test_host_strings_in_the_sentences_are_escaped():
    report = json.loads(json.dumps(load(SMALL_JOURNAL)).replace('"/mnt/data', json.dumps(HOSTILE)[:-1]))
    report["probe"]["allocator"] = allocator(issues=[dict(allocator()["issues"][0], name=HOSTILE, reason=HOSTILE,
                                                          verdict="inconclusive")])
    for entry in report["probe"]["confirmations"]:
        if entry.get("risky"):
            entry["risky"]["label"] = HOSTILE
    part = probe_part(page_of(report))
    actions = part[part.index('<div class="probe-actions">'):part.index("</div>")]
    assert "<script>" not in actions and actions.count("&lt;script&gt;window.__pwned=1&lt;/script&gt;") >= 8
    parsed = Page(actions)
    assert not [t for t, _ in parsed.tags if t not in ("div", "p", "b", "ul", "li", "code", "span")]
    assert "your %s uses it" % HOSTILE in parsed.text
    summary = reports.summarize([report], report["run_id"], "high", True, NOW)
    document = markdown.document(summary, [report])
    assert "<script>" not in document and "&lt;script&gt;window.\\_\\_pwned=1&lt;/script&gt;" in document


# ------------------------------------------------------------------ levels and axes
def test_levels_are_named_by_what_they_mean():
    assert probe.level_name("Fsync", [False, True, False, True]) == "fsync after writes 2 and 4"
    assert probe.level_name("Fsync", [True, True, False, True]) == "fsync after writes 1, 2 and 4"
    assert probe.level_name("Fsync", [False] * 4) == "no fsync"
    assert probe.level_name("Fsync", [True] * 4) == "fsync after every write"
    assert probe.level_name("Sync", [False, False, False, True]) == "close + sync after the last write"
    assert probe.level_name("Sync", [False, True, False, True]) == "close + sync after writes 2 and 4"
    assert probe.level_name("ChunkOrder", [3, 1, 0, 2]) == "order 3-1-0-2"
    assert probe.level_name("FileSize", 96 << 10) == "96 KiB" and probe.level_name("DiskSize", 1 << 30) == "1 GiB"
    assert probe.level_name("UsedRatio", 0.4) == "40% used" and probe.level_name("CPUCount", 1) == "1 CPU"
    assert probe.level_name("InternalDensity", 0.5) == "50% written (holes)"
    assert probe.level_name("InternalDensity", 1.5) == "150% written (overwrites)"
    assert probe.level_name("FreeSpaceLayout", 6) == "not fragmented"
    assert probe.level_name("FileCount", 2) == "2 files" and probe.level_name("DirectorySpan", 12) == "span 12"
    for level_set in ("short", "paper"):  # every level of every factor has a name of its own
        for factor, names in probe.level_names(level_set).items():
            assert len(set(names.values())) == len(names), factor
            assert probe.factor_title(factor) != factor


def svg_texts(svg):
    """The text a person sees in an SVG matplotlib wrote (svg.fonttype none: <text> elements)."""
    return [Page(t).text for t in re.findall(r"<text\b[^>]*>(.*?)</text>", svg, re.S)]


def test_plot_axes_name_levels_and_units():
    report = load(NODELALLOC_SYNC)
    view = report_html._probe_view(report["probe"], [], 0, probe_actions.own_levels(report))
    plots = dict(view["plots"])
    tail = svg_texts(plots["Tail share per factor level (Chopper Figure 5)"])
    for label in ("order 3-1-0-2", "fsync after writes 2 and 4", "fsync after every write", "no fsync",
                  "close + sync after the last write", "96 KiB", "chunk write order", "fsync pattern", "file size",
                  "runs of the level in the tail (%)", "your configuration", "40%"):
        assert label in tail, label
    # no bit strings or bracketed lists under the bars
    assert not [t for t in tail if re.fullmatch(r"[01]{3,}|\[[0-9, ]+\]|[0-9]{4}", t)], tail
    prioritization = svg_texts(plots["Factor prioritization (Chopper Figure 4)"])
    assert "fsync pattern (16 levels)" in prioritization and "disk size (2 levels)" in prioritization
    assert "share of the d-span's variance the factor explains (%)" in prioritization
    # the host's own fsync level (every write: it is mounted sync) is marked; a host whose own
    # levels are not among the plotted factors gets no mark
    assert "your configuration" in tail
    report = load(SMALL_JOURNAL)
    view = report_html._probe_view(report["probe"], [], 0, probe_actions.own_levels(report))
    assert probe_actions.own_levels(report) == {"DiskSize": "1 GiB"}
    assert "your configuration" not in svg_texts(dict(view["plots"])["Tail share per factor level (Chopper Figure 5)"])
    # own levels of two plotted factors: two marks, one legend entry
    report = load(NODELALLOC_SYNC)
    view = report_html._probe_view(report["probe"], [], 0, {"Fsync": "1111", "FileSize": "96 KiB"})
    tail = dict(view["plots"])["Tail share per factor level (Chopper Figure 5)"]
    assert svg_texts(tail).count("your configuration") == 1

