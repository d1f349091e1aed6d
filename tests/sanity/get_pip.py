"""Stand-in for get-pip.py, which ansible-test downloads from ci-files.testing.ansible.com to put pip
into each sanity test's venv (not reachable from these machines): the interpreter's own ensurepip,
then `pip install` of the packages ansible-test asks for, from the package index."""

import ensurepip
import subprocess
import sys

ensurepip.bootstrap()
arguments = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]  # get-pip's own options
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + arguments))
