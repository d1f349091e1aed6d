"""The audit as a new Ansible user runs it: the collection built from this repository
(`ansible-galaxy collection build`), installed into a temporary collections path, the controller
package installed from the collection's own folder into a fresh venv, and
`ansible-playbook ext4audit.fleet.audit` run from an unrelated directory with an unrelated
inventory and no ansible.cfg of ours, on a real loop-mounted ext4 with the probe enabled.

The fresh venv reuses the project's pinned controller libraries (numpy, scipy, matplotlib...)
through a .pth line to this venv's site-packages instead of downloading them again; ansible-core
and ext4audit are installed into it for real, so its bin/ has its own ansible-playbook and ext4audit.
"""

import glob
import os
import re
import shlex
import subprocess
import sys

import pytest
import yaml
from packaging.requirements import Requirement

from conftest import ROOT, VENV_BIN, load_host_report, load_json, module_return_doc, needs_root, run, undocumented

pytestmark = needs_root

ANSIBLE_CORE = "ansible-core==2.19.14"  # constraints.txt's pin
# Newer than constraints.txt's PyYAML: what a shared venv may have.
NEWER_PYYAML = "PyYAML==6.0.4"
# Where ansible-builder installs the collections of an execution environment.
EE_COLLECTIONS = "/usr/share/ansible/collections"
EE_COLLECTION_DIR = EE_COLLECTIONS + "/ansible_collections/ext4audit/fleet"


def galaxy_version():
    with open(os.path.join(ROOT, "galaxy.yml")) as handle:
        return yaml.safe_load(handle)["version"]


