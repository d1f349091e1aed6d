"""The rules: the catalog and its checks (catalog.py), the engine that evaluates rules over a host's
facts record (engine.py, fact_paths.py, policy.py), waivers, the kernel's CNA records, removed mount
options, boot tools and the remediation data. It reads the rule data of the repository's rules/.

Data flows: facts record + rules/*.yml -> findings. Imports model/ and parsers/ only.
"""

import os

from ext4audit import ROOT

# The rule data: in a checkout the repository's rules/ folder; in a built wheel, ext4audit/rules/data
# (pyproject.toml's package-dir copies rules/ there).
_PACKAGED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "data")
RULES_DIR = _PACKAGED if os.path.isdir(_PACKAGED) else os.path.join(ROOT, "rules")
