"""execution-environment.yml through the real `ansible-builder create`: the build context lists
only the collection built by `ansible-galaxy collection build` (ansible-builder's introspection
finds its Python and system requirements: tests/integration/test_installed_collection.py), the
lock (constraints.txt) becomes the build's constraints, and ansible-core and ansible-runner are
the lock's versions. (Building the image needs podman or docker with access to the base image's
registry: not part of the tests.)"""

import os
import re
import shutil

import yaml

from conftest import ROOT, VENV_BIN, run


def lock():
    with open(os.path.join(ROOT, "constraints.txt")) as handle:
        return {line.split("==")[0].lower(): line.strip() for line in handle
                if "==" in line and not line.lstrip().startswith("#")}


def test_ansible_builder_create_lists_the_collection_and_the_lock(tmp_path):
    for name in ("execution-environment.yml", "constraints.txt"):
        shutil.copy(os.path.join(ROOT, name), str(tmp_path))
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path / "dist"),
         ROOT])
    [tarball] = os.listdir(str(tmp_path / "dist"))
    run([os.path.join(VENV_BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
         "--context", "context"], cwd=str(tmp_path))
    context = tmp_path / "context"
    build = context / "_build"

    # Only the collection, the one built (its version is galaxy.yml's); no requirement of its own.
    galaxy = yaml.safe_load((build / "requirements.yml").read_text())
    assert galaxy == {"collections": [{"name": "collection/" + tarball, "type": "file"}]}
    assert (build / "collection" / tarball).is_file()
    assert not (build / "requirements.txt").exists() and not (build / "bindep.txt").exists()

    # Containerfile with podman on PATH, Dockerfile otherwise
    [containerfile] = [(context / name).read_text() for name in ("Containerfile", "Dockerfile") if (context / name).exists()]
    # the lock where ansible-builder's assemble and install-from-bindep scripts read constraints
    assert (build / "constraints" / "constraints.txt").read_text() == open(os.path.join(ROOT, "constraints.txt")).read()
    assert "COPY _build/constraints/constraints.txt /tmp/src/upper-constraints.txt" in containerfile
    assert 'CONSTRAINTS="-c /tmp/src/upper-constraints.txt"' in (build / "scripts" / "assemble").read_text()
    assert 'CONSTRAINTS="-c /output/upper-constraints.txt"' in (build / "scripts" / "install-from-bindep").read_text()
    pinned = lock()
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile, re.M).group(1).split()
    assert sorted(refs) == sorted([pinned["ansible-core"], pinned["ansible-runner"]])
    assert "RUN ext4audit --version" in containerfile
