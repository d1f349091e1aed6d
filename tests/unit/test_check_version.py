"""`ext4audit check --version`: the roles' preflight in one start of the controller package. The
version line of --version comes first, also when another option is wrong (the role tells a
missing or old package from a bad option by it), then the plan cache's prefix, then the check."""

import subprocess
import sys

import ext4audit
from conftest import ROOT


def check(*args):
    return subprocess.run([sys.executable, "-m", "ext4audit", "check", "--version"] + list(args), cwd=ROOT,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, universal_newlines=True)


def test_the_version_line_then_the_plan_cache_then_the_check():
    result = check("--formats", "html")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0] == "ext4audit %s" % ext4audit.__version__
    assert lines[1].startswith("plan cache: /") and lines[2].startswith("catalog: ")


def test_a_wrong_option_still_gets_the_version_line_first():
    result = check("--formats", "xml")
    assert result.returncode == 2
    assert result.stdout.splitlines()[0] == "ext4audit %s" % ext4audit.__version__
    assert "ext4audit check: error: argument --formats: unknown report format 'xml'" in result.stderr
