"""Action ext4_audit_policy: a host's policy from the role's variables, and the hosts whose
policies the controller still has to check, inside Ansible's worker process.

    - ext4_audit_policy:                       # per host: sets the fact ext4_audit_policy
    - ext4_audit_policy:                       # once: {host: policy} still to check, in `policies`
        hosts: "{{ ansible_play_batch }}"

A host's policy is what plugins/module_utils/policy_vars.py names, as the host sees its variables
(group_vars, host_vars, -e, the role's defaults): saved with its facts record, a group can be
stricter than the rest. The prepare step (tasks/prepare.yml) checked localhost's copy of its
host's policy when that host is audited (ext4_audit_policy_checked): that one is not checked again.
No module run, never a change: it runs under --check too.
"""

from ansible.errors import AnsibleActionFail
from ansible.module_utils.parsing.convert_bool import boolean
from ansible.plugins.action import ActionBase
from ansible_collections.ext4audit.fleet.plugins.module_utils import policy_vars


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("hosts",))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = self._task.args
        if "hosts" not in args:
            policy = policy_vars.policy_of(lambda name: self._value(name, task_vars))
            result.update(changed=False, ansible_facts={"ext4_audit_policy": policy})
            return result
        hosts = args["hosts"]
        if not isinstance(hosts, list) or not all(isinstance(host, str) for host in hosts):
            raise AnsibleActionFail("hosts: expected a list of inventory host names")
        hostvars = task_vars["hostvars"]
        prepared = hostvars["localhost"]  # the prepare step keeps the run's settings there
        checked = prepared.get("ext4_audit_policy") if boolean(prepared.get("ext4_audit_policy_checked", False)) else None
        noted = []
        for host in hosts:
            if "ext4_audit_policy" not in hostvars[host]:
                raise AnsibleActionFail("host %s has no ext4_audit_policy: this action did not note it" % host)
            noted.append((host, hostvars[host]["ext4_audit_policy"]))
        result.update(changed=False, policies=policy_vars.policies_to_check(noted, checked))
        return result

    def _value(self, name, task_vars):
        """A variable's value as the task sees it, templated (a group_vars value may be a template)."""
        if name not in task_vars:
            raise AnsibleActionFail("%s is not defined (the role's defaults define it)" % name)
        return self._templar.template(task_vars[name])
