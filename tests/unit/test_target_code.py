"""Target-side code stays Python 3.8 stdlib, and nothing hands host data to a shell."""

import glob
import os
import re
import subprocess
import sys

from conftest import ROOT, VENV_BIN

TARGET_FILES = [os.path.join(ROOT, "library", "ext4_facts.py"),
                os.path.join(ROOT, "plugins", "modules", "ext4_fstab_edit.py"),
                os.path.join(ROOT, "plugins", "modules", "ext4_tune.py"),
                os.path.join(ROOT, "plugins", "modules", "ext4_image_facts.py"),
                os.path.join(ROOT, "plugins", "module_utils", "kernel_version.py")] + sorted(
    # the parsers, the probe (its payload's whole code) and the image check's parts
    glob.glob(os.path.join(ROOT, "plugins", "module_utils", "*", "*.py")))


def test_target_code_runs_on_python_3_8():
    result = subprocess.run([os.path.join(VENV_BIN, "vermin"), "-t=3.8-", "--no-tips", "--violations"]
                            + TARGET_FILES, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    assert result.returncode == 0, result.stdout.decode()


def test_target_code_imports_only_stdlib_and_ansible():
    project = {"ansible", "ansible_collections"}  # the module runtime, the collection's module_utils
    for path in TARGET_FILES:
        text = open(path).read()
        if not text:  # a package's empty __init__.py (ansible-test's empty-init wants it so)
            continue
        names = re.findall(r"^(?:from|import) ([a-z_0-9]+)", text, re.M)
        assert names, path
        for name in names:
            assert name in sys.stdlib_module_names or name in project, (path, name)


def test_no_shell_strings_anywhere():
    offenders = []
    for folder, _, files in os.walk(ROOT):
        if "/." in folder[len(ROOT):] or "/tests" in folder:  # .venv, .git, .cache (go modules), ...
            continue
        for name in files:
            if name.endswith((".py", ".yml", ".yaml")):
                text = open(os.path.join(folder, name), errors="replace").read()
                if re.search(r"shell\s*=\s*True|ansible\.builtin\.shell|^\s*shell:|os\.system\(|os\.popen\(", text, re.M):
                    offenders.append(os.path.join(folder, name))
    assert offenders == []


def test_ansible_lint_production_profile():
    result = subprocess.run([os.path.join(VENV_BIN, "ansible-lint"), "--profile", "production", "playbooks", "roles",
                             "molecule"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            env=dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", "")))
    assert result.returncode == 0, result.stdout.decode()


def test_rule_table_in_the_docs_matches_the_catalog():
    generated = subprocess.run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "rules"], cwd=ROOT,
                               stdout=subprocess.PIPE, check=True).stdout.decode()
    page = open(os.path.join(ROOT, "docs", "rules.md")).read()
    table = page.split("<!-- rules:start -->\n", 1)[1].split("<!-- rules:end -->", 1)[0]
    assert table == generated, "docs/rules.md rule table is stale: paste the output of `make rules`"
    readme = open(os.path.join(ROOT, "README.md")).read()
    assert "make audit" in readme and "make test" in readme
    assert "make test" in open(os.path.join(ROOT, ".ci", "run")).read()
