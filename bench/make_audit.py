#!/usr/bin/env python3
"""Benchmark: `make audit` on the local inventory (this machine, probe on), with a per-task timer.

    sudo .venv/bin/python bench/make_audit.py [--tree DIR ...] [--repeat 5] [--cold] [--make-audit]

Runs `ansible-playbook playbooks/audit.yml` (with --make-audit: the command line of the checkout's
`make audit`, `ext4audit run -- playbooks/audit.yml`, with its own start and exit record) in each checkout given (default: this one; give
several to alternate old and new code run by run), with that checkout's `ext4audit` package
first on PYTHONPATH and its own .venv when it has one (else this checkout's) and its own probe scratch directory, under the shared heavy lock (per run, or --lock-held when the caller holds it). --cold removes the probe's scratch directory
(its image cache) before each run. Prints one Markdown row per run: wall time, load average at
the start, and the slowest tasks (bench/callback_plugins/task_timer.py). The audit's exit code
is the gate's verdict (0 pass, 1 fail); anything else is an error.
"""

import argparse
import collections
import glob
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LOCK = "/tmp/ext4audit-heavy.lock"


def scratch_dir(tree):
    """Each checkout's own probe directory, so alternating old and new code keeps each one's cache."""
    return "/dev/shm/ext4-audit-probe-bench-" + os.path.basename(tree)


def forget_cache(tree, locked):
    if os.path.exists(scratch_dir(tree)):
        # the checkout's probe: a script in older trees, a package (run from the tree's root) since
        script = os.path.join(tree, "roles", "chopper_probe", "files", "ext4_probe.py")
        probe = [script] if os.path.exists(script) else ["-m", "plugins.module_utils.ext4_probe"]
        subprocess.run(locked + [sys.executable] + probe + ["sweep-stale", scratch_dir(tree)], check=True, cwd=tree)
        subprocess.run(locked + ["rm", "-rf", "--one-file-system", scratch_dir(tree)], check=True)


def venv(tree):
    """The checkout's own venv when it has one (its console scripts are its own code's), else this one's."""
    own = os.path.join(tree, ".venv")
    return own if os.path.exists(os.path.join(own, "bin", "python")) else os.path.join(ROOT, ".venv")


def make_audit_command(tree):
    """The command line of the checkout's `make audit` (its Makefile's recipe), with its venv, without
    make itself (its setup step would check the venv against that checkout's requirements)."""
    with open(os.path.join(tree, "Makefile")) as handle:
        recipe = handle.read().split("\naudit:", 1)[1].split("\n\t", 1)[1].split("\n", 1)[0]
    return shlex.split(recipe.replace("$(VENV)", venv(tree)).replace("$(ARGS)", ""))


def one(tree, cold, locked, make_audit):
    if cold:
        forget_cache(tree, locked)
    timer = tempfile.NamedTemporaryFile(prefix="task-timer-", suffix=".jsonl", delete=False)
    timer.close()
    env = dict(os.environ, ANSIBLE_CONFIG=os.path.join(tree, "ansible.cfg"), PYTHONPATH=tree,
               ANSIBLE_CALLBACK_PLUGINS=os.path.join(ROOT, "bench", "callback_plugins"),
               ANSIBLE_CALLBACKS_ENABLED="task_timer", TASK_TIMER_OUT=timer.name)
    load = os.getloadavg()
    start = time.perf_counter()
    command = make_audit_command(tree) if make_audit else \
        [os.path.join(venv(tree), "bin", "ansible-playbook"), "playbooks/audit.yml"]
    proc = subprocess.run(locked + command + ["-e", "chopper_probe_scratch_dir=" + scratch_dir(tree)],
                          cwd=tree, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, universal_newlines=True)
    wall = time.perf_counter() - start
    if proc.returncode not in (0, 1):
        sys.exit("audit failed (exit %d):\n%s" % (proc.returncode, proc.stdout[-3000:]))
    tasks = collections.Counter()
    with open(timer.name) as handle:
        for line in handle:
            entry = json.loads(line)
            tasks[entry["task"]] += entry["s"]
    os.unlink(timer.name)
    return wall, load, tasks, probe_seconds(tree)


def probe_seconds(tree):
    """The probe's own duration_s in the run's record (the follow task's time less this: its overhead)."""
    for path in glob.glob(os.path.join(tree, "reports", "latest", "probe", "localhost-*.json")):
        with open(path) as handle:
            return (json.load(handle).get("result") or {}).get("duration_s")
    return None


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tree", action="append", help="checkout to run (repeat to alternate); default: this one")
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--cold", action="store_true", help="remove the probe's image cache before each run")
    parser.add_argument("--top", type=int, default=6, help="slowest tasks to list per run")
    parser.add_argument("--make-audit", action="store_true",
                        help="time the checkout's `make audit` command line (ext4audit run), not ansible-playbook alone")
    parser.add_argument("--lock-held", action="store_true", help="the caller holds the heavy lock for the whole series")
    args = parser.parse_args()
    locked = [] if args.lock_held else ["flock", LOCK]
    trees = [os.path.abspath(t) for t in args.tree or [ROOT]]
    print("| tree | cache | wall s | load (1, 5, 15 min) | probe s | slowest tasks s |")
    print("|---|---|---|---|---|---|")
    walls = collections.defaultdict(list)
    for _ in range(args.repeat):
        for tree in trees:
            wall, load, tasks, probe = one(tree, args.cold, locked, args.make_audit)
            walls[tree].append(wall)
            top = "; ".join("%s %.2f" % (name, s) for name, s in tasks.most_common(args.top))
            print("| %s | %s | %.2f | %.2f, %.2f, %.2f | %s | %s |" % (
                os.path.basename(tree), "cold" if args.cold else "as left", wall, load[0], load[1], load[2],
                "-" if probe is None else "%.2f" % probe, top),
                flush=True)
    for tree in trees:
        ordered = sorted(walls[tree])
        print("%s: median %.2f s (min %.2f, max %.2f, %d runs)" % (
            tree, ordered[len(ordered) // 2], ordered[0], ordered[-1], len(ordered)))


if __name__ == "__main__":
    main()
