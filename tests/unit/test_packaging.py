"""The release's packaging facts agree: one version (galaxy.yml's), the controller package's
requirements are ranges that constraints.txt pins, `make audit` installs only the audit's
packages, and every task of the collection's roles and playbooks names its module by its fully
qualified name (ours included), so the content runs the same from an installed collection as
from this checkout."""

import glob
import os
import re
import subprocess
import sys
import tomllib

import pytest
import yaml
from ansible.playbook.task import Task
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from conftest import ROOT

import ext4audit


def load_yaml(*parts):
    with open(os.path.join(ROOT, *parts)) as handle:
        return yaml.safe_load(handle)


def pyproject():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        return tomllib.load(handle)


def requirement_files(name):
    """The requirements of a requirements file and of the files it includes (-r), in order."""
    found = []
    with open(os.path.join(ROOT, name)) as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if line.startswith("-r "):
                found += requirement_files(line.split(None, 1)[1])
            elif line:
                found.append(Requirement(line))
    return found


def lock():
    """constraints.txt as {canonical name: version}."""
    found = {}
    with open(os.path.join(ROOT, "constraints.txt")) as handle:
        for line in handle:
            line = line.split("#", 1)[0].strip()
            if line:
                name, version = line.split("==")
                found[canonicalize_name(name)] = version
    return found


