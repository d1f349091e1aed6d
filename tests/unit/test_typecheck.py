"""The type checker over the layers pyproject.toml's [tool.mypy] lists (`make typecheck` runs the
same command): a type error, or a function without annotations in a finished layer, fails CI."""

import os
import shutil
import subprocess

import pytest

from conftest import ROOT, VENV_BIN

MYPY = os.path.join(VENV_BIN, "mypy")


def _mypy(*args):
    if not os.access(MYPY, os.X_OK):
        pytest.skip("mypy is not installed in %s (make setup-dev installs requirements-dev.txt)" % VENV_BIN)
    return subprocess.run([MYPY] + list(args), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          universal_newlines=True)


def test_the_configured_paths_type_check_clean():
    result = _mypy()
    assert result.returncode == 0, result.stdout


def test_an_unannotated_function_in_a_finished_layer_fails(tmp_path):
    """The check is not vacuous: the same run with one module given an unannotated public function
    (mypy reads the shadow file in the module's place) fails and names it."""
    module = os.path.join("ext4audit", "rules", "policy.py")
    shadow = tmp_path / "policy.py"
    shutil.copyfile(os.path.join(ROOT, module), shadow)
    with open(shadow, "a") as handle:
        handle.write("\n\ndef untyped(value):\n    return value\n")
    result = _mypy("--shadow-file", module, str(shadow))
    assert result.returncode == 1, result.stdout
    assert "policy.py:" in result.stdout and "no-untyped-def" in result.stdout, result.stdout
