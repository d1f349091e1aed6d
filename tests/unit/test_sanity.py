"""`ansible-test sanity` on the collection as users get it: built with ansible-galaxy, installed into
a temporary ansible_collections/ext4audit/fleet, tested there with this Python (3.11, the only
one here; compile tests for the other versions the modules claim are skipped by ansible-test when
those Pythons are missing, and vermin holds the target code to 3.8 in test_target_code.py).

Slow (minutes the first time: ansible-test builds a venv per test tool from the package index and
keeps it in ~/.ansible/test/venv; later runs reuse them): validate-modules checks the modules'
argument specs and RETURN blocks against their code, pylint, pep8, yamllint and the rest."""

import glob
import os
import shutil


from conftest import ROOT, VENV_BIN, run

# ansible-test puts pip into each venv with get-pip.py from ci-files.testing.ansible.com, which
# these machines cannot reach; tests/sanity/get_pip.py stands in, in the cache ansible-test reads
# first. 24.2: ansible-core 2.19's bootstrap pip (ansible_test/_internal/python_requirements.py).
GET_PIP_CACHE = os.path.expanduser("~/.ansible/test/cache/get_pip_24_2.py")


def test_ansible_test_sanity_passes_on_the_installed_collection(tmp_path):
    # As a user outside this checkout: `make test` exports ANSIBLE_CONFIG=ansible.cfg, whose
    # collections_path already holds ext4audit.fleet, and ansible-galaxy would then install nothing.
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path / "dist"), ROOT],
        cwd=str(tmp_path), env=env)
    [tarball] = os.listdir(str(tmp_path / "dist"))
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", str(tmp_path / "dist" / tarball),
         "-p", str(tmp_path)], cwd=str(tmp_path), env=env)
    if not os.path.exists(GET_PIP_CACHE):
        os.makedirs(os.path.dirname(GET_PIP_CACHE), exist_ok=True)
        shutil.copy(os.path.join(ROOT, "tests", "sanity", "get_pip.py"), GET_PIP_CACHE)
    collection = tmp_path / "ansible_collections" / "ext4audit" / "fleet"
    run([os.path.join(VENV_BIN, "ansible-test"), "sanity", "--python", "3.11", "--color", "no"],
        cwd=str(collection), env=env)


def test_every_controller_module_is_in_the_sanity_ignore_file():
    """ext4audit/ is the controller package, not Ansible content: each of its files needs its pep8 and
    pylint skip lines, or the slow sanity test above fails on a new file (found only minutes in)."""
    with open(os.path.join(ROOT, "tests", "sanity", "ignore-2.19.txt")) as handle:
        skipped = set(line.split(" #")[0] for line in handle)
    missing = ["%s %s!skip" % (os.path.relpath(path, ROOT), test)
               for path in sorted(glob.glob(os.path.join(ROOT, "ext4audit", "*.py"))) for test in ("pep8", "pylint")
               if "%s %s!skip" % (os.path.relpath(path, ROOT), test) not in skipped]
    assert missing == [], "add to tests/sanity/ignore-2.19.txt: %s" % missing
