"""The target-side code as a maintainer reads it: no module a giant, the probe a package that
reaches its parsers by an import (no link), and its payload the package's own code, run isolated."""

import ast
import glob
import io
import os
import subprocess
import sys
import zipfile

from conftest import ROOT
from ext4audit.parsers import probe_payload

MAX_LINES = 600  # "a few hundred lines each"
DOC_BLOCKS = ("DOCUMENTATION", "EXAMPLES", "RETURN")  # a module's documentation, which ansible-doc reads there


def code_lines(path):
    """Lines of a file, less a module's documentation blocks."""
    with open(path, encoding="utf-8") as handle:
        text = handle.read()
    docs = sum(node.end_lineno - node.lineno + 1 for node in ast.parse(text).body
               if isinstance(node, ast.Assign) and any(getattr(t, "id", None) in DOC_BLOCKS for t in node.targets))
    return text.count("\n") - docs


def test_no_target_module_is_a_giant():
    paths = glob.glob(os.path.join(ROOT, "plugins", "**", "*.py"), recursive=True) + \
        glob.glob(os.path.join(ROOT, "roles", "*", "files", "**", "*.py"), recursive=True)
    giants = dict((os.path.relpath(path, ROOT), code_lines(path)) for path in paths if code_lines(path) > MAX_LINES)
    assert giants == {}


def test_no_link_in_the_target_code():
    links = [os.path.relpath(os.path.join(folder, name), ROOT)
             for top in ("plugins", "roles") for folder, dirs, files in os.walk(os.path.join(ROOT, top))
             for name in dirs + files if os.path.islink(os.path.join(folder, name))]
    assert links == []


def test_the_payload_is_the_probe_and_its_parsers_and_the_same_bytes_each_time():
    payload = probe_payload.build()
    assert payload == probe_payload.build()
    with zipfile.ZipFile(io.BytesIO(payload)) as archive:
        names = sorted(archive.namelist())
        for name in names:
            if name.startswith("module_utils/ext4_"):
                with open(os.path.join(ROOT, "plugins", name), "rb") as handle:
                    assert archive.read(name) == handle.read(), name
    wanted = sorted(os.path.relpath(path, os.path.join(ROOT, "plugins"))
                    for package in probe_payload.PACKAGES
                    for path in glob.glob(os.path.join(ROOT, "plugins", "module_utils", package, "*.py")))
    assert names == sorted(["__main__.py", "module_utils/__init__.py"] + wanted)


def test_the_payload_runs_isolated_as_the_module_starts_it(tmp_path):
    """-I -S -B: no PYTHON* variables, user site, site-packages or script folder; the zip itself is
    what the probe's imports find (its package and the parsers)."""
    path = probe_payload.write(str(tmp_path))
    proc = subprocess.run([sys.executable, "-I", "-S", "-B", path, "run", str(tmp_path / "no-job.json"),
                           str(tmp_path / "out.json")], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, cwd=str(tmp_path), env={"PYTHONPATH": ROOT}, check=False)
    assert proc.returncode == 2 and "ext4_probe: cannot read the job" in proc.stderr, proc.stderr
    usage = subprocess.run([sys.executable, "-I", "-S", "-B", path], stderr=subprocess.PIPE,
                           universal_newlines=True, check=False)
    assert usage.returncode == 2 and "ext4_probe.pyz run JOB.json OUT.json" in usage.stderr
    assert sorted(os.listdir(str(tmp_path))) == [probe_payload.NAME]  # -B: no bytecode beside it
