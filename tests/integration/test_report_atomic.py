"""Reports are written atomically: the report step (`python -m ext4audit report`, the playbook's
aggregation) SIGKILLed at several points while it works on a large synthetic run leaves
reports/latest on the previous run, complete, every file parsing; latest only ever moves to a
run that is complete.

Kill points: 6 at seeded random times over the step's measured duration, plus 4 triggered by
what the step has written (the workers' first host reports in the staging folder; hosts/ moved
into place; junit.xml, the first fleet file, on disk; report.html, the last file before
summary.json, on disk), so the windows between the first write and the move of `latest` are hit
for certain. After each kill no worker process of the step is left, and the killed run's folder
has a summary.json only if it is complete (gate, merge and --baseline take one to mean that).
"""

import glob
import hashlib
import html.parser
import json
import os
import random
import re
import shutil
import signal
import subprocess
import time
import xml.etree.ElementTree as ET

from prometheus_client.parser import text_string_to_metric_families

from ext4audit.formats import writers
from ext4audit.parsers import kernel_version
from ext4audit.parsers.ext4_parsers.mounts import parse_ext4_options
from ext4audit.parsers.ext4_parsers.superblock import parse_dumpe2fs
from conftest import ROOT, VENV_BIN, fixture_text

HOSTS = 2000
SEED = int(os.environ.get("EXT4AUDIT_FAULT_SEED", "20260515"))
OUTPUTS = ("summary.json", "junit.xml", "summary.md", "report.html", "report.sarif", "ext4audit.prom", "report.tap",
           "findings-index.json", "report-data")


def facts(mountpoint, options):
    """A host's facts as ext4_facts returns them, from real fixtures (6.18 defaults, e2fsprogs 1.47)."""
    fs = {"device": "/dev/vdb", "mountpoint": mountpoint, "fstype": "ext4", "options_source": "proc",
          "options": options, "superblock": parse_dumpe2fs(fixture_text(
              "dumpe2fs", "e2fsprogs-1.47-default-2g.txt")),
          "queue": {"write_cache": "write back", "rotational": 0}, "fstab": None, "fstab_drift": [], "jbd2": None}
    kernel = dict(kernel_version.identify("6.18.44", "Linux version 6.18.44 #1 SMP"), page_size=4096)
    return {"schema": "ext4-fleet-audit/facts/v1", "kernel": kernel, "filesystems": [fs], "netfs": [],
            "errors": [{"where": "filesystem " + mountpoint, "reason": "dumpe2fs said <b>no</b>"}]}


def write_facts(run_dir, hosts, hostile_every=100):
    os.makedirs(os.path.join(run_dir, "facts"))
    options = parse_ext4_options(fixture_text("ext4_options", "kernel-6.18-defaults.txt"))
    plain = facts("/data", options)
    hostile = facts("/srv/<script>alert(1)</script> `$(id)`\n\\xff", options + ["nobarrier"])
    for number in range(hosts):
        record = {"host": "host-%05d" % number, "groups": ["web"], "status": "audited",
                  "facts": hostile if number % hostile_every == 7 else plain}
        if number % 500 == 3:
            record = {"host": "host-%05d" % number, "groups": [], "status": "unreachable", "reason": "ssh: timed out"}
        with open(os.path.join(run_dir, "facts", "%05d.json" % number), "w") as handle:
            json.dump(record, handle)


def report_argv(run_dir):
    return [os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "report", run_dir, "--fail-on", "critical",
            "--unreachable-incomplete", "false"]


def digest(folder):
    result = {}
    for path in sorted(glob.glob(os.path.join(folder, "**"), recursive=True)):
        if os.path.isfile(path):
            with open(path, "rb") as handle:
                result[os.path.relpath(path, folder)] = hashlib.sha1(handle.read()).hexdigest()
    return result


class _Html(html.parser.HTMLParser):
    def error(self, message):  # Python < 3.10 only
        raise AssertionError(message)


