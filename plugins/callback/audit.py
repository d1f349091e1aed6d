# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""Stdout callback: the audit's phases, the probe's live progress and the summary, in a few lines."""

from __future__ import absolute_import, division, print_function

__metaclass__ = type

DOCUMENTATION = r"""
name: audit
type: stdout
short_description: Short screen output for the ext4 fleet audit (Ansible's default output with -v)
description:
  - Without C(-v), prints one line per play and host when the play ends (the audit's phases, i.e.
    prepare, facts, probe, report; a play of more than 10 hosts gets one line of counts instead),
    while a play runs a line of how many hosts are done with the running task (at most every 2 s
    and each tenth of the hosts, so short runs print none), each failure and unreachable host as it happens with its
    message, the probe's progress lines as they come (the sweep with its rate and the time left,
    each confirmation probe as it ends), the text of C(ansible.builtin.debug) tasks as plain lines
    (the audit's summary table, verdict and report path), and Ansible's usual C(PLAY RECAP) (above 10
    hosts, one line of counts and the hosts that failed or were unreachable).
  - With C(-v) or more, it is Ansible's C(default) callback, unchanged.
  - The project's C(ansible.cfg) selects it (C(stdout_callback = ext4audit.fleet.audit)); elsewhere set
    C(ANSIBLE_STDOUT_CALLBACK=ext4audit.fleet.audit).
version_added: 1.1.0
author:
  - ext4 fleet audit maintainers (@ext4audit)
extends_documentation_fragment:
  - default_callback
  - result_format_callback
requirements:
  - set as stdout callback in configuration
"""

import re
import time

from ansible import constants as C
from ansible.playbook.task_include import TaskInclude
from ansible.plugins.callback.default import CallbackModule as DefaultCallback

PROGRESS_ACTIONS = ("ext4audit.fleet.ext4_probe_progress", "ext4_probe_progress")
# The report step's task that counts a host the facts task could not reach as unreachable.
UNREACHABLE_ACTIONS = ("ext4audit.fleet.ext4_audit_unreachable", "ext4_audit_unreachable")
PER_HOST_LINES = 10  # a play of more hosts ends with one line of counts, not a line per host
PROGRESS_EVERY_S = 2.0  # a "hosts done" line at most this often while a play runs...
PROGRESS_STEP = 0.1  # ...and only after another tenth of the play's hosts is done with the task


# A TaskResult's task, host and data: public attributes from ansible-core 2.19 on, private ones
# (_task, _host, _result) before it (AAP 2.4 and 2.5 execution environments ship 2.15 and 2.16).
def _task(result):
    return getattr(result, "task", None) or result._task


def _host_of(result):
    return getattr(result, "host", None) or result._host


def _data(result):
    data = getattr(result, "result", None)
    return data if data is not None else result._result


SWEEP = re.compile(r"^sweep (\d+)/(\d+) runs, ([0-9.]+) s$")


def probe_line(text):
    """A probe progress line for people: the sweep's rate and time left worked out from k/N and seconds."""
    text = text[len("ext4_probe: "):] if text.startswith("ext4_probe: ") else text
    match = SWEEP.match(text)
    if match:
        done, total, seconds = int(match.group(1)), int(match.group(2)), float(match.group(3))
        if done and seconds > 0:
            rate = done / seconds
            return "sweep %d/%d runs, %.0f runs/s, %.0f s left" % (done, total, rate, (total - done) / rate)
    return text


def play_host_count(play):
    """How many hosts the play runs on (its pattern, the --limit and the serial batch), or None."""
    try:
        return len(play.get_variable_manager()._inventory.get_hosts(play.hosts))
    except Exception:  # no public way to ask; without the count there is no progress line
        return None


