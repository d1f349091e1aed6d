"""Shared test helpers: the repository paths and real loop-mounted ext4 filesystems."""

import json
import os
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
VENV_BIN = os.path.dirname(sys.executable)
sys.path.insert(0, ROOT)
sys.path.insert(0, os.path.join(ROOT, "module_utils"))


def fixture_text(*parts):
    with open(os.path.join(FIXTURES, *parts), "rb") as handle:
        return handle.read().decode("utf-8", "surrogateescape")


def run(argv, **kwargs):
    """Run an argument list (never a shell string); fail with its output if it fails."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)
    if result.returncode != 0:
        raise AssertionError("%s failed (rc=%d):\n%s" % (argv, result.returncode, result.stdout.decode(errors="replace")))
    return result.stdout.decode(errors="replace")


class LoopFilesystems:
    """Sparse ext4 images on tmpfs, attached to loop devices this object attached, mounted under
    its own folder. Detaches and removes only what it made."""

    def __init__(self, base):
        self.base = base
        self.loops, self.mounts = [], []

    def make(self, name, size="1G", mkfs_args=(), tune2fs_args=(), mount_options=None, mountpoint=None):
        image = os.path.join(self.base, name + ".img")
        run(["truncate", "-s", size, image])
        run(["mkfs.ext4", "-F", "-q"] + list(mkfs_args) + [image])
        if tune2fs_args:
            run(["tune2fs"] + list(tune2fs_args) + [image])
        loop = run(["losetup", "--find", "--show", image]).strip()
        self.loops.append(loop)
        target = mountpoint or os.path.join(self.base, "mnt", name)
        os.makedirs(target, exist_ok=True)
        run(["mount", "-t", "ext4"] + (["-o", mount_options] if mount_options else []) + [loop, target])
        self.mounts.append(target)
        return {"image": image, "device": loop, "mountpoint": target}

    def cleanup(self):
        for target in reversed(self.mounts):
            subprocess.run(["umount", target], check=False)
        for loop in self.loops:
            subprocess.run(["losetup", "-d", loop], check=False)
        self.mounts, self.loops = [], []


needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root (loop devices, mount)")


@pytest.fixture
def loopfs(tmp_path_factory):
    base = tmp_path_factory.mktemp("loopfs", numbered=True)
    # Images live on tmpfs when /dev/shm is there: fast and never touching the real disk.
    shm_base = os.path.join("/dev/shm", "ext4audit-test-%d-%s" % (os.getpid(), base.name))
    os.makedirs(shm_base)
    fs = LoopFilesystems(shm_base)
    try:
        yield fs
    finally:
        fs.cleanup()
        subprocess.run(["rm", "-rf", "--one-file-system", shm_base], check=False)


def ansible_playbook(*args, env=None):
    """Run the real ansible-playbook from the project's venv; return (rc, output)."""
    environ = dict(os.environ, ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"), ANSIBLE_NOCOLOR="1",
                   ANSIBLE_FORCE_COLOR="0", **(env or {}))
    result = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook")] + list(args), cwd=ROOT, env=environ,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    return result.returncode, result.stdout.decode(errors="replace")


def load_json(path):
    with open(path) as handle:
        return json.load(handle)
