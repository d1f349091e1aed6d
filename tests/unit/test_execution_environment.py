"""execution-environment.yml through the real `ansible-builder create`: the build context it
writes installs the project's pins (requirements.txt for ansible-core and ansible-runner,
requirements-controller.txt for the controller package), bindep.txt's packages and the collection
built by `ansible-galaxy collection build`. (Building the image needs podman or docker with access
to the base image's registry: not part of the tests.)"""

import os
import re
import shutil

from conftest import ROOT, VENV_BIN, run


def pins(path):
    with open(path) as handle:
        return {line.split("==")[0].lower(): line.strip() for line in handle
                if "==" in line and not line.lstrip().startswith("#")}


def test_ansible_builder_create_writes_the_projects_pins(tmp_path):
    for name in ("execution-environment.yml", "bindep.txt", "requirements-controller.txt"):
        shutil.copy(os.path.join(ROOT, name), str(tmp_path))
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path / "dist"),
         ROOT])
    run([os.path.join(VENV_BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
         "--context", "context"], cwd=str(tmp_path))
    context = tmp_path / "context"
    build = context / "_build"

    assert pins(str(build / "requirements.txt")) == pins(os.path.join(ROOT, "requirements-controller.txt"))
    assert (build / "bindep.txt").read_text() == open(os.path.join(ROOT, "bindep.txt")).read()
    for package in ("e2fsprogs", "util-linux"):
        assert re.search(r"^%s " % package, (build / "bindep.txt").read_text(), re.M)

    project = pins(os.path.join(ROOT, "requirements.txt"))
    # Containerfile with podman on PATH, Dockerfile otherwise
    [containerfile] = [(context / name).read_text() for name in ("Containerfile", "Dockerfile") if (context / name).exists()]
    refs = re.search(r'^ARG ANSIBLE_INSTALL_REFS="([^"]*)"', containerfile, re.M).group(1).split()
    assert sorted(refs) == sorted([project["ansible-core"], project["ansible-runner"]])

    [tarball] = os.listdir(str(build / "collection"))
    assert tarball.startswith("ext4audit-fleet-") and tarball.endswith(".tar.gz")
    assert "pip install --no-cache-dir --no-deps /usr/share/ansible/collections/ansible_collections/ext4audit/fleet" \
        in containerfile
