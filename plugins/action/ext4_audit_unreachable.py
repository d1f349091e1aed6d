"""Action ext4_audit_unreachable: count a host that the facts step could not reach as unreachable
in Ansible's own stats (the PLAY RECAP, ansible-runner's `dark`, AWX's host list), without
contacting it again.

    - ext4_audit_unreachable:
        msg: "{{ ext4_audit_facts.msg }}"    # the facts task's reason, already in the host's record

The facts task keeps such a host with ignore_unreachable, so that the play does not end when every
host of a batch is down and the report step still records it; Ansible then counts it `ignored`.
This task, in the report step after the report and before the gate, gives the same answer again as
unreachable, which takes the host out of the play; a second connection could take as long as the first and could
find the host back, at odds with its record.
"""

from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("msg",))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        msg = self._task.args.get("msg")
        result.update(changed=False, unreachable=True,
                      msg=msg if isinstance(msg, str) and msg else "the facts step could not reach this host")
        return result
