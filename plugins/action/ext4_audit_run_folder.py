"""Action ext4_audit_run_folder: claim a run folder on the controller, and write the facts of a
batch of hosts, or a batch of probe records, into it, inside Ansible's worker process.

    - ext4_audit_run_folder:                   # prepare: claim the run folder
        reports_dir: /srv/audit/reports
        run_id: 20261124-120000-000000
    - ext4_audit_run_folder:                   # facts: a record for every host of the play
        path: "{{ ext4_audit_run_dir }}"
        collect: ext4_audit_facts              # the facts task's registered variable
    - ext4_audit_run_folder:
        path: "{{ ext4_audit_run_dir }}"
        probe: {"<file name>.json": "<text>"}  # records to write into probe/

A module would cost a Python start and a module run on the controller per call. The rules for the
folder, the records' names and what one host may send are in plugins/module_utils/run_folder.py,
which the report step follows too: the folder is claimed with mkdir (an existing one is refused),
opened from / without following a symbolic link, and refused when another user could swap what is
in it. `collect` writes a record for every host of the play that has an answer, audited or not,
and the play's host list (play-hosts.json): a host whose answer is missing, skipped, not JSON
Ansible could read, or past a bound is recorded as failed with the reason, and a host with no
record at all is failed by the report step. Runs under --check as well: it writes the run's reports
on the controller, not on a host.
"""

import json
import os

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.ext4audit.fleet.plugins.module_utils import run_folder
from ansible_collections.ext4audit.fleet.plugins.module_utils.ext4_parsers.common import FACTS_SCHEMA


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "reports_dir", "run_id", "collect", "probe"))
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        if args.get("reports_dir") is not None:
            try:
                folder = run_folder.claim(args["reports_dir"], args.get("run_id"))
            except (run_folder.FolderError, OSError) as exc:
                raise AnsibleActionFail("ext4_audit_reports_dir / ext4_audit_run_id: %s" % exc)
            result.update(changed=False, path=folder, written=0)
            return result
        folder = args.get("path")
        if not isinstance(folder, str) or not folder:
            raise AnsibleActionFail("path: the run folder is required")
        probe = args.get("probe") or {}
        if not isinstance(probe, dict) or not all(isinstance(text, str) for text in probe.values()):
            raise AnsibleActionFail("probe: expected a mapping of file name -> text")
        for name in probe:
            if not name or name.startswith(".") or os.path.basename(name) != name or not name.endswith(".json"):
                raise AnsibleActionFail("probe: not a plain record file name: %r" % name)
        facts = self._records(args["collect"], task_vars or {}) if args.get("collect") else {}
        try:
            fd = run_folder.open_folder(folder, private=2)
            try:
                for sub, files in (("facts", facts), ("probe", probe)):
                    sub_fd = run_folder.open_folder(os.path.join(folder, sub), private=3)
                    try:
                        for name in sorted(files):
                            run_folder.write_file(sub_fd, name, files[name])
                    finally:
                        os.close(sub_fd)
                if args.get("collect"):  # with the hosts of an earlier facts play of the run, if any
                    hosts = _earlier_hosts(fd)
                    known = set(hosts)
                    hosts += [h for h in task_vars.get("ansible_play_hosts_all") or [] if h not in known]
                    run_folder.write_file(fd, run_folder.PLAY_HOSTS, run_folder.record_text({"hosts": hosts}))
            finally:
                os.close(fd)
        except (run_folder.FolderError, OSError) as exc:
            raise AnsibleActionFail("run folder %s: %s" % (folder, exc))
        result.update(changed=False, path=folder, written=len(facts) + len(probe))
        return result

    @staticmethod
    def _records(variable, task_vars):
        """{file name: text} of the facts records of this batch's hosts, and of every host of the
        play whose answer is in (a host that failed at the facts task left the batch)."""
        hostvars = task_vars["hostvars"]
        batch = set(task_vars.get("ansible_play_batch") or [])
        records = {}
        for host in task_vars.get("ansible_play_hosts_all") or []:
            answer = hostvars[host].get(variable)
            if answer is None and host not in batch:
                continue  # not reached yet (a later batch), or never: the report step fails it
            record = _record(host, answer, hostvars[host])
            records[run_folder.record_name(host)] = run_folder.record_text(record) or run_folder.record_text(
                dict(record, status="failed", facts=None,
                     reason="its answer is over %d bytes as a record" % run_folder.ANSWER_MAX_BYTES))
        return records


def _earlier_hosts(fd):
    """The hosts play-hosts.json lists already (a playbook with two facts plays), [] when none."""
    try:
        handle = os.open(run_folder.PLAY_HOSTS, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
    except FileNotFoundError:
        return []
    with os.fdopen(handle, "rb") as source:
        data = source.read(run_folder.ANSWER_MAX_BYTES + 1)
    try:
        hosts = json.loads(data).get("hosts")
    except (ValueError, AttributeError):
        hosts = None
    if not isinstance(hosts, list) or not all(isinstance(h, str) for h in hosts):
        raise AnsibleActionFail("run folder: %s is not a list of hosts" % run_folder.PLAY_HOSTS)
    return hosts


def _record(host, answer, host_vars):
    """A host's facts record: audited with its facts, or unreachable or failed with the reason."""
    answer = answer if isinstance(answer, dict) else {}
    facts = answer.get("ext4_facts")
    status, reason = "audited", None
    if not answer:
        status, reason = "failed", "no answer from the facts task (the play did not run it on this host)"
    elif answer.get("unreachable"):
        status, reason = "unreachable", answer.get("msg")
    elif answer.get("skipped"):
        status, reason = "failed", "the facts task was skipped on this host: %s" % (
            answer.get("skip_reason") or "its answer said skipped")
    elif answer.get("failed") or facts is None:
        status, reason = "failed", answer.get("msg") or "no facts returned"
    elif not isinstance(facts, dict) or facts.get("schema") != FACTS_SCHEMA:
        status, reason = "failed", "its answer is not a facts document of schema %s" % FACTS_SCHEMA
    else:
        problem = run_folder.answer_problem(facts)
        if problem:
            status, reason = "failed", "its answer breaks a bound: %s" % problem
    if reason is not None and not isinstance(reason, str):
        reason = "no reason given"
    if reason is not None and run_folder.answer_problem(reason):  # the reason comes from the host too
        reason = reason[:1024].encode("utf-8", "backslashreplace").decode("utf-8")
    groups = host_vars.get("group_names") or []
    return {"host": host, "groups": groups, "status": status, "reason": reason,
            "policy": host_vars.get("ext4_audit_policy"), "facts": facts if status == "audited" else None}
