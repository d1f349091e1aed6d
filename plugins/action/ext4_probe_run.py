"""Action ext4_probe_run: run the module of that name with the probe's code and a fresh private
directory's name, so deploying, running and collecting the probe is one module run.

    - ext4_probe_run:
        plan_file: RUN/probe/plan.json  # the plan, read here into the job (no templating of 130 KB)
        job: {...}       # the probe's job without its plan
      async: 600
      poll: 0
      register: started  # started.workdir: where the probe's progress.log is

The plan is read from its file on the controller and put into the job here: templated from a
lookup, its thousands of values took a second per host. The code is the probe's payload, one zip
of the probe's package and the parsers it imports (module_utils/probe_payload.py). The
directory's name is random (the module makes it and refuses anything already there), and goes
back in the result so the task that follows the probe can read its progress file.
"""

import base64
import json
import os
import secrets
from typing import Optional

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.ext4audit.fleet.plugins.module_utils.probe_payload import build

# /tmp is sticky: nobody else can rename or remove the root-owned 0700 directory made in it.
WORKDIR_PARENT = "/tmp"


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("job", "plan_file"))

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        # Set on the instance: ActionBase.__init__ of ansible-core before 2.19 sets it False there.
        self._supports_async = True

    def run(self, tmp: Optional[str] = None, task_vars: Optional[dict] = None) -> dict:
        result = super().run(tmp, task_vars)
        job = self._task.args.get("job")
        if not isinstance(job, dict):
            raise AnsibleActionFail("job: expected the probe's job as a mapping")
        plan_file = self._task.args.get("plan_file")
        if not isinstance(plan_file, str) or not plan_file:
            raise AnsibleActionFail("plan_file: the plan's file on the controller is required")
        try:
            with open(plan_file, "rb") as handle:  # this run's own plan, written on the controller
                plan = json.load(handle)
        except (OSError, ValueError) as exc:
            raise AnsibleActionFail("plan_file %s: %s" % (plan_file, exc))
        args = {"job": dict(job, plan=plan), "workdir": os.path.join(WORKDIR_PARENT, "ext4-probe-" + secrets.token_hex(12))}
        args["probe"] = base64.b64encode(build()).decode("ascii")
        result.update(self._execute_module(module_args=args, task_vars=task_vars,
                                           wrap_async=self._task.async_val))
        result["workdir"] = args["workdir"]
        return result
