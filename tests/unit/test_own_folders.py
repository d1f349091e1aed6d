"""plugins/module_utils/own_folders.py: which left-behind work folders the sweep removes. The attack
by an unprivileged user in a shared folder: tests/integration/test_image_facts.py."""

import os
import subprocess

from ext4audit.parsers import own_folders


def dead_pid():
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def folder(parent, name, pid, mode=0o700):
    path = parent / name
    path.mkdir()
    os.chmod(str(path), mode)
    (path / own_folders.PID_FILE).write_text("%s\n" % pid)
    return path


def test_only_own_stale_folders_with_the_prefix_are_removed(tmp_path):
    stale = folder(tmp_path, "x-stale", dead_pid())
    kept = [folder(tmp_path, "x-live", os.getpid()),
            folder(tmp_path, "x-open", dead_pid(), mode=0o755),  # not a private folder: not made by claim
            folder(tmp_path, "y-other", dead_pid()),
            folder(tmp_path, "x-nopid", "not a number")]
    pid_link = folder(tmp_path, "x-pidlink", os.getpid())
    os.remove(str(pid_link / own_folders.PID_FILE))
    (pid_link / own_folders.PID_FILE).symlink_to(stale / own_folders.PID_FILE)  # a dead pid, through a link
    kept.append(pid_link)
    (tmp_path / "x-link").symlink_to(stale)
    assert own_folders.sweep(str(tmp_path), "x-") == [str(stale)]
    assert all(path.is_dir() for path in kept) and (tmp_path / "x-link").is_symlink()
    assert own_folders.sweep(str(tmp_path / "missing"), "x-") == []


def test_claim_writes_this_process(tmp_path):
    own_folders.claim(str(tmp_path))
    assert (tmp_path / own_folders.PID_FILE).read_text() == "%d\n" % os.getpid()
    assert own_folders.sweep(str(tmp_path.parent), tmp_path.name) == []  # this process is alive
