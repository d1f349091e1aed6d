"""Action ext4_probe_progress: run the module of that name, telling it how many progress lines the
previous attempt of the same `until` loop returned.

A task's arguments are templated once for all its retries, so `seen: "{{ registered.lines | length }}"`
would stay 0; the action reads the previous attempt's result from the registered variable, which
the task executor updates between attempts. With it the module returns as soon as a line comes
that was not shown yet, also one appended between two attempts.
"""

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        previous = (task_vars or {}).get(self._task.register) if self._task.register else None
        seen = len(previous.get("lines") or []) if isinstance(previous, dict) and "finished" in previous else 0
        result.update(self._execute_module(module_args=dict(self._task.args, seen=seen), task_vars=task_vars))
        return result
