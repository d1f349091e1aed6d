"""`make audit` starts the wrapper as `python -m ext4audit.run`: it works on its own, and starts
without the other commands' modules (numpy, msgspec...), which cost it about 0.8 s."""

import subprocess
import sys

from conftest import ROOT



def test_the_module_is_the_run_command():
    result = subprocess.run([sys.executable, "-m", "ext4audit.cli.run"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True)
    assert result.returncode == 2 and result.stderr.startswith("usage: ext4audit run [--] PLAYBOOK"), result


def test_it_starts_without_the_other_commands_modules():
    code = "import sys, ext4audit.cli.run; print(sorted({'numpy', 'msgspec', 'yaml', 'ext4audit.cli.commands'} & set(sys.modules)))"
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, universal_newlines=True,
                            check=True)
    assert result.stdout.strip() == "[]"

