"""Action ext4_audit_run_folder: make a run folder's facts/ and probe/ on the controller and write
a batch of record files into them, inside Ansible's worker process.

    - ext4_audit_run_folder:
        path: "{{ ext4_audit_run_dir }}"      # made with facts/ and probe/ when missing
        facts: {"<file name>.json": "<text>"}   # optional: records to write into facts/
        probe: {"<file name>.json": "<text>"}   # optional: records to write into probe/
        exit_file: /tmp/ext4audit-run-x/verdict.json  # optional: name the folder there for `ext4audit run`

A module would cost a Python start and a module run on the controller per call: once for the
folder and once per batch of records (before, a `copy` per host cost two). Each file is written
to a temporary name, flushed and renamed into place, so a killed run never leaves half a record.
Names must be plain file names ending in .json; anything else is refused before anything is
written. exit_file: the private file `ext4audit run` (ext4audit/run.py) gives the playbook, where
the report step names the run folder it gated on, {"run_dir": path, "gate": bool} (mode 0600, written the same
way). Runs under --check as well: it writes the run's reports on the controller, not on a host.
"""

import json
import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

SUBFOLDERS = ("facts", "probe")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path", "exit_file", "gate") + SUBFOLDERS)
    _supports_check_mode = True

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        folder = self._task.args.get("path")
        if not isinstance(folder, str) or not folder:
            raise AnsibleActionFail("path: the run folder is required")
        batches = dict((sub, self._task.args.get(sub) or {}) for sub in SUBFOLDERS)
        for sub, files in batches.items():
            if not isinstance(files, dict) or not all(isinstance(text, str) for text in files.values()):
                raise AnsibleActionFail("%s: expected a mapping of file name -> text" % sub)
            for name in files:
                if not name or name.startswith(".") or os.path.basename(name) != name or not name.endswith(".json"):
                    raise AnsibleActionFail("%s: not a plain record file name: %r" % (sub, name))
        exit_file = self._task.args.get("exit_file")
        if exit_file is not None and (not isinstance(exit_file, str) or not os.path.isabs(exit_file)):
            raise AnsibleActionFail("exit_file: expected an absolute path")
        # gate false: the run reports only; `ext4audit run` then exits as ansible-playbook did
        gate = self._task.args.get("gate", True)
        if not isinstance(gate, bool):
            raise AnsibleActionFail("gate: expected a boolean")
        try:
            for sub in SUBFOLDERS:
                os.makedirs(os.path.join(folder, sub), mode=0o755, exist_ok=True)
            for sub, files in batches.items():
                for name in sorted(files):
                    _write(os.path.join(folder, sub), name, files[name])
        except OSError as exc:
            raise AnsibleActionFail("run folder %s: %s" % (folder, exc))
        if exit_file:
            try:
                _write(os.path.dirname(exit_file), os.path.basename(exit_file),
                       json.dumps({"run_dir": os.path.abspath(folder), "gate": gate}) + "\n", mode=0o600)
            except OSError as exc:
                raise AnsibleActionFail("exit_file %s: %s" % (exit_file, exc))
        result.update(changed=False, path=folder, written=sum(len(files) for files in batches.values()))
        return result


def _write(folder, name, text, mode=0o644):
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=name)
    try:
        os.fchmod(handle, mode)  # records: 0644, as the copy module wrote them (mkstemp makes 0600)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, os.path.join(folder, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
