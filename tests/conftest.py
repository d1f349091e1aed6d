"""Shared test helpers: the repository paths and real loop-mounted ext4 filesystems."""

import ast
import glob
import json
import os
import pwd
import re
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import pytest
import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(ROOT, "tests", "fixtures")
# Microsoft's SARIF Multitool and the SARIF 2.1.0 schema it ships (`make test-deps`: the Makefile's
# sarif-multitool target names the version).
SARIF_MULTITOOL = next(iter(sorted(glob.glob(os.path.join(ROOT, ".cache", "sarif-multitool", "*", "package")),
                                   reverse=True)), None)
VENV_BIN = os.path.dirname(sys.executable)


def fixture_text(*parts):
    with open(os.path.join(FIXTURES, *parts), "rb") as handle:
        return handle.read().decode("utf-8", "surrogateescape")


def run(argv, **kwargs):
    """Run an argument list (never a shell string); fail with its output if it fails."""
    result = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, **kwargs)
    if result.returncode != 0:
        raise AssertionError("%s failed (rc=%d):\n%s" % (argv, result.returncode, result.stdout.decode(errors="replace")))
    return result.stdout.decode(errors="replace")


def module_return_doc(path):
    """The RETURN block of a module file, parsed."""
    with open(path) as handle:
        tree = ast.parse(handle.read())
    [text] = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
              and getattr(node.targets[0], "id", None) == "RETURN"]
    return yaml.safe_load(text)


def undocumented(value, doc, where):
    """Keys of a real result that its RETURN documentation (`contains`, recursively) lacks."""
    missing = []
    items = value if isinstance(value, list) else [value]
    for item in items:
        if not isinstance(item, dict):
            continue
        for key, inner in item.items():
            if key not in doc:
                missing.append("%s.%s" % (where, key))
            elif "contains" in doc[key]:
                missing += undocumented(inner, doc[key]["contains"], "%s.%s" % (where, key))
    return sorted(set(missing))


def rule_read_options():
    """Every ext4 option a rule reads: the opt.* fact paths in the catalog, and the options engine.py
    reads itself to derive facts (derived.mb_optimize_scan from opt["mb_optimize_scan"], ...)."""
    from ext4audit.rules import catalog

    names = set()

    def walk(node):
        if isinstance(node, dict):
            if str(node.get("fact", "")).startswith("opt."):
                names.add(node["fact"].split(".")[1])
            node = list(node.values())
        if isinstance(node, list):
            for value in node:
                walk(value)

    for rule in catalog.load().rules:
        walk(rule)
    with open(os.path.join(ROOT, "ext4audit", "rules", "engine.py")) as handle:
        names |= set(re.findall(r"\bopt(?:\.get\(|\[)\"(\w+)\"", handle.read()))
    return names


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


def check_run_against_schemas(run_dir):
    """Validate every JSON file of a run folder against its published schema (schemas/, from
    ext4audit/model/contract.py) with jsonschema; return {file relative to the run folder: schema file}."""
    import jsonschema  # only the tests that check a real run need it
    from ext4audit.model import contract

    def schema_of(relative, doc):
        if relative in ("summary.json", "kernel_gate.json", "findings-index.json", "play-hosts.json"):
            return relative.replace("_", "-")
        folder = relative.split(os.sep)[0]
        if folder == "probe":
            return "probe-plan.json" if doc.get("schema") == contract.PROBE_PLAN_SCHEMA else "probe-record.json"
        return {"hosts": "host-report.json", "facts": "facts-record.json"}[folder]

    checked = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "**", "*.json"), recursive=True)):
        relative = os.path.relpath(path, run_dir)
        doc = load_json(path)
        checked[relative] = schema_of(relative, doc)
        schema = load_json(os.path.join(contract.SCHEMAS_DIR, checked[relative]))
        errors = ["%s: %s" % (error.json_path, error.message)
                  for error in jsonschema.Draft202012Validator(schema).iter_errors(doc)]
        assert not errors, "%s does not match schemas/%s:\n%s" % (path, checked[relative], "\n".join(errors[:10]))
    return checked


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