def test_one_version_galaxy_yml_is_the_source():
    version = load_yaml("galaxy.yml")["version"]
    assert ext4audit.__version__ == version
    assert pyproject()["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "ext4audit.__version__"}
    # the roles' preflight asks for a controller package no newer than this release
    minimum = load_yaml("roles", "ext4_audit", "vars", "main.yml")["ext4_audit_controller_min_version"]
    assert tuple(map(int, minimum.split("."))) <= tuple(map(int, version.split(".")))


def test_install_requirements_are_ranges_and_the_lock_pins_every_package():
    """The package's requirements (pyproject.toml reads requirements-controller.txt) are ranges
    (installing it never downgrades a shared venv), and constraints.txt pins every package the
    project's venv installs, within those ranges."""
    assert pyproject()["tool"]["setuptools"]["dynamic"]["dependencies"] == {"file": ["requirements-controller.txt"]}
    controller = requirement_files("requirements-controller.txt")
    assert {"jinja2", "pyyaml", "msgspec", "numpy", "scipy", "matplotlib", "prometheus-client"} <= \
        {canonicalize_name(r.name) for r in controller}
    assert [str(r) for r in controller if any(s.operator in ("==", "===", "<", "<=", "~=") for s in r.specifier)] == []
    pinned = lock()
    for requirement in requirement_files("requirements-dev.txt"):
        name = canonicalize_name(requirement.name)
        assert name in pinned, "constraints.txt: no pin for %s" % name
        assert requirement.specifier.contains(pinned[name]), (str(requirement), pinned[name])


def test_make_audit_installs_only_the_audit_packages_and_make_test_adds_the_rest():
    """`make -n -B` prints every recipe with the variables expanded, without running them: the
    audit's venv gets requirements.txt (ansible-core and the package's requirements) with pip's
    progress lines (no -q) at the lock's versions; the tests' and tools' packages come with
    `make test` only."""
    def recipe(target):
        return subprocess.run(["make", "-n", "-B", target], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL, check=True).stdout.decode()
    audit = recipe("audit")
    [install] = [line for line in audit.splitlines() if " -r requirements" in line]
    assert install.endswith("pip install --disable-pip-version-check -c constraints.txt -r requirements.txt"), install
    assert "requirements-dev.txt" not in audit
    audit_packages = {canonicalize_name(r.name) for r in requirement_files("requirements.txt")}
    controller = {canonicalize_name(r.name) for r in requirement_files("requirements-controller.txt")}
    assert audit_packages == controller | {"ansible-core"}, sorted(audit_packages - controller)
    assert "-c constraints.txt -r requirements-dev.txt" in recipe("test")


def test_version_option_prints_the_version():
    result = subprocess.run([sys.executable, "-m", "ext4audit", "--version"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert result.returncode == 0, result.stderr.decode()
    assert result.stdout.decode().split() == ["ext4audit", ext4audit.__version__]


def _tasks(entries):
    for entry in entries or []:
        if not isinstance(entry, dict):
            continue
        if "block" in entry:
            for key in ("block", "rescue", "always"):
                yield from _tasks(entry.get(key))
        else:
            yield entry


def _modules(task):
    keywords = set(Task.fattributes) | {"local_action"}
    return [key for key in task if key not in keywords and not key.startswith("with_")]


def test_every_task_names_its_module_by_fqcn():
    files = glob.glob(os.path.join(ROOT, "roles", "*", "tasks", "*.yml"))
    files += glob.glob(os.path.join(ROOT, "playbooks", "*.yml")) + glob.glob(os.path.join(ROOT, "playbooks", "tasks", "*.yml"))
    short = []
    for path in sorted(files):
        with open(path) as handle:
            document = yaml.safe_load(handle) or []
        plays = [entry for entry in document if isinstance(entry, dict) and "hosts" in entry]
        task_lists = [play.get(key) for play in plays for key in ("pre_tasks", "tasks", "post_tasks", "handlers")]
        if not plays:
            task_lists = [document]
        for tasks in task_lists:
            for task in _tasks(tasks):
                modules = _modules(task)
                assert len(modules) == 1, (path, task.get("name"), modules)
                if modules[0].count(".") < 2:
                    short.append("%s: %s (%s)" % (os.path.relpath(path, ROOT), task.get("name"), modules[0]))
                elif modules[0] in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                    role = task[modules[0]]["name"]
                    if role.count(".") < 2:
                        short.append("%s: %s (role %s)" % (os.path.relpath(path, ROOT), task.get("name"), role))
    assert short == []


def test_no_sys_path_edits_for_the_parsers():
    offenders = []
    for path in glob.glob(os.path.join(ROOT, "ext4audit", "*.py")) + [os.path.join(ROOT, "tests", "conftest.py")]:
        with open(path) as handle:
            if re.search(r"sys\.path\s*(\.insert|\.append|\[|=|\+=)", handle.read()):
                offenders.append(path)
    assert offenders == []


def test_make_audit_installs_only_what_the_audit_needs_and_waits_for_apt():
    """`make -n` prints the recipes with the variables expanded, without running them."""
    def recipe(target):
        return subprocess.run(["make", "-n", target], cwd=ROOT, stdout=subprocess.PIPE, check=True).stdout.decode()
    audit_deps = recipe("deps")
    assert "install -y -q e2fsprogs util-linux;" in audit_deps, audit_deps
    assert "openssh-server" not in audit_deps and "sshfs" not in audit_deps
    assert audit_deps.count("apt-get -o DPkg::Lock::Timeout=300") == 2, audit_deps  # update and install
    test_deps = recipe("test-deps")
    assert "openssh-server sshfs" in test_deps, test_deps


def test_make_test_deps_installs_packer():
    """tests/vm/test_packer_build.py skips without packer, so `make test` on a fresh machine must
    install it: Debian's package, when the command is missing."""
    recipe = subprocess.run(["make", "-n", "test-deps"], cwd=ROOT, stdout=subprocess.PIPE, check=True).stdout.decode()
    assert re.search(r"install -y -q --no-install-recommends [a-z0-9. +-]*\bpacker\b", recipe), recipe
    assert re.search(r"for c in [^;]*/usr/bin/packer[ ;]", recipe), recipe


def apt_closure(packages):
    """Every package apt would install for `packages`: depends, pre-depends and recommends, recursively,
    read from this machine's real package index."""
    done = subprocess.run(
        ["apt-cache", "depends", "--recurse", "--no-suggests", "--no-conflicts", "--no-breaks",
         "--no-replaces", "--no-enhances", *packages],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
    if done.returncode != 0 or not done.stdout:
        pytest.skip("no apt package index here: " + done.stderr.decode(errors="replace").strip())
    return {line.strip() for line in done.stdout.decode().splitlines() if not line.startswith(" ")}


def test_what_make_audit_installs_does_not_pull_in_an_ssh_server():
    """The audit's packages, installed with their recommends on a machine without openssh-server,
    must not bring it (or sshfs) in through a dependency: checked on apt's own resolution, with a
    package known to pull it in as the control."""
    recipe = subprocess.run(["make", "-n", "deps"], cwd=ROOT, stdout=subprocess.PIPE, check=True).stdout.decode()
    packages = re.search(r"install -y -q ([a-z0-9. +-]+);", recipe).group(1).split()
    assert packages == ["e2fsprogs", "util-linux"], packages
    closure = apt_closure(packages)
    assert "e2fsprogs" in closure and "libext2fs2" in closure, sorted(closure)
    assert not closure & {"openssh-server", "sshfs"}, sorted(closure & {"openssh-server", "sshfs"})
    assert "openssh-server" in apt_closure(["task-ssh-server"])
