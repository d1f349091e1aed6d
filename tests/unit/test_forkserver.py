"""`ext4audit run` serves the playbook's `ext4audit` commands from forks of itself (ext4audit/cli/forkserver.py):
the same output and exit code as a command run in its own process; a server that is not there,
refuses, or ends without an answer never turns into a pass; another user cannot use it."""

import contextlib
import os
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap

import pytest

from conftest import ROOT

from ext4audit.cli import forkserver

PYTHON = os.path.join(ROOT, ".venv", "bin", "python") if os.path.exists(os.path.join(ROOT, ".venv", "bin", "python")) \
    else sys.executable
# A client: the command through forward(); prints (to stderr, last line) whether a server ran it.
CLIENT = textwrap.dedent("""
    import sys
    from ext4audit.cli import forkserver
    code = forkserver.forward(sys.argv[1:])
    sys.stdout.flush()
    print("served" if code is not None else "not served", file=sys.stderr)
    sys.exit(2 if code is None else code)
""")
# A server whose "playbook" is a sleep the test ends.
SERVER = textwrap.dedent("""
    import subprocess, sys
    from ext4audit.cli import forkserver, run
    listener, path = forkserver.listen(sys.argv[1])
    child = subprocess.Popen(["sleep", "60"])
    print(path, child.pid, flush=True)
    forkserver.serve(listener, child, run.playbook_command, run.PRELOAD)
""")


def run(argv, env, cwd=ROOT, prefix=()):
    return subprocess.run(list(prefix) + argv, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          universal_newlines=True, timeout=60)


@contextlib.contextmanager
def running_server(directory):
    """A server listening in `directory`: its socket's path. It ends with its "playbook"."""
    proc = subprocess.Popen([PYTHON, "-c", SERVER, str(directory)], cwd=ROOT, stdout=subprocess.PIPE,
                            universal_newlines=True, env=dict(os.environ, PYTHONPATH=ROOT))
    path, sleeper = proc.stdout.readline().split()
    yield path
    os.kill(int(sleeper), 15)
    assert proc.wait(timeout=30) == 0


@pytest.fixture
def server(tmp_path):
    private = tmp_path / "private"
    private.mkdir(mode=0o700)
    with running_server(private) as path:
        yield path


def client(argv, path, cwd=ROOT, prefix=(), pythonpath=ROOT, extra_env=None):
    env = dict(os.environ, PYTHONPATH=pythonpath, **{forkserver.ENV: path}, **(extra_env or {}))
    result = run([PYTHON, "-c", CLIENT] + argv, env, cwd=cwd, prefix=prefix)
    err, _, served = result.stderr[:-1].rpartition("\n")  # the client's own last line: served or not
    return result.returncode, result.stdout, err + "\n" if err else "", served


def local(argv, cwd=ROOT):
    result = run([PYTHON, "-m", "ext4audit"] + argv, dict(os.environ, PYTHONPATH=ROOT), cwd=cwd)
    return result.returncode, result.stdout, result.stderr


def test_a_served_command_writes_what_it_writes_alone_on_the_callers_streams(server):
    code, out, err, served = client(["rules"], server)
    assert served == "served"
    assert (code, out) == local(["rules"])[:2] and code == 0 and "| `EXT4_" in out and err == ""


def test_exit_codes_and_errors_come_back_as_they_are(server, tmp_path):
    bad = tmp_path / "waivers.yml"
    bad.write_text("waivers: [{rule: NO_SUCH_RULE}]\n")
    for argv in (["check", "--waivers", str(bad)], ["report"], ["check", "--policies", "{"]):
        code, out, err, served = client(argv, server)
        alone = local(argv)
        assert served == "served"
        assert code == alone[0] == 2, (argv, err)
        assert (out, err) == alone[1:], argv


def test_the_command_runs_in_the_callers_directory_and_environment(server, tmp_path):
    """A relative path is the caller's, not the server's (run.py's) directory."""
    (tmp_path / "w.yml").write_text("waivers: [{rule: NO_SUCH_RULE}]\n")
    code, _out, err, served = client(["check", "--waivers", "w.yml"], server, cwd=str(tmp_path))
    assert served == "served" and code == 2 and "w.yml" in err


def test_no_server_there_means_the_command_runs_in_its_own_process(tmp_path):
    code, out, _err, served = client(["rules"], str(tmp_path / "gone.sock"))
    assert served == "not served"  # forward() said so; the caller then runs it itself (__main__.main)
    env = dict(os.environ, PYTHONPATH=ROOT, **{forkserver.ENV: str(tmp_path / "gone.sock")})
    alone = run([PYTHON, "-m", "ext4audit", "rules"], env)
    assert (alone.returncode, alone.stdout) == local(["rules"])[:2]


def test_a_server_that_ends_without_an_answer_is_an_error_never_a_pass(tmp_path):
    path = str(tmp_path / "mute.sock")
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(path)
    listener.listen(1)
    proc = subprocess.Popen([PYTHON, "-c", CLIENT, "rules"], cwd=ROOT, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, universal_newlines=True,
                            env=dict(os.environ, PYTHONPATH=ROOT, **{forkserver.ENV: path}))
    conn, _ = listener.accept()
    conn.recv(1 << 16)
    conn.close()  # gone before it answered: as a server killed mid-command
    out, err = proc.communicate(timeout=30)
    assert proc.returncode == 2 and "ended without an exit code" in err and out == ""