# The test VMs of testhosts/vm (tests/vm): their tools, their cached image, and reaching them.
VM_TOOLS = ["/usr/bin/qemu-system-x86_64", "/usr/bin/qemu-img", "/usr/sbin/debootstrap"]
VM_IMAGES = os.path.join(ROOT, ".cache", "testhosts", "vm")
needs_vm = [
    pytest.mark.skipif(os.geteuid() != 0, reason="needs root (debootstrap, mkfs.ext4 -d of a root filesystem)"),
    pytest.mark.skipif(not all(os.path.exists(tool) for tool in VM_TOOLS),
                       reason="needs %s: apt-get install qemu-system-x86 qemu-utils debootstrap"
                       % ", ".join(tool for tool in VM_TOOLS if not os.path.exists(tool))),
]


def vm_host(run_dir, name):
    """A VM's host variables from the inventory snippet vm_up.yml wrote for it."""
    with open(os.path.join(str(run_dir), "inventory", name + ".yml")) as handle:
        snippet = yaml.safe_load(handle)
    return snippet["all"]["children"]["testhosts_vm"]["hosts"][name]


def vm_ssh(host, *command, stdin=b"", connect_timeout=20, timeout=120):
    """Run a fixed command on a VM over SSH (argument list; nothing here comes from the guest)."""
    argv = ["ssh", "-o", "BatchMode=yes", "-o", "ConnectTimeout=%d" % connect_timeout, "-o", "StrictHostKeyChecking=no",
            "-o", "UserKnownHostsFile=/dev/null", "-o", "LogLevel=ERROR",
            "-i", host["ansible_ssh_private_key_file"], "-p", str(host["ansible_port"]),
            "%s@%s" % (host["ansible_user"], host["ansible_host"]), "--"] + list(command)
    return subprocess.run(argv, input=stdin, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=timeout)


def qemu_processes(marker):
    """Live processes whose command line mentions marker (a zombie's command line is empty)."""
    found = []
    for path in glob.glob("/proc/[0-9]*/cmdline"):
        try:
            with open(path, "rb") as handle:
                if marker.encode() in handle.read():
                    found.append(path.split("/")[2])
        except OSError:
            pass  # exited while we looked
    return found


