"""Stand-in for get-pip.py, which ansible-test downloads from ci-files.testing.ansible.com to put pip
into each sanity test's venv (that host is not reachable from these machines): the interpreter's
own ensurepip, then `pip install` of what ansible-test asks for (pip 24.2, which verifies with
the system's CA store itself) from the package index, verified with the system's CA store
(ansible-test runs pip with PIP_CONFIG_FILE=/dev/null, so /etc/pip.conf's cert is not read)."""

import ensurepip
import os
import ssl
import subprocess
import sys

ensurepip.bootstrap()
paths = ssl.get_default_verify_paths()
cafile = paths.cafile or paths.openssl_cafile
arguments = [arg for arg in sys.argv[1:] if arg not in ("--no-setuptools", "--no-wheel")]  # get-pip's own options
certificate = ["--cert", cafile] if cafile and os.path.exists(cafile) else []
sys.exit(subprocess.call([sys.executable, "-m", "pip", "install"] + certificate + arguments))