def test_a_request_too_large_for_the_server_runs_in_the_callers_process(server):
    """An environment past the server's limit would be dropped there (exit 2): it is not sent."""
    huge = dict(("HUGE_%d" % i, "x" * 100000) for i in range(forkserver.REQUEST_MAX // 100000 + 1))  # 100 KB each
    code, out, _err, served = client(["rules"], server, extra_env=huge)
    assert served == "not served"  # forward() left it to the caller


def test_broken_requests_are_dropped_and_the_server_goes_on_serving(server):
    """A peer that hangs up at once, sends no descriptors, a length past the limit, or a document
    that is not a request: each is dropped; the next command is served as usual."""
    for payload, fds in ((None, None), (struct.pack("!I", 2) + b"{}", None),
                         (struct.pack("!I", forkserver.REQUEST_MAX + 1), [0, 1, 2]),
                         (struct.pack("!I", 2) + b"[]", [0, 1, 2]), (struct.pack("!I", 9) + b"not json!", [0, 1, 2])):
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as peer:
            peer.connect(server)
            if payload is not None:
                if fds:
                    socket.send_fds(peer, [payload], fds)
                else:
                    peer.sendall(payload)
            peer.shutdown(socket.SHUT_WR)
            try:
                answer = peer.recv(64)
            except ConnectionResetError:  # dropped with bytes of ours unread
                answer = b""
            assert answer == b""  # no exit code: nothing ran
    code, out, _err, served = client(["rules"], server)
    assert served == "served" and code == 0 and "| `EXT4_" in out


def test_run_without_a_socket_runs_the_playbook_as_before(tmp_path):
    """A temporary directory too deep for an AF_UNIX path: no server, the playbook's commands start
    on their own, and the run ends as before: a playbook without a report step reaches no verdict (2)."""
    deep = tmp_path / ("d" * 60) / ("e" * 60)
    deep.mkdir(parents=True)
    playbook = tmp_path / "play.yml"
    playbook.write_text(textwrap.dedent("""
        - hosts: localhost
          gather_facts: false
          tasks:
            - name: An ext4audit command of the playbook
              ansible.builtin.command:
                argv: ["{{ ansible_playbook_python | dirname }}/ext4audit", "rules"]
              register: rules
              changed_when: false
            - ansible.builtin.assert:
                that: rules.stdout is search('EXT4_') and lookup('env', 'EXT4AUDIT_FORKSERVER') == ''
    """))
    env = dict(os.environ, TMPDIR=str(deep), ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg"))
    env.pop(forkserver.ENV, None)
    result = run([PYTHON, "-m", "ext4audit.cli.run", "--", str(playbook), "-i", "localhost,", "-c", "local",
                  "-e", "ansible_python_interpreter=" + PYTHON], env)
    assert result.returncode == 2, result.stdout[-3000:] + result.stderr[-3000:]
    assert "failed=0" in result.stdout and "no verdict" in result.stderr, result.stdout[-3000:] + result.stderr
    assert forkserver.listen(str(deep)) == (None, None)


def test_another_installation_of_the_package_is_not_served(server, tmp_path):
    """Its code may differ from the server's: it runs in its own process, as its own code."""
    other = tmp_path / "other"
    shutil.copytree(os.path.join(ROOT, "ext4audit"), str(other / "ext4audit"), symlinks=True)
    code, _out, _err, served = client(["rules"], server, cwd=str(other), pythonpath=str(other))
    assert served == "not served"


def test_a_command_with_another_umask_is_not_served(server):
    """The server's modules fixed the reports' file mode by its umask (reports.FILE_MODE)."""
    code, _out, _err, served = client(["rules"], server, prefix=["sh", "-c", 'umask 077; exec "$@"', "sh"])
    assert served == "not served"
    assert client(["rules"], server)[3] == "served"  # the same umask as the server's


NOBODY = ["setpriv", "--reuid=nobody", "--regid=nogroup", "--clear-groups", "--"]


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("setpriv"), reason="needs root and setpriv (the attack runs as nobody)")
def test_another_user_cannot_have_a_command_run_by_the_server(tmp_path):
    """run.py's socket is in its private directory (0700): nobody cannot reach it. Put where
    anyone can reach it, the server still refuses a peer of another uid: nothing runs as root."""
    public = tempfile.mkdtemp(prefix="forkserver-test-", dir="/tmp")
    try:
        os.chmod(public, 0o755)
        with running_server(public) as path:
            os.chmod(path, 0o777)
            assert client(["rules"], path, prefix=NOBODY)[3] == "not served"
        private = tmp_path / "private"
        private.mkdir(mode=0o700)
        os.chmod(str(tmp_path), 0o755)
        with running_server(private) as path:
            assert client(["rules"], path, prefix=NOBODY)[3] == "not served"
    finally:
        shutil.rmtree(public)
