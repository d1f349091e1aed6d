"""Action ext4_probe_progress: run the module of that name, telling it how many progress lines the
previous attempt of the same `until` loop returned.

A task's arguments are templated once for all its retries, so `seen: "{{ registered.lines | length }}"`
would stay 0; the action reads the previous attempt's result from the registered variable, which
the task executor updates between attempts. With it the module returns as soon as a line comes
that was not shown yet, also one appended between two attempts.
"""

from typing import Any, Dict, Optional, Union

from ansible.plugins.action import ActionBase


def registered_name(register: Union[str, Dict[str, Any], None]) -> Optional[str]:
    """The task's `register` variable name, or None: ansible-core 2.21 keeps `register: name` as a
    projection {name: expression}, earlier cores as the name itself."""
    if isinstance(register, dict):
        return next(iter(register), None)
    return register or None


class ActionModule(ActionBase):
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        previous = (task_vars or {}).get(registered_name(self._task.register))
        seen = len(previous.get("lines") or []) if isinstance(previous, dict) and "finished" in previous else 0
        result.update(self._execute_module(module_args=dict(self._task.args, seen=seen), task_vars=task_vars))
        return result
