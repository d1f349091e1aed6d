"""The ext4_probe_progress module on its own (run as ansible-core runs a module given its arguments
as JSON), against a progress file and an async job status file in the formats the probe and
ansible-core's async_wrapper write: the probe's last line and the job's end come back in one call,
and the ended job's status file is removed once read. The real follow loop is in
tests/integration/test_probe_playbook.py."""

import json
import os
import subprocess
import sys
import threading
import time

from conftest import ROOT

MODULE = os.path.join(ROOT, "plugins", "modules", "ext4_probe_progress.py")
RUNNING = {"started": True, "finished": False, "ansible_job_id": "j1"}  # async_wrapper's first write
ENDED = {"changed": False, "rc": 0, "result": {"status": "ok"}, "stderr_lines": [],
         "progress": ["ext4_probe: sweep 256/256 runs, 1.2 s", "ext4_probe: ok in 3.0 s"]}


def follow(tmp_path, seen, **args):
    args = dict(path=str(tmp_path / "progress.log"), results_file=str(tmp_path / "j1"), seen=seen, **args)
    args_file = tmp_path / "args.json"
    args_file.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": args}))
    proc = subprocess.run([sys.executable, MODULE, str(args_file)], stdout=subprocess.PIPE, timeout=60)
    return json.loads(proc.stdout.decode())


def test_the_last_line_and_the_jobs_end_come_back_in_one_call_and_the_status_file_goes(tmp_path):
    (tmp_path / "progress.log").write_text(ENDED["progress"][0] + "\n")
    (tmp_path / "j1").write_text(json.dumps(RUNNING))

    def probe_ends():
        # the probe writes its last line, then its module ends a moment later and async_wrapper
        # replaces the status file with the module's result
        time.sleep(0.6)
        with open(tmp_path / "progress.log", "a") as handle:
            handle.write(ENDED["progress"][1] + "\n")
        time.sleep(0.1)
        (tmp_path / "j1.tmp").write_text(json.dumps(ENDED))
        os.rename(tmp_path / "j1.tmp", tmp_path / "j1")

    ender = threading.Thread(target=probe_ends)
    ender.start()
    try:
        result = follow(tmp_path, seen=1, wait_s=5, min_wait_s=0.5)
    finally:
        ender.join()
    assert result["finished"] is True and result["job"]["result"] == {"status": "ok"}, result
    assert result["lines"] == ENDED["progress"]
    assert not (tmp_path / "j1").exists()  # read, then removed: nothing is left in the async directory


def test_a_running_jobs_status_file_is_kept(tmp_path):
    (tmp_path / "progress.log").write_text(ENDED["progress"][0] + "\n")
    (tmp_path / "j1").write_text(json.dumps(RUNNING))
    result = follow(tmp_path, seen=0, wait_s=1, min_wait_s=0.1)
    assert result["finished"] is False and result["job"] is None and result["lines"] == ENDED["progress"][:1]
    assert json.loads((tmp_path / "j1").read_text()) == RUNNING
