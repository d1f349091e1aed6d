"""ext4audit merge at fleet size (issue 28: 10 slices of a 10,000-host fleet in 30 s,
bench/merge.py): a finished slice's records are linked into the merged folder, not copied, and
copied where a link cannot go (another filesystem). The slices are bench/aggregate.py's hosts
(real fixtures through the real parsers), each reported by the real command."""

import os
import tempfile

import pytest

from ext4audit.steps import merge
from test_reports import cli
from test_summary_md import _aggregate

SHM = "/dev/shm"  # tmpfs: another filesystem than the slices' (tmp_path)


@pytest.fixture(scope="module")
def slices(tmp_path_factory):
    aggregate = _aggregate()
    base = tmp_path_factory.mktemp("slices")
    specs = aggregate.fleet(40, 20261122, baseline=False)
    folders = []
    for number, part in enumerate((specs[:20], specs[20:])):
        folder = str(base / ("slice-%d" % number))
        aggregate.write_run(folder, part)
        rc, out, err = cli("report", folder, "--formats", "tap", "--store", "off")
        assert rc in (0, 1, 2) and "error" not in err, (out, err)
        folders.append(folder)
    return folders


def records(folder):
    return sorted(os.path.join(sub, name) for sub in ("facts", "probe") for name in os.listdir(os.path.join(folder, sub)))


def test_a_slices_records_are_linked_into_the_merged_folder_or_copied_across_filesystems(slices, tmp_path):
    out = str(tmp_path / "merged")
    rc, _, err = cli("merge", out, *slices, "--formats", "junit", "--store", "off")
    assert rc in (0, 1, 2) and "error" not in err, err
    sources = dict((name, os.path.join(folder, name)) for folder in slices for name in records(folder))
    assert records(out) == sorted(sources) and len(sources) >= 40
    for name, source in sources.items():
        assert os.path.samefile(os.path.join(out, name), source), name  # one inode: no bytes copied

    if not os.path.isdir(SHM) or os.stat(SHM).st_dev == os.stat(str(tmp_path)).st_dev:
        pytest.skip("no second filesystem at %s for the copy" % SHM)
    out = tempfile.mkdtemp(dir=SHM)
    os.rmdir(out)
    try:
        merge.stage(out, slices)
        assert records(out) == sorted(sources)
        for name, source in sources.items():
            with open(source, "rb") as original, open(os.path.join(out, name), "rb") as copy:
                assert copy.read() == original.read(), name
            assert not os.path.samefile(os.path.join(out, name), source)
    finally:
        merge.discard(out)
