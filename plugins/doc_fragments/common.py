# -*- coding: utf-8 -*-
# Copyright: ext4 fleet audit maintainers
# MIT License (see LICENSE)
"""What the modules of this collection share in their documentation, said once."""


class ModuleDocFragment:
    # Every module: it changes nothing, so check mode returns the same result and there is no diff.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    support: full
    description: Runs under check mode and returns the same result.
  diff_mode:
    support: none
    description: Changes nothing, so there is no diff.
author:
  - ext4 fleet audit maintainers (@ext4audit)
"""

    # The modules that are action plugins run on the controller by the audit's roles.
    CONTROLLER = r"""
options: {}
attributes:
  action:
    support: full
    description: An action plugin on the controller; no module runs on a host.
notes:
  - The roles of this collection call it; there is no use for it outside an audit run.
"""