def check_complete(run_dir, hosts):
    """Every output of the step is there and parses; no temporary file is left."""
    names = os.listdir(run_dir)
    assert not [n for n in names if n.startswith(".")], names
    missing = [n for n in OUTPUTS if n not in names]
    assert not missing, "%s lacks %s" % (run_dir, missing)
    reports = sorted(glob.glob(os.path.join(run_dir, "hosts", "*.json")))
    assert len(reports) == hosts, "%d host reports, expected %d" % (len(reports), hosts)
    for path in reports:
        with open(path) as handle:
            assert json.load(handle)["schema"] == "ext4-fleet-audit/host-report/v1", path
    with open(os.path.join(run_dir, "summary.json")) as handle:
        assert json.load(handle)["counts"]["hosts"] == hosts
    ET.parse(os.path.join(run_dir, "junit.xml"))
    with open(os.path.join(run_dir, "summary.md")) as handle:
        assert handle.read().startswith("## ext4 fleet audit")
    with open(os.path.join(run_dir, "report.html")) as handle:
        page = handle.read()
    parser = _Html()
    parser.feed(page)
    parser.close()
    assert page.rstrip().endswith("</html>")
    # report.html's details (report-data/, in place before the page): every host in one of its chunks
    chunks = glob.glob(os.path.join(run_dir, "report-data", "hosts-*.js"))
    assert sum(open(path).read().count('"n":') for path in chunks) == hosts
    with open(os.path.join(run_dir, "report.sarif")) as handle:
        assert json.load(handle)["runs"]
    with open(os.path.join(run_dir, "ext4audit.prom")) as handle:
        assert list(text_string_to_metric_families(handle.read()))


def reset(run_dir):
    """The run folder as the playbook leaves it before the report step: facts only."""
    for name in os.listdir(run_dir):
        if name != "facts":
            path = os.path.join(run_dir, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.unlink(path)


def point_latest(reports, name):
    tmp = os.path.join(reports, ".latest-test")
    os.symlink(name, tmp)
    os.replace(tmp, os.path.join(reports, "latest"))


def workers_left(run_dir, grace=3.0):
    """Processes of a report step on run_dir still alive `grace` s after it was killed (its
    workers are forks of it: the same command line)."""
    deadline = time.monotonic() + grace
    while True:
        alive = []
        for cmdline in glob.glob("/proc/[0-9]*/cmdline"):
            try:
                with open(cmdline, "rb") as handle:
                    args = handle.read().split(b"\0")
            except OSError:
                continue
            if b"ext4audit" in args and run_dir.encode() in args:
                alive.append(cmdline.split("/")[2])
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.05)


