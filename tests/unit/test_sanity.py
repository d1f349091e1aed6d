"""`ansible-test sanity` on the collection as users get it: built with ansible-galaxy, installed into
a temporary ansible_collections/ext4audit/fleet, tested there with this Python (3.11, the only
one here; compile tests for the other versions the modules claim are skipped by ansible-test when
those Pythons are missing, and vermin holds the target code to 3.8 in test_target_code.py).

Slow (minutes the first time: ansible-test builds a venv per test tool from the package index and
keeps it in ~/.ansible/test/venv; later runs reuse them): validate-modules checks the modules'
argument specs and RETURN blocks against their code, pylint, pep8, yamllint and the rest."""

import glob
import os

from conftest import ROOT, VENV_BIN
from installed_collection import install_collection, run_sanity


def test_ansible_test_sanity_passes_on_the_installed_collection(tmp_path):
    run_sanity(os.path.join(VENV_BIN, "ansible-test"), "3.11", install_collection(tmp_path))


def test_every_controller_module_is_in_the_sanity_ignore_file():
    """ext4audit/ is the controller package, not Ansible content: each of its files needs its pep8 and
    pylint skip lines, or the slow sanity test above fails on a new file (found only minutes in)."""
    with open(os.path.join(ROOT, "tests", "sanity", "ignore-2.19.txt")) as handle:
        skipped = set(line.split(" #")[0] for line in handle)
    missing = ["%s %s!skip" % (os.path.relpath(path, ROOT), test)
               for path in sorted(glob.glob(os.path.join(ROOT, "ext4audit", "**", "*.py"), recursive=True)) for test in ("pep8", "pylint")
               if "%s %s!skip" % (os.path.relpath(path, ROOT), test) not in skipped]
    assert missing == [], "add to tests/sanity/ignore-2.19.txt: %s" % missing