class CallbackModule(DefaultCallback):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "ext4audit.fleet.audit"

    def __init__(self):
        super(CallbackModule, self).__init__()
        self._phase = None  # (play name, start time, {host: [tasks, state, last result time]})
        self._printed = {}  # (host, task uuid) -> progress lines printed
        self._hosts_total = None  # hosts of the running play
        self._task_done = None  # [task name, hosts done with it, hosts done at the last progress line]
        self._said_at = time.monotonic()  # when the last progress line (or the play's start) was

    def _full(self):
        """-v and more: Ansible's own output."""
        return self._display.verbosity > 0

    def _say(self, text, color=None):
        self._display.display(text, color=color)

    def _host(self, result, state=None):
        if self._phase is None:
            return
        entry = self._phase[2].setdefault(_host_of(result).get_name(), [0, "ok", None])
        entry[0] += 1
        entry[2] = time.monotonic()
        if state and entry[1] == "ok":
            entry[1] = state
        self._hosts_done()

    def _hosts_done(self):
        """One more host is done with the running task: say how many are, now and then."""
        if self._task_done is None or not self._hosts_total:
            return
        self._task_done[1] += 1
        name, done, said = self._task_done
        now = time.monotonic()
        if (done < self._hosts_total and now - self._said_at >= PROGRESS_EVERY_S
                and done - said >= PROGRESS_STEP * self._hosts_total):
            self._task_done[2], self._said_at = done, now
            self._say("%s: %d/%d hosts (%s)" % (self._phase[0], done, self._hosts_total, name))

    def _end_phase(self):
        if self._phase is None:
            return
        name, started, hosts = self._phase
        self._phase = self._task_done = None
        if len(hosts) > PER_HOST_LINES:  # the failed and unreachable ones were named as they happened
            states = {}
            for _tasks, state, _last in hosts.values():
                states[state] = states.get(state, 0) + 1
            last = max(entry[2] or started for entry in hosts.values())
            self._say("%s: %d hosts: %s (%.1f s)" % (name, len(hosts), ", ".join(
                "%d %s" % (states[state], state) for state in sorted(states, key=lambda state: (state != "ok", state))),
                last - started), color=C.COLOR_OK if set(states) <= {"ok", "changed"} else C.COLOR_ERROR)
            return
        for host in sorted(hosts):
            tasks, state, last = hosts[host]
            self._say("%s: %s %s (%d tasks, %.1f s)" % (name, host, state, tasks, (last or started) - started),
                      color=C.COLOR_OK if state == "ok" else C.COLOR_ERROR)

    def _progress(self, result):
        """Print the probe's progress lines this task has not printed yet."""
        if _task(result).action not in PROGRESS_ACTIONS:
            return
        key = (_host_of(result).get_name(), _task(result)._uuid)
        lines, printed = _data(result).get("lines") or [], self._printed.get(key, 0)
        for line in lines[printed:]:
            self._say("  probe %s: %s" % (key[0], probe_line(line)))
        self._printed[key] = max(printed, len(lines))  # a file just removed reads empty: nothing to print again

    # ------------------------------------------------------------------ plays and tasks
    def v2_playbook_on_play_start(self, play):
        if self._full():
            return super(CallbackModule, self).v2_playbook_on_play_start(play)
        self._end_phase()
        self._play = play
        self._phase = (play.get_name().strip(), time.monotonic(), {})
        self._hosts_total, self._said_at = play_host_count(play), time.monotonic()

    def v2_playbook_on_task_start(self, task, is_conditional):
        if self._full():
            return super(CallbackModule, self).v2_playbook_on_task_start(task, is_conditional)
        self._task_done = [task.get_name().strip(), 0, 0]

    def v2_playbook_on_handler_task_start(self, task):
        if self._full():
            return super(CallbackModule, self).v2_playbook_on_handler_task_start(task)

    def v2_playbook_on_include(self, included_file):
        if self._full():
            return super(CallbackModule, self).v2_playbook_on_include(included_file)

    def v2_playbook_on_no_hosts_matched(self):
        if self._full():
            return super(CallbackModule, self).v2_playbook_on_no_hosts_matched()

    def v2_playbook_on_no_hosts_remaining(self):
        if self._full():
            return super(CallbackModule, self).v2_playbook_on_no_hosts_remaining()
        self._say("no hosts left to run on", color=C.COLOR_ERROR)

    def v2_playbook_on_stats(self, stats):
        if self._full():
            return super(CallbackModule, self).v2_playbook_on_stats(stats)
        self._end_phase()
        hosts = sorted(stats.processed)
        if len(hosts) <= PER_HOST_LINES:
            return super(CallbackModule, self).v2_playbook_on_stats(stats)
        # Ansible's recap has a line per host: at fleet size, the counts and the hosts that went wrong
        totals = dict((host, stats.summarize(host)) for host in hosts)
        bad = [host for host in hosts if totals[host]["failures"] or totals[host]["unreachable"]]
        self._say("PLAY RECAP: %d hosts, %d failed, %d unreachable, changed=%d" % (
            len(hosts), sum(totals[h]["failures"] > 0 for h in hosts), sum(totals[h]["unreachable"] > 0 for h in hosts),
            sum(totals[h]["changed"] for h in hosts)), color=C.COLOR_ERROR if bad else C.COLOR_OK)
        for host in bad[:PER_HOST_LINES]:
            self._say("  %s: failed=%d unreachable=%d" % (host, totals[host]["failures"], totals[host]["unreachable"]),
                      color=C.COLOR_ERROR)
        if len(bad) > PER_HOST_LINES:
            self._say("  ... %d more" % (len(bad) - PER_HOST_LINES), color=C.COLOR_ERROR)

    # ------------------------------------------------------------------ results
    def v2_runner_on_ok(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_on_ok(result)
        if isinstance(_task(result), TaskInclude):
            return
        self._host(result, "changed" if _data(result).get("changed") else None)
        self._handle_warnings(_data(result))
        self._progress(result)
        if _task(result).action in C._ACTION_DEBUG and "msg" in _data(result):
            msg = _data(result)["msg"]
            for line in msg if isinstance(msg, list) else str(msg).splitlines():
                self._say(str(line))

    def v2_runner_retry(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_retry(result)
        self._progress(result)

    def v2_runner_on_skipped(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_on_skipped(result)
        self._host(result)

    def v2_runner_on_failed(self, result, ignore_errors=False):
        if self._full():
            return super(CallbackModule, self).v2_runner_on_failed(result, ignore_errors)
        self._host(result, None if ignore_errors else "failed")
        self._handle_warnings(_data(result))  # the error itself is the FAILED line; -v shows its detail
        if ignore_errors:
            return
        self._say("FAILED %s (%s): %s" % (self.host_label(result), _task(result).get_name().strip(),
                                          self._failure_text(_data(result))), color=C.COLOR_ERROR)

    def v2_runner_on_unreachable(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_on_unreachable(result)
        self._host(result, "unreachable")
        if _task(result).action in UNREACHABLE_ACTIONS:
            return  # the facts task's UNREACHABLE line said it already
        self._say("UNREACHABLE %s (%s): %s" % (self.host_label(result), _task(result).get_name().strip(),
                                               self._failure_text(_data(result))), color=C.COLOR_UNREACHABLE)

    @staticmethod
    def _failure_text(data):
        """The message, and the tail of stderr when the message does not carry it."""
        text = str(data.get("msg") or "").strip()
        stderr = str(data.get("stderr") or data.get("module_stderr") or "").strip()
        if stderr and stderr not in text:
            text = "\n".join([text] + stderr.splitlines()[-5:]).strip()
        return text or "failed without a message"

    def v2_runner_item_on_ok(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_item_on_ok(result)

    def v2_runner_item_on_skipped(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_item_on_skipped(result)

    def v2_runner_item_on_failed(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_item_on_failed(result)
        self._say("FAILED %s (%s, item %s): %s" % (self.host_label(result), _task(result).get_name().strip(),
                                                   self._get_item_label(_data(result)),
                                                   self._failure_text(_data(result))), color=C.COLOR_ERROR)

    def v2_runner_on_async_poll(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_on_async_poll(result)

    def v2_runner_on_async_ok(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_on_async_ok(result)

    def v2_runner_on_async_failed(self, result):
        if self._full():
            return super(CallbackModule, self).v2_runner_on_async_failed(result)

    def v2_on_file_diff(self, result):
        if self._full():
            return super(CallbackModule, self).v2_on_file_diff(result)
