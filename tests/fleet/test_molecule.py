"""The Molecule scenarios as CI runs them (root): `molecule test -s default` and `-s fleet` from the
repository root, timed, and then nothing of them left: no sshd of the fleet, no loop device backed
by their images, no mount of them in any mount namespace.

Slow (about 1 and 1.5 minutes here); skip them with `pytest --ignore=tests/fleet`.
"""

import json
import os
import subprocess
import sys
import time

import pytest

from conftest import ROOT, VENV_BIN, needs_root, run

pytestmark = needs_root

HELPER = os.path.join(ROOT, "testhosts", "fleet", "fleet_host.py")
# What each scenario makes (see molecule/*/molecule.yml), for the leftover check.
MADE = {
    "default": ["--images", "/dev/shm/ext4audit-molecule-default"],
    "fleet": ["--state", os.path.join(ROOT, ".cache", "testhosts", "fleet"), "--images", "/dev/shm/ext4audit-fleet"],
}


def leftovers(scenario):
    return json.loads(run([sys.executable, HELPER, "status"] + MADE[scenario]))


@pytest.mark.parametrize("scenario", ["default", "fleet"])
def test_molecule_scenario(scenario, record_property):
    # molecule runs ansible-config, ansible-playbook and pytest from PATH: the venv's first.
    env = dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
               ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"),
               NO_COLOR="1", PY_COLORS="0", ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")
    started = time.monotonic()
    result = subprocess.run([os.path.join(VENV_BIN, "molecule"), "test", "-s", scenario], cwd=ROOT, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=1200)
    seconds = time.monotonic() - started
    record_property("seconds", round(seconds, 1))
    print("molecule test -s %s: %.1f s" % (scenario, seconds))
    output = result.stdout.decode(errors="replace")
    assert result.returncode == 0, output[-30000:]
    assert "Verifier completed successfully" in output, output[-30000:]

    left = leftovers(scenario)
    assert not any(left.values()), "left behind by molecule test -s %s: %s" % (scenario, left)
