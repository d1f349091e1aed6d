"""A typo in the rule catalog or the waiver file stops the real audit playbook in its controller-side
preflight (prepare.yml: `python -m ext4audit check`), with exit 2 and the rule or waiver, the field
and the bad value, before any host is contacted: the play recap names only localhost, and the
inventory's other host (which would be unreachable) never appears.

The playbook runs from a copy of the project whose rules/catalog.yml (or inventory waivers.yml)
carries the typo; the copy's own ext4audit package reads the copy's rules."""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT, VENV_BIN, free_port, needs_root

pytestmark = needs_root
PARTS = ("ansible.cfg", "collections", "ext4audit", "library", "meta", "playbooks", "plugins", "roles", "rules")


def copy_project(base):
    """The parts the playbook reads, links kept as links (the checkout is its own collection through
    collections/ansible_collections/ext4audit/fleet, a relative link to the checkout)."""
    os.makedirs(base)
    for part in PARTS:
        source, target = os.path.join(ROOT, part), os.path.join(base, part)
        if os.path.islink(source):
            os.symlink(os.readlink(source), target)
        elif os.path.isdir(source):
            shutil.copytree(source, target, symlinks=True, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            shutil.copy(source, target)
    return base


def replace_in(path, old, new):
    with open(path) as handle:
        text = handle.read()
    assert old in text, "%s has no %r" % (path, old)
    with open(path, "w") as handle:
        handle.write(text.replace(old, new, 1))


CASES = [
    ("fact", "rules/catalog.yml", "{fact: opt.barrier, eq: false}", "{fact: opt.barier, eq: false}",
     "rule EXT4_NOBARRIER: fact 'opt.barier' is not a fact a filesystem rule can read"),
    ("placeholder", "rules/catalog.yml", 'message: "{mountpoint}: data=writeback is in effect{baked}."',
     'message: "{mountpoint.__class__.__mro__}: data=writeback is in effect{baked}."',
     "rule EXT4_DATA_WRITEBACK: message placeholder {mountpoint.__class__.__mro__} is not one of the plain fields"),
    ("probe", "rules/catalog.yml", "probe: xattr_set, confirmed_at: 1.5, escalate_to: high",
     "probe: xattr_sett, confirmed_at: 1.5, escalate_to: high",
     "rule EXT4_SMALL_JOURNAL: confirmation.probe 'xattr_sett' is not one of rename_over_existing, "),
    ("waiver", "inventory/waivers.yml", "expires: 2027-06-30", "expires: 0999-06-30",
     "waiver #1 (EXT4_DIOREAD_NOLOCK_NODELALLOC): expires 0999-06-30 is not a year from 2000 to 2100"),
]


@pytest.mark.parametrize("case", CASES, ids=[c[0] for c in CASES])
def test_a_typo_stops_the_audit_before_any_host_is_contacted(tmp_path, case):
    name, target, old, new, message = case
    project = copy_project(str(tmp_path / "project"))
    inventory = tmp_path / "project" / "inventory"
    inventory.mkdir()
    # fleet-host points at a port nothing listens on: had the facts play started, it would be unreachable.
    (inventory / "hosts.yml").write_text(
        "all:\n  hosts:\n    localhost:\n      ansible_connection: local\n"
        "      ansible_python_interpreter: \"{{ ansible_playbook_python }}\"\n"
        "    fleet-host:\n      ansible_host: 127.0.0.1\n      ansible_port: %d\n" % free_port())
    shutil.copy(os.path.join(ROOT, "inventories", "example", ".ext4audit", "waivers.yml"), str(inventory / "waivers.yml"))
    replace_in(os.path.join(project, target), old, new)
    # PYTHONPATH: the venv's ext4audit command imports the copy's package (the venv's own is an
    # editable install of the checkout, found after sys.path)
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(project, "ansible.cfg"), ANSIBLE_NOCOLOR="1", PYTHONPATH=project)
    result = subprocess.run([os.path.join(VENV_BIN, "ansible-playbook"), "-i", str(inventory / "hosts.yml"),
                             "playbooks/audit.yml",
                             "-e", "chopper_probe_enabled=false"],
                            cwd=project, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    out = result.stdout.decode(errors="replace")
    assert result.returncode == 2, out
    assert message in " ".join(out.replace("''", "'").split()), out  # the YAML callback folds and quotes it
    recap = out[out.index("PLAY RECAP"):]
    assert "localhost" in recap and "failed=1" in recap and "fleet-host" not in out, out
    assert "Collect ext4 facts" not in out and "Traceback" not in out, out
    assert not os.path.exists(os.path.join(project, "reports")) or os.listdir(os.path.join(project, "reports")) == []