@pytest.fixture(scope="session")
def sshd(tmp_path_factory):
    """A real sshd on 127.0.0.1 with its own host key, client key and config (root login by key)."""
    base = tmp_path_factory.mktemp("sshd")
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "host_key")])
    run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(base / "client_key")])
    (base / "authorized_keys").write_text((base / "client_key.pub").read_text())
    port = free_port()
    config = base / "sshd_config"
    config.write_text("\n".join([
        "ListenAddress 127.0.0.1:%d" % port, "HostKey %s" % (base / "host_key"),
        "AuthorizedKeysFile %s" % (base / "authorized_keys"), "PermitRootLogin prohibit-password",
        "PasswordAuthentication no", "KbdInteractiveAuthentication no", "StrictModes no", "UsePAM no",
        "PidFile %s" % (base / "sshd.pid"), "Subsystem sftp internal-sftp", ""]))
    os.makedirs("/run/sshd", exist_ok=True)  # sshd's privilege-separation directory
    server = subprocess.Popen(["/usr/sbin/sshd", "-D", "-e", "-f", str(config)],
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    for _ in range(100):
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                break
        time.sleep(0.05)
    try:
        yield {"port": port, "key": str(base / "client_key")}
    finally:
        server.terminate()
        server.wait(timeout=10)


@pytest.fixture
def sshfs_mount(sshd, tmp_path):
    """A real network filesystem: sshfs (fuse.sshfs) over the loopback sshd; unmounted after."""
    exported, target = tmp_path / "exported", tmp_path / "sshfs"
    exported.mkdir()
    (exported / "existing").mkdir()  # a path to mkdir on (EEXIST) without creating anything
    target.mkdir()
    run(["sshfs", "-p", str(sshd["port"]), "-o", "IdentityFile=" + sshd["key"], "-o", "StrictHostKeyChecking=no",
         "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "root@127.0.0.1:" + str(exported), str(target)])
    try:
        yield str(target)
    finally:
        subprocess.run(["fusermount3", "-u", str(target)], check=False)


def failing_rules(run_dir):
    """{host: sorted rule ids of its findings that fail the run's policy}, from a run folder."""
    from ext4audit.report import reports
    summary = load_json(os.path.join(str(run_dir), "summary.json"))
    failing = {}
    for path in sorted(glob.glob(os.path.join(str(run_dir), "hosts", "*.json"))):
        report = load_json(path)
        rules = sorted(set(f["rule"] for f in report["findings"] if reports.failing(f, summary["policy"]["fail_on"])))
        if rules:
            failing[report["host"]] = rules
    return failing


def upgradable_data_corruption(run_dir):
    """{host: [KERNEL_EXT4_UPGRADE_IN_BRANCH]} for each audited host of a run folder whose kernel
    lacks a data-corruption fix of the kernel's CNA records (rules/kernel_cna_records.json) that a
    later release of its own branch has and that is relevant to its filesystems: what the default
    policy fails on a real Debian kernel (records with no fix in the branch are low by default)."""
    from ext4audit.rules import kernel_records
    records, expected = kernel_records.load(), {}
    for path in sorted(glob.glob(os.path.join(str(run_dir), "hosts", "*.json"))):
        report = load_json(path)
        items = kernel_records.open_records(records, report["kernel"]) or []
        in_use = kernel_records.FeaturesInUse(report["filesystems"])
        if any(item["class"] == "data corruption" and item["action"] == "upgrade"
               and not kernel_records.set_aside(item, in_use) for item in items):
            expected[report["host"]] = ["KERNEL_EXT4_UPGRADE_IN_BRANCH"]
    return expected


def postgres_bin(name):
    """A PostgreSQL server program: Debian's postgresql package keeps them off PATH."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/" + name), key=lambda p: int(p.split("/")[4]))
    return found[-1] if found else shutil.which(name)


@pytest.fixture(scope="session")
def postgresql():
    """A real PostgreSQL server in a throw-away cluster on a loopback port, run as nobody (initdb
    refuses root), with password authentication; stopped and removed afterwards. Yields
    {"url": a postgresql:// URL without the password, "password": for PGPASSWORD}."""
    if not postgres_bin("initdb") or not postgres_bin("pg_ctl"):
        pytest.skip("PostgreSQL's server is not installed (make test-deps installs Debian's postgresql)")
    home = tempfile.mkdtemp(prefix="ext4audit-pg-")
    nobody = pwd.getpwnam("nobody")
    as_nobody = ["setpriv", "--reuid=nobody", "--regid=%d" % nobody.pw_gid, "--clear-groups", "--"]
    os.chown(home, nobody.pw_uid, nobody.pw_gid)
    password, port = secrets.token_hex(16), free_port()
    with open(os.path.join(home, "pwfile"), "w") as handle:
        handle.write(password + "\n")
    os.chown(os.path.join(home, "pwfile"), nobody.pw_uid, nobody.pw_gid)
    data = os.path.join(home, "data")
    env = dict(os.environ, LC_ALL="C.UTF-8")
    subprocess.run(as_nobody + [postgres_bin("initdb"), "-D", data, "-U", "ext4audit", "--auth=scram-sha-256",
                                "--pwfile", os.path.join(home, "pwfile"), "-E", "UTF8"],
                   check=True, stdout=subprocess.DEVNULL, env=env, cwd=home)
    subprocess.run(as_nobody + [postgres_bin("pg_ctl"), "-D", data, "-l", os.path.join(home, "log"), "-w", "-o",
                                "-k %s -p %d -h 127.0.0.1 -c fsync=off" % (home, port), "start"],
                   check=True, stdout=subprocess.DEVNULL, env=env, cwd=home)
    try:
        yield {"url": "postgresql://ext4audit@127.0.0.1:%d/postgres" % port, "password": password, "port": port}
    finally:
        subprocess.run(as_nobody + [postgres_bin("pg_ctl"), "-D", data, "-m", "immediate", "-w", "stop"],
                       stdout=subprocess.DEVNULL, env=env, cwd=home)
        shutil.rmtree(home, ignore_errors=True)
