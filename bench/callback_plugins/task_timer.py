"""A per-task timer for bench/make_audit.py: writes each task's wall time (first start to last
result, over all hosts) as JSON lines to $TASK_TIMER_OUT. An aggregate callback, so it runs
beside whatever stdout callback is configured."""

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: task_timer
type: aggregate
short_description: per-task wall time as JSON lines (bench/make_audit.py)
description: Writes one JSON line per task (name, seconds) to the file named by TASK_TIMER_OUT.
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "task_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self):
        super().__init__()
        self.out = os.environ.get("TASK_TIMER_OUT")
        self.current = None

    def _close(self):
        if self.current and self.out:
            name, start = self.current
            with open(self.out, "a") as handle:
                handle.write(json.dumps({"task": name, "s": round(time.monotonic() - start, 3)}) + "\n")
        self.current = None

    def v2_playbook_on_task_start(self, task, is_conditional):
        self._close()
        self.current = (task.get_name(), time.monotonic())

    v2_playbook_on_handler_task_start = v2_playbook_on_task_start

    def v2_playbook_on_play_start(self, play):
        self._close()

    def v2_playbook_on_stats(self, stats):
        self._close()