def clean_env(**extra):
    """The caller's environment without any ANSIBLE_* setting of ours (no ansible.cfg, no paths)."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0", **extra)
    return env


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """{'tarball', 'collections', 'collection_dir', 'venv'}: the built, installed collection and a venv
    with ansible-core and the controller package (pip install <the collection's folder>)."""
    base = tmp_path_factory.mktemp("installed")
    dist = base / "dist"
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(dist), ROOT],
        cwd=str(base), env=clean_env())
    tarball = dist / ("ext4audit-fleet-%s.tar.gz" % galaxy_version())
    assert tarball.is_file(), os.listdir(str(dist))
    collections = base / "collections"
    # --no-deps: galaxy.yml's amazon.aws (the AMI path only) would come from Galaxy, not reachable here
    run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "install", "--no-deps", str(tarball), "-p", str(collections)],
        cwd=str(base), env=clean_env())
    collection_dir = collections / "ansible_collections" / "ext4audit" / "fleet"
    venv = base / "venv"
    run([sys.executable, "-m", "venv", str(venv)])
    site = subprocess.run([str(venv / "bin" / "python"), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          stdout=subprocess.PIPE, check=True).stdout.decode().strip()
    with open(os.path.join(site, "project-libraries.pth"), "w") as handle:  # this Python's site-packages
        handle.write("".join(path + "\n" for path in sys.path if path.endswith("site-packages")))
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps"]
    run(pip + ["--ignore-installed", ANSIBLE_CORE])
    run(pip + [str(collection_dir)])
    return {"tarball": tarball, "collections": collections, "collection_dir": collection_dir, "venv": venv}


def write_inventory(folder, mountpoint, scratch_dir):
    inventory = {"all": {"hosts": {"scratch-host": {
        "ansible_connection": "local",
        "ansible_python_interpreter": "{{ ansible_playbook_python }}",
        "chopper_probe_enabled": True,
        "chopper_probe_mountpoint": mountpoint,
        "chopper_probe_scratch_dir": scratch_dir,
        "chopper_probe_keep_cache": False,
        "chopper_probe_runs": 8,
        "chopper_probe_sweep_budget_s": 20,
        "chopper_probe_confirm_budget_s": 20,
        "chopper_probe_confirmations": ["rename_over_existing"],
        "chopper_probe_repetitions": 2,
        "chopper_probe_poll_s": 1,
    }}}}
    path = folder / "inventory.yml"
    path.write_text(yaml.safe_dump(inventory))
    return path


def test_installed_collection_audits_probes_reports_and_gates(installed, loopfs, tmp_path):
    fs = loopfs.make("coll", mount_options="discard")  # EXT4_ONLINE_DISCARD: low
    work = tmp_path / "elsewhere"  # unrelated: no ansible.cfg, not the checkout, not the collection
    work.mkdir()
    inventory = write_inventory(work, fs["mountpoint"], "/dev/shm/ext4-audit-probe-coll-%d" % os.getpid())
    argv = [str(installed["venv"] / "bin" / "ansible-playbook"), "ext4audit.fleet.audit", "-i", str(inventory),
            "-e", "ext4_audit_fail_on=critical"]
    env = clean_env(ANSIBLE_COLLECTIONS_PATH=str(installed["collections"]))
    result = subprocess.run(argv, cwd=str(work), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out
    assert "verdict: pass" in out, out

    # Reports in ./reports of the current directory, not in the collection's folder.
    assert not (installed["collection_dir"] / "reports").exists()
    summary = load_json(str(work / "reports" / "latest" / "summary.json"))
    assert summary["verdict"] == "pass"
    [host_file] = glob.glob(str(work / "reports" / "latest" / "hosts" / "scratch-host.json"))
    report = load_host_report(host_file)
    mine = [f for f in report["filesystems"] if f["mountpoint"] == fs["mountpoint"]]
    assert mine and "discard" in mine[0]["options"]
    assert any(f["rule"] == "EXT4_ONLINE_DISCARD" and f["mountpoint"] == fs["mountpoint"]
               for f in report["findings"])
    assert report["probe"]["status"] == "ran", report["probe"]
    assert report["probe"]["sweep"]["runs_completed"] == 8

    # The module's RETURN documents every key it really returned here (journal statistics included).
    [record] = [load_json(path) for path in glob.glob(str(work / "reports" / "latest" / "facts" / "*.json"))]
    assert any(fs["jbd2"] for fs in record["facts"]["filesystems"])
    doc = module_return_doc(str(installed["collection_dir"] / "plugins" / "modules" / "ext4_facts.py"))
    assert undocumented({"ansible_facts": {"ext4_facts": record["facts"]}}, doc, "result") == []

    # The gate: a finding at or above `low` (discard's) fails the run, exit non-zero.
    failed = subprocess.run(argv[:-1] + ["ext4_audit_fail_on=low", "-e", "chopper_probe_enabled=false"],
                            cwd=str(work), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert failed.returncode != 0
    assert "verdict: fail" in failed.stdout.decode(errors="replace")


def test_ansible_runner_runs_the_audit_and_reports_the_verdict(installed, loopfs, tmp_path):
    """ansible-runner, the engine AWX and AAP run playbooks with (process isolation off): its
    status and rc, and the verdict line among the job events."""
    fs = loopfs.make("runner")
    private = tmp_path / "runner"
    (private / "env").mkdir(parents=True)
    (private / "project").mkdir()
    (private / "inventory").mkdir()
    inventory = write_inventory(private / "inventory", fs["mountpoint"], "/dev/shm/ext4-audit-probe-runner-%d" % os.getpid())
    (private / "env" / "envvars").write_text(yaml.safe_dump({"ANSIBLE_COLLECTIONS_PATH": str(installed["collections"]),
                                                              "ANSIBLE_NOCOLOR": "1"}))
    (private / "env" / "extravars").write_text(yaml.safe_dump({"ext4_audit_fail_on": "critical", "chopper_probe_enabled": False}))
    venv_bin = installed["venv"] / "bin"
    env = clean_env(PATH=str(venv_bin) + os.pathsep + os.environ["PATH"])
    result = subprocess.run([str(venv_bin / "python"), "-m", "ansible_runner", "run", str(private),
                             "-p", "ext4audit.fleet.audit", "--inventory", str(inventory), "--ident", "audit"],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out
    artifacts = private / "artifacts" / "audit"
    assert (artifacts / "status").read_text() == "successful"
    assert (artifacts / "rc").read_text() == "0"
    events = [load_json(path) for path in sorted(glob.glob(str(artifacts / "job_events" / "*.json")))]
    verdicts = [event for event in events if event.get("event") == "runner_on_ok"
                and "verdict: pass" in event.get("stdout", "")]
    assert verdicts, [event.get("event") for event in events]
    assert load_json(str(private / "project" / "reports" / "latest" / "summary.json"))["verdict"] == "pass"


def test_preflight_stops_before_any_host_without_the_controller_package(installed, tmp_path):
    """A plain ansible-core venv (as pip installs it, without numpy & co): the play stops on the
    controller with one line naming what is missing and the install command, and no host is
    contacted (the inventory's only host is an SSH address nothing listens on)."""
    venv = tmp_path / "plain"
    run([sys.executable, "-m", "venv", str(venv)])
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", ANSIBLE_CORE])
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "inventory.yml").write_text(yaml.safe_dump({"all": {"hosts": {"never-contacted": {
        "ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh"}}}}))
    env = clean_env(ANSIBLE_COLLECTIONS_PATH=str(installed["collections"]), PATH="/usr/bin:/bin")
    argv = [str(venv / "bin" / "ansible-playbook"), "ext4audit.fleet.audit", "-i", "inventory.yml"]

    def attempt():
        result = subprocess.run(argv, cwd=str(work), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = result.stdout.decode(errors="replace")
        assert result.returncode != 0, out
        assert "never-contacted" not in out.split("PLAY RECAP")[0], out  # stopped in the first play
        assert not (work / "reports").exists()
        [line] = [line for line in out.splitlines() if "Task failed" in line]
        return line

    # The one install command suggested: from the collection's own folder (no package index has
    # ext4audit, and a name there could be anyone's).
    suggested = "`%s -m pip install %s`" % (venv / "bin" / "python", installed["collection_dir"])
    line = attempt()
    assert "ext4audit was not found next to %s" % (venv / "bin" / "python") in line, line
    assert suggested in line and "ext4audit>=" not in line, line

    # The package without its requirements (numpy, msgspec...): the first one missing is named,
    # with the command that installs them.
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         str(installed["collection_dir"])])
    line = attempt()
    assert re.search(r"No module named '(numpy|msgspec)'", line) and suggested in line, line

    # The suggested command, run as printed, gives a working controller package.
    run(shlex.split(suggested.strip("`")) + ["-q", "--disable-pip-version-check"])
    assert run([str(venv / "bin" / "ext4audit"), "--version"]).split() == ["ext4audit", galaxy_version()]


def pip_show_version(venv, name):
    shown = subprocess.run([str(venv / "bin" / "python"), "-m", "pip", "show", name], stdout=subprocess.PIPE, check=True)
    [version] = re.findall(r"^Version: (\S+)$", shown.stdout.decode(), re.M)
    return version


def test_installing_the_controller_package_leaves_a_newer_pyyaml_alone(installed, tmp_path):
    """A shared venv (or an EE) with a newer PyYAML than the project's lock: installing the
    controller package from the collection's folder, its requirements resolved by pip, keeps it
    (install requirements are ranges; constraints.txt's pins are for the project's own venv)."""
    venv = tmp_path / "shared"
    run([sys.executable, "-m", "venv", str(venv)])
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check"]
    run(pip + [NEWER_PYYAML])
    run(pip + [str(installed["collection_dir"])])
    assert pip_show_version(venv, "PyYAML") == NEWER_PYYAML.split("==")[1]
    assert run([str(venv / "bin" / "ext4audit"), "--version"]).split() == ["ext4audit", galaxy_version()]


def requirement_names(lines):
    """{name: Requirement} of requirement lines as ansible-builder writes them (a trailing comment)."""
    parsed = [Requirement(line.split(" #")[0]) for line in lines]
    return {requirement.name.lower(): requirement for requirement in parsed}


def package_requirements():
    """The controller package's install requirements: requirements-controller.txt, as pyproject.toml reads it."""
    with open(os.path.join(ROOT, "requirements-controller.txt")) as handle:
        return requirement_names(line.strip() for line in handle if line.strip() and not line.startswith("#"))


def test_ansible_builder_introspect_finds_the_controller_package_and_its_requirements(installed):
    """`ansible-builder introspect` on the installed collection, as a site's EE build runs it: the
    controller package from the collection's folder where ansible-builder installs collections, its
    requirements as ranges, and bindep.txt's system packages."""
    result = subprocess.run([os.path.join(VENV_BIN, "ansible-builder"), "introspect", str(installed["collections"])],
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
    found = yaml.safe_load(result.stdout.decode())
    python = requirement_names(found["python"])
    assert python["ext4audit"].url == "file://" + EE_COLLECTION_DIR, found["python"]
    # introspection drops PyYAML (the EE has it) and pip resolves it from the package's metadata
    assert set(package_requirements()) - {"pyyaml"} <= set(python), found["python"]
    assert not [line for line in found["python"] if "==" in line], found["python"]
    assert {"e2fsprogs", "util-linux"} <= {line.split()[0] for line in found["system"]}, found["system"]


EE_BUILD_SCRIPT = r"""
# ansible-builder's galaxy and builder stages, run with the context's own scripts in a private
# mount namespace whose /usr/share is an overlay: the collection goes where the EE has it.
set -euo pipefail
mount -t overlay overlay -o "lowerdir=/usr/share,upperdir=$WORK/upper,workdir=$WORK/overlay" /usr/share
cd "$CONTEXT/_build"
# --no-deps: galaxy.yml's amazon.aws (the AMI path only) would come from Galaxy, not reachable here;
# a real EE build installs it, and ext4audit needs nothing of it
ansible-galaxy collection install --no-deps -r requirements.yml --collections-path /usr/share/ansible/collections
"$INTROSPECT_PYTHON" scripts/introspect.py introspect --write-bindep="$WORK/bindep.txt" --write-pip="$WORK/requirements.txt"
"$PYTHON" -m venv "$WORK/ee"
"$WORK/ee/bin/python" -m pip install -q --disable-pip-version-check -r "$WORK/requirements.txt"
"$WORK/ee/bin/ext4audit" --help
"$WORK/ee/bin/ext4audit" --version
"""


def test_execution_environment_from_a_definition_listing_only_the_collection(installed, tmp_path):
    """A site's EE definition that lists only the collection: `ansible-builder create` writes the
    context; its galaxy and builder stages (the collection installed where the EE has it, the
    context's introspect.py, pip install of what it wrote) run here into a fresh venv, which gets a
    working `ext4audit`. (Building the image itself needs a registry these machines cannot reach.)"""
    tarball = installed["tarball"]
    definition = {"version": 3,
                  "images": {"base_image": {"name": "quay.io/centos/centos:stream9"}},
                  "dependencies": {"galaxy": {"collections": [{"name": tarball.name, "type": "file"}]}},
                  "additional_build_files": [{"src": str(tarball), "dest": "."}]}
    (tmp_path / "execution-environment.yml").write_text(yaml.safe_dump(definition))
    context = tmp_path / "context"
    run([os.path.join(VENV_BIN, "ansible-builder"), "create", "-f", "execution-environment.yml",
         "--context", str(context)], cwd=str(tmp_path))
    [containerfile] = [(context / name).read_text() for name in ("Containerfile", "Dockerfile") if (context / name).exists()]
    # the stages run below, as the generated file has them
    assert '-r requirements.yml --collections-path "%s"' % EE_COLLECTIONS in containerfile
    assert "introspect.py introspect --write-bindep=/tmp/src/bindep.txt --write-pip=/tmp/src/requirements.txt" \
        in containerfile
    assert not (context / "_build" / "requirements.txt").exists()  # no Python requirement of the site's own

    work = tmp_path / "build"
    for folder in ("upper", "overlay"):
        (work / folder).mkdir(parents=True)
    env = clean_env(WORK=str(work), CONTEXT=str(context), INTROSPECT_PYTHON=sys.executable, PYTHON=sys.executable,
                    PATH=VENV_BIN + os.pathsep + os.environ["PATH"])
    result = subprocess.run(["unshare", "--mount", "--propagation", "private", "bash", "-c", EE_BUILD_SCRIPT],
                            env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 0, out[-4000:]
    assert "usage: ext4audit" in out and out.splitlines()[-1] == "ext4audit %s" % galaxy_version(), out[-4000:]
    written = [line for line in (work / "requirements.txt").read_text().splitlines() if line.strip()]
    assert set(package_requirements()) - {"pyyaml"} | {"ext4audit"} <= set(requirement_names(written)), written
    assert re.search(r"^e2fsprogs ", (work / "bindep.txt").read_text(), re.M)
