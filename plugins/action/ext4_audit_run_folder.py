"""Action ext4_audit_run_folder: make a run folder's facts/ and probe/ on the controller and write
a batch of record files into them, inside Ansible's worker process.

    - ext4_audit_run_folder:
        path: "{{ ext4_audit_run_dir }}"      # made with facts/ and probe/ when missing
        facts: {"<file name>.json": "<text>"}   # optional: records to write into facts/
        probe: {"<file name>.json": "<text>"}   # optional: records to write into probe/

A module would cost a Python start and a module run on the controller per call: once for the
folder and once per batch of records (before, a `copy` per host cost two). Each file is written
to a temporary name, flushed and renamed into place, so a killed run never leaves half a record.
Names must be plain file names ending in .json; anything else is refused before anything is
written. Runs under --check as well: it writes the run's reports on the controller, not on a host.
"""

import os
import tempfile

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

SUBFOLDERS = ("facts", "probe")


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(("path",) + SUBFOLDERS)
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
        try:
            for sub in SUBFOLDERS:
                os.makedirs(os.path.join(folder, sub), mode=0o755, exist_ok=True)
            for sub, files in batches.items():
                for name in sorted(files):
                    _write(os.path.join(folder, sub), name, files[name])
        except OSError as exc:
            raise AnsibleActionFail("run folder %s: %s" % (folder, exc))
        result.update(changed=False, path=folder, written=sum(len(files) for files in batches.values()))
        return result


def _write(folder, name, text):
    handle, tmp = tempfile.mkstemp(dir=folder, prefix=".tmp-", suffix=name)
    try:
        os.fchmod(handle, 0o644)  # as the copy module wrote them (mkstemp makes 0600)
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, os.path.join(folder, name))
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
