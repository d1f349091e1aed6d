"""The collection's plugins/module_utils (the parsers, kernel versions, the run folder's safe I/O):
code the hosts run, which the controller imports from its one source. A checkout reads it in place
(the path below); a built wheel carries it in this package (pyproject.toml's package-dir)."""

import os
from typing import TYPE_CHECKING

from ext4audit import ROOT

__path__.append(os.path.join(ROOT, "plugins", "module_utils"))  # noqa: F821  # a package's own path

if TYPE_CHECKING:  # the type checker reads the same modules as module_utils (pyproject.toml's mypy_path)
    from module_utils import kernel_version, own_folders, run_folder  # noqa: F401
