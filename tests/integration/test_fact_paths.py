"""ext4audit/model/fact_paths.py against a live facts record: the real ext4_facts module, run by ansible,
on a loop-mounted ext4 with a journal, non-default options and an fstab entry, beside a real
network mount (sshfs over a loopback sshd). Every key the record has is a path rules may read (so
no real fact is refused as a typo), and the listed keys of the fixed-shape parts are exactly the
record's (so no listed path is one the module never fills)."""

from ext4audit.parsers.ext4_parsers.mounts import option_map
from conftest import needs_root
from ext4audit.model import fact_paths
from ext4audit.rules import engine
from test_module_errors import run_module

pytestmark = needs_root


def keys(root, prefix=""):
    return set(key for key in getattr(fact_paths, root) if key.startswith(prefix) and "." not in key[len(prefix):])


def test_a_live_facts_record_has_exactly_the_listed_paths(loopfs, sshfs_mount, tmp_path):
    made = loopfs.make("facts", mount_options="nodelalloc,commit=30,stripe=8,journal_async_commit,data=writeback")
    fstab = tmp_path / "fstab"
    fstab.write_text("%s %s ext4 defaults,nodelalloc 0 2\n" % (made["device"], made["mountpoint"]))
    record = run_module("fstab_path=%s" % fstab, tmp_path)["ext4_facts"]
    fs, = [f for f in record["filesystems"] if f["mountpoint"] == made["mountpoint"]]
    netfs, = [f for f in record["netfs"] if f["mountpoint"] == sshfs_mount]

    assert set(fs) == keys("FILESYSTEM")
    assert set(fs["fstab"]) == set(k.split(".", 1)[1] for k in fact_paths.FILESYSTEM if k.startswith("fstab."))
    assert set(fs["superblock"]) == set(fact_paths.SUPERBLOCK)
    assert set(fs["queue"]) == set(fact_paths.QUEUE)
    assert fs["jbd2"] and set(fs["jbd2"]) <= set(fact_paths.JBD2), set(fs["jbd2"]) - set(fact_paths.JBD2)
    options = option_map(fs["options"])
    assert fs["options_source"] == "proc" and {"delalloc", "commit", "stripe", "data"} <= set(options)
    assert set(options) <= set(fact_paths.OPTIONS), set(options) - set(fact_paths.OPTIONS)
    assert set(netfs) == set(fact_paths.NETFS)
    assert set(record["kernel"]) == keys("KERNEL")
    assert set(record["kernel"]["os_release"]) <= set(k.split(".", 1)[1] for k in fact_paths.KERNEL if "." in k)
    # The engine's own facts, from the same record.
    assert set(engine.filesystem_context(fs, record)["derived"]) == set(fact_paths.DERIVED)
    assert set(engine.host_context(record)["host"]) == set(fact_paths.HOST)
    # Every root of a filesystem rule's context is listed, and nothing else is.
    context = engine.filesystem_context(fs, record)
    assert set(fact_paths.BY_SCOPE["filesystem"]) == set(k for k, v in context.items() if isinstance(v, dict))
