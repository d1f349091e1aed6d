"""The probe's pure parts (no root): hole layouts, the player's write plan, the directory tree,
extent metrics and the replica of the audited filesystem."""

import atexit
import shutil
import tempfile

import pytest

from ext4audit.parsers import probe_payload
from ext4audit.parsers.ext4_probe.confirmations import paired, with_options
from ext4audit.parsers.ext4_probe.extents import extent_metrics
from ext4audit.parsers.ext4_probe.layouts import hole_sizes
from ext4audit.parsers.ext4_probe.player import file_dirs, tree_path, write_plan
from ext4audit.parsers.ext4_probe.replica import mkfs_argv, replica

# The probe as ext4_probe_run runs it: its payload (one zip), built from this checkout.
PAYLOAD_DIR = tempfile.mkdtemp(prefix="ext4-probe-payload-")
atexit.register(shutil.rmtree, PAYLOAD_DIR, True)
PROBE_PATH = probe_payload.write(PAYLOAD_DIR)


@pytest.mark.parametrize("layout", [1, 2, 3, 4, 5])
@pytest.mark.parametrize("free_blocks", [40000, 60000, 250000])
def test_hole_sizes_fit_and_keep_the_byte_mass(layout, free_blocks):
    sizes = hole_sizes(free_blocks, layout)
    used = sum(s + 1 for s in sizes)  # each hole has a one-block separator
    assert used <= free_blocks
    # the byte mass is kept: at most 0.2% of the free space is left unpunched (Chopper's int()
    # truncation left whole buckets of large holes unpunched)
    assert free_blocks - used <= 0.002 * free_blocks
    assert all(s & (s - 1) == 0 for s in sizes), "holes are powers of two blocks"


def test_layout_5_is_not_layout_6_on_small_disks():
    # Chopper's int() truncation punched nothing for layout 5 below a few GiB; here it still fragments.
    sizes = hole_sizes(60000, 5)  # about 234 MiB of 4 KiB blocks
    assert len(sizes) >= 2
    assert sum(sizes) > 0.9 * 60000


def test_layouts_get_coarser_from_1_to_5():
    medians = []
    for layout in (1, 2, 3, 4, 5):
        sizes = sorted(hole_sizes(250000, layout))
        medians.append(sizes[len(sizes) // 2])
    assert medians == sorted(medians) and medians[0] < medians[-1]


def test_hole_sizes_are_deterministic():
    assert hole_sizes(100000, 2) == hole_sizes(100000, 2)


def treatment(**overrides):
    base = {"FileSize": 64 * 1024, "ChunkCount": 4, "InternalDensity": 1.0, "ChunkOrder": [0, 1, 2, 3],
            "Fsync": [False] * 4, "Sync": [False, False, False, True], "FileCount": 1, "DirectorySpan": 1,
            "CPUCount": 1}
    base.update(overrides)
    return base


def test_write_plan_density_below_one_writes_each_chunk_tail():
    plan = write_plan(treatment(InternalDensity=0.5, ChunkOrder=[2, 0, 3, 1]))
    assert plan == [[(2 * 16384 + 8192, 8192), (8192, 8192), (3 * 16384 + 8192, 8192), (16384 + 8192, 8192)]]


def test_write_plan_density_above_one_overwrites_the_tails_in_a_second_pass():
    plan = write_plan(treatment(InternalDensity=1.5, ChunkOrder=[1, 0, 3, 2]))
    assert plan[0] == [(16384, 16384), (0, 16384), (49152, 16384), (32768, 16384)]
    assert plan[1] == [(16384 + 8192, 8192), (8192, 8192), (49152 + 8192, 8192), (32768 + 8192, 8192)]


def test_directory_tree_and_file_placement_follow_chopper():
    assert tree_path(3) == "dir.3"
    assert tree_path(15) == "dir.3/dir.7/dir.15"
    assert tree_path(30) == "dir.6/dir.14/dir.30"
    assert file_dirs(1, 5) == [7]          # one file: the last candidate dir (2 + span)
    assert file_dirs(2, 12) == [3, 14]     # two files: the first and the last
    assert file_dirs(2, 1) == [3, 3]


def test_extent_metrics():
    bs = 4096
    contiguous = [(0, 1000 * bs, 16 * bs)]
    assert extent_metrics(contiguous, bs) == {"dspan": 16 * bs, "extents": 1, "layout_score": 1.0}
    # two extents, the second far away: d-span covers the gap; one block of 15 is misplaced
    split = [(8 * bs, 5000 * bs, 8 * bs), (0, 1000 * bs, 8 * bs)]
    metrics = extent_metrics(split, bs)
    assert metrics["dspan"] == 5008 * bs - 1000 * bs
    assert metrics["extents"] == 2
    assert metrics["layout_score"] == round(14 / 15, 4)
    # logically split but physically adjacent: still a perfect layout
    adjacent = [(0, 1000 * bs, 4 * bs), (4 * bs, 1004 * bs, 4 * bs)]
    assert extent_metrics(adjacent, bs)["layout_score"] == 1.0
    assert extent_metrics([], bs) == {"dspan": 0, "extents": 0, "layout_score": 1.0}


def test_with_options_replaces_opposite_spellings():
    options = ["rw", "delalloc", "auto_da_alloc", "data=ordered", "dioread_nolock", "commit=5"]
    assert with_options(options, ["noauto_da_alloc"]) == [
        "rw", "delalloc", "data=ordered", "dioread_nolock", "commit=5", "noauto_da_alloc"]
    assert with_options(options, ["nodelalloc", "dioread_nolock"]) == [
        "rw", "auto_da_alloc", "data=ordered", "commit=5", "nodelalloc", "dioread_nolock"]
    assert with_options(["data=writeback"], ["data=ordered"]) == ["data=ordered"]


def test_replica_copies_superblock_settings_and_drops_unreplayable_options():
    fs = {"mountpoint": "/data", "options": ["rw", "data=ordered", "noload", "resuid=0", "commit=30", "delalloc"],
          "superblock": {"block_size": 1024, "inode_size": 128, "journal_bytes": 4 << 20,
                         "features": ["has_journal", "extent", "needs_recovery", "64bit"]}}
    mkfs, options, adjustments = replica(fs)
    assert mkfs == {"block_size": 1024, "inode_size": 128, "journal_bytes": 4 << 20,
                    "features": ["has_journal", "extent", "64bit"]}
    assert options == ["data=ordered", "commit=30", "delalloc"]
    assert adjustments == []
    argv = mkfs_argv(mkfs, 256 << 20, "/s/img")
    assert argv[argv.index("-b") + 1] == "1024" and argv[argv.index("-I") + 1] == "128"
    assert argv[argv.index("-J") + 1] == "size=4"
    assert argv[-2:] == ["/s/img", str(256 << 10) + "k"]


def test_replica_without_superblock_says_so():
    fs = {"mountpoint": "/", "options": ["rw", "delalloc"], "superblock": None}
    mkfs, _, adjustments = replica(fs)
    argv = mkfs_argv(mkfs, 1 << 28, "i")
    assert mkfs["journal_bytes"] == 0 and argv[argv.index("-O") + 1] == "^has_journal"
    assert any("superblock facts unavailable" in a for a in adjustments)
    assert any("no journal" in a for a in adjustments)


def test_paired_ratio_and_spread():
    assert paired([2.0, 4.0, 3.0], [1.0, 1.0, 1.0]) == (3.0, [2.0, 4.0])
    assert paired([], []) == (None, None)
