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
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, VENV_BIN, load_json, module_return_doc, needs_root, run, undocumented

pytestmark = needs_root

ANSIBLE_CORE = "ansible-core==2.19.14"  # requirements.txt's pin


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
    report = load_json(host_file)
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
    assert undocumented({"ext4_facts": record["facts"]}, doc, "result") == []

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

    line = attempt()
    assert "ext4audit was not found next to %s" % (venv / "bin" / "python") in line, line
    assert "-m pip install 'ext4audit>=" in line and str(installed["collection_dir"]) in line, line

    # The package without its requirements (numpy, msgspec...): the first one missing is named,
    # with the command that installs them.
    run([str(venv / "bin" / "python"), "-m", "pip", "install", "-q", "--disable-pip-version-check", "--no-deps",
         str(installed["collection_dir"])])
    line = attempt()
    assert re.search(r"No module named '(numpy|msgspec)'", line) and "-m pip install 'ext4audit>=" in line, line
