"""The collection's plugins/module_utils (the parsers, kernel versions, the run folder's safe I/O):
code the hosts run, which the controller imports from its one source. A checkout reads it in place
(the path below); a built wheel carries it in this package (pyproject.toml's package-dir)."""

import os

from ext4audit import ROOT

__path__.append(os.path.join(ROOT, "plugins", "module_utils"))  # noqa: F821  # a package's own path
