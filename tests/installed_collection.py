"""The collection as users get it: built with ansible-galaxy and installed into a temporary
ansible_collections/ext4audit/fleet, outside this checkout (whose ansible.cfg already puts the
checkout itself on the collections path); and `ansible-test sanity` run there."""

import glob
import os
import re
import shutil
from typing import Dict

from conftest import ROOT, VENV_BIN, run


def user_env() -> Dict[str, str]:
    """As a user outside this checkout: `make test` exports ANSIBLE_CONFIG=ansible.cfg, whose
    collections_path already holds ext4audit.fleet, and ansible-galaxy would then install nothing."""
    return {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}


def install_collection(tmp_path) -> str:
    """Build and install the collection under tmp_path; the installed collection's folder."""
    env = user_env()
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path / "dist"), ROOT],
        cwd=str(tmp_path), env=env)
    [tarball] = os.listdir(str(tmp_path / "dist"))
    # --no-deps: amazon.aws (galaxy.yml's dependency, for the AMI path only) is not needed here
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "--no-deps",
         str(tmp_path / "dist" / tarball), "-p", str(tmp_path)], cwd=str(tmp_path), env=env)
    return str(tmp_path / "ansible_collections" / "ext4audit" / "fleet")


def provide_get_pip(ansible_test: str) -> None:
    """ansible-test puts pip into each venv with get-pip.py from ci-files.testing.ansible.com, which
    these machines cannot reach; tests/sanity/get_pip.py stands in, in the cache ansible-test reads
    first, under the name of the pip version this ansible-test bootstraps."""
    [requirements] = glob.glob(os.path.join(os.path.dirname(os.path.dirname(ansible_test)), "lib", "python3*",
                                            "site-packages", "ansible_test", "_internal", "python_requirements.py"))
    with open(requirements) as handle:
        pip_version = re.search(r"pip='([0-9.]+)'", handle.read()).group(1)
    cached = os.path.expanduser("~/.ansible/test/cache/get_pip_%s.py" % pip_version.replace(".", "_"))
    if not os.path.exists(cached):
        os.makedirs(os.path.dirname(cached), exist_ok=True)
        shutil.copy(os.path.join(ROOT, "tests", "sanity", "get_pip.py"), cached)


def run_sanity(ansible_test: str, python: str, collection: str) -> str:
    """`ansible-test sanity` with this core's ansible-test and Python on the installed collection."""
    provide_get_pip(ansible_test)
    return run([ansible_test, "sanity", "--python", python, "--color", "no"], cwd=collection, env=user_env())
