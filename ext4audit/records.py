"""Save a batch of per-host records into a run folder, in one step on the controller.

    python -m ext4audit.records FOLDER < {"<file name>": "<file text>", ...}

roles/ext4_audit/tasks/facts.yml renders each host's facts record (to_nice_json) and hands the
whole batch over on stdin: one controller process per batch, where a delegated `copy` per host
cost two module runs on the controller per host (a third of the audit's time at 100 hosts).
Each file is written to a temporary name, flushed to disk and renamed into place, so a killed run
never leaves half a record. File names come from the playbook (sanitized host name and hash);
anything that is not a plain file name is refused before anything is written.

Standard library only and nothing else imported: it runs in every audit's critical path.
Exit codes: 0 written, 2 refused (the message says why).
"""

import json
import os
import sys
import tempfile


def check(folder, files):
    if not os.path.isdir(folder):
        raise ValueError("%s is not a folder (the run folder is made by the prepare step)" % folder)
    if not isinstance(files, dict) or not all(isinstance(text, str) for text in files.values()):
        raise ValueError("expected a JSON object of file name -> text on stdin")
    for name in files:
        if not name or name.startswith(".") or os.path.basename(name) != name or not name.endswith(".json"):
            raise ValueError("not a plain record file name: %r" % name)


def write(folder, name, text):
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


def main(argv):
    if len(argv) != 1:
        print(__doc__, file=sys.stderr)
        return 2
    try:
        files = json.load(sys.stdin)
        check(argv[0], files)
        for name in sorted(files):
            write(argv[0], name, files[name])
    except (OSError, ValueError) as exc:
        print("error: %s" % exc, file=sys.stderr)
        return 2
    print("%d record(s) written to %s" % (len(files), argv[0]))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