def kill_when(proc, condition, timeout=120):
    """SIGKILL proc as soon as condition() holds; False if proc ended first."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            proc.send_signal(signal.SIGKILL)
            proc.wait()
            return True
        if proc.poll() is not None:
            return False
        time.sleep(0.002)
    raise AssertionError("the report step did not get there in %d s" % timeout)


def test_report_step_sigkilled_at_10_points_leaves_latest_on_a_complete_run(tmp_path):
    reports = str(tmp_path / "reports")
    previous, current = os.path.join(reports, "run-a"), os.path.join(reports, "run-b")
    write_facts(previous, HOSTS)
    write_facts(current, HOSTS)
    started = time.monotonic()
    done = subprocess.run(report_argv(previous), cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    duration = time.monotonic() - started
    assert done.returncode == 0, done.stderr.decode()[-2000:]
    assert os.readlink(os.path.join(reports, "latest")) == "run-a"
    check_complete(previous, HOSTS)
    before = digest(previous)

    rng = random.Random(SEED)
    points = [round(duration * rng.uniform(0.05, 1.0), 3) for _ in range(6)]
    print("report step of %d hosts: %.2f s uninterrupted; seed %d, kill points (s): %s"
          % (HOSTS, duration, SEED, points))
    triggers = [("first host reports staged", lambda: bool(glob.glob(os.path.join(current, ".report-*", "hosts", "*")))),
                ("hosts/ in place", lambda: os.path.isdir(os.path.join(current, "hosts"))),
                ("junit.xml written", lambda: os.path.exists(os.path.join(current, "junit.xml"))),
                ("report.html written", lambda: os.path.exists(os.path.join(current, "report.html")))]
    outcomes = []
    for label, point in [("at %.3f s" % p, p) for p in points] + [(t[0], t[1]) for t in triggers]:
        for attempt in range(1, 6):  # a triggered kill is retried if the step ran past its window
            reset(current)
            proc = subprocess.Popen(report_argv(current), cwd=ROOT, stdout=subprocess.DEVNULL,
                                    stderr=subprocess.DEVNULL)
            if callable(point):
                killed = kill_when(proc, point)
            else:
                time.sleep(point)
                killed = proc.poll() is None
                proc.send_signal(signal.SIGKILL)
                proc.wait()
            assert not workers_left(current), "worker processes outlived the killed step (kill %s)" % label
            latest = os.readlink(os.path.join(reports, "latest"))
            written = len(os.listdir(os.path.join(current, "hosts"))) if os.path.isdir(
                os.path.join(current, "hosts")) else 0
            state = "%d host reports, %s" % (written, ", ".join(n for n in OUTPUTS if os.path.exists(
                os.path.join(current, n))) or "no fleet file")
            if os.path.exists(os.path.join(current, "summary.json")):
                check_complete(current, HOSTS)
            if latest == "run-a":
                assert digest(previous) == before, "the previous run's files changed (kill %s)" % label
                check_complete(previous, HOSTS)
            else:  # the kill came after the step moved latest: the new run must be complete
                assert latest == "run-b" and not callable(point), (label, latest)
                check_complete(current, HOSTS)
                point_latest(reports, "run-a")
            if not callable(point) or (killed and latest == "run-a"):
                break
        outcomes.append((label, attempt, killed, latest, state))
    print("kill, attempts, killed before the step ended, latest after, what the step had written:")
    for row in outcomes:
        print("  %-28s %d  %-5s %s  %s" % row)
    assert len(outcomes) == 10
    for label, attempt, killed, latest, state in outcomes[-4:]:
        assert killed and latest == "run-a", "the triggered kill '%s' never hit its window in 5 tries" % label
    # the kills covered more than the reading phase: some came while files were being written
    assert any(row[4] != "0 host reports, no fleet file" and row[3] == "run-a" for row in outcomes), outcomes


def children_while(proc, interval=0.005):
    """The most child processes proc had at once while it ran (sampled)."""
    most = 0
    while proc.poll() is None:
        count = 0
        for path in glob.glob("/proc/%d/task/*/children" % proc.pid):
            try:
                with open(path) as handle:
                    count += len(handle.read().split())
            except OSError:
                pass
        most = max(most, count)
        time.sleep(interval)
    return most


STAMP = re.compile(rb"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ|ext4audit_last_run_timestamp_seconds [0-9.e+]+")


def test_the_same_files_with_one_process_or_three_workers(tmp_path):
    """The report step's files do not depend on --jobs: one process, and three worker processes
    whose shards are joined in order, write the same bytes apart from the time stamps. With a
    baseline that differs (each worker compares its own hosts), hostile names and unreachable
    hosts."""
    hosts = 600
    base = str(tmp_path / "reports" / "base")
    write_facts(base, hosts, hostile_every=40)
    assert subprocess.run(report_argv(base), cwd=ROOT, stdout=subprocess.DEVNULL).returncode in (0, 1, 2)
    files, workers = {}, {}
    for jobs in (1, 3):
        run_dir = str(tmp_path / ("jobs-%d" % jobs) / "run")  # the same run id
        write_facts(run_dir, hosts)
        proc = subprocess.Popen(report_argv(run_dir) + ["--baseline", base, "--jobs", str(jobs)], cwd=ROOT,
                                stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        workers[jobs] = children_while(proc)
        error = proc.stderr.read().decode()
        assert proc.wait() in (0, 1) and not error, error[-2000:]
        check_complete(run_dir, hosts)
        files[jobs] = {}
        for path in sorted(glob.glob(os.path.join(run_dir, "**"), recursive=True)):
            if os.path.isfile(path) and os.sep + "facts" + os.sep not in path:
                with open(path, "rb") as handle:
                    files[jobs][os.path.relpath(path, run_dir)] = STAMP.sub(b"T", handle.read())
    print("child processes seen: %s; files compared: %d" % (workers, len(files[1])))
    assert workers[1] == 0 and workers[3] >= 3, workers
    chunks = -(-hosts // writers.SHARD_ALIGN)  # report-data/ holds a details file per block of hosts
    assert len(files[1]) == hosts + len(OUTPUTS) - 1 + chunks and sorted(files[1]) == sorted(files[3])
    different = [name for name in files[1] if files[1][name] != files[3][name]]
    assert not different, different[:10]
    summary = json.loads(files[3]["summary.json"])
    assert summary["baseline"]["new"] and summary["baseline"]["resolved"]  # the comparison had work to do
