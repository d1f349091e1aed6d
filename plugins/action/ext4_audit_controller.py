"""Action ext4_audit_controller: run one of the controller package's commands (ext4audit check,
plan, report...) on the controller, inside Ansible's worker process.

    - ext4_audit_controller:
        argv: ["{{ ext4_audit_command }}", check, --formats, html]
      register: checked   # rc, stdout, stderr, stdout_lines, stderr_lines, as the command module's

The command module would first start a module's own Python on the controller to start the command:
about half a second a call, five calls a run. The command runs on the controller whatever the
task's host, from an argument list (no shell), with no input. A command that cannot be started
gives rc 2, its reason in msg and empty stdout and stderr, as the command module does. Never a
change (its commands write the run's reports on the controller), so it runs under --check too.
"""

import subprocess

from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.text.converters import to_text
from ansible.plugins.action import ActionBase


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("argv",))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        argv = self._task.args.get("argv")
        # numbers come templated as numbers (a seed, a run count): as the command module, take their text
        if not isinstance(argv, list) or not argv or not all(isinstance(arg, (str, int, float)) and not isinstance(arg, bool)
                                                             for arg in argv):
            raise AnsibleActionFail("argv: expected a non-empty list of strings, the command and its arguments")
        argv = [to_text(arg) for arg in argv]
        try:
            proc = subprocess.run(argv, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE, check=False)
        except OSError as exc:
            result.update(changed=False, failed=True, rc=2, msg="%s: %s" % (argv[0], exc.strerror),
                          stdout="", stderr="", stdout_lines=[], stderr_lines=[])
            return result
        stdout = to_text(proc.stdout, errors="surrogate_or_replace").rstrip("\n")
        stderr = to_text(proc.stderr, errors="surrogate_or_replace").rstrip("\n")
        result.update(changed=False, failed=proc.returncode != 0, rc=proc.returncode, cmd=argv,
                      stdout=stdout, stderr=stderr, stdout_lines=stdout.splitlines(), stderr_lines=stderr.splitlines())
        if proc.returncode != 0:
            result["msg"] = "non-zero return code"
        return result
