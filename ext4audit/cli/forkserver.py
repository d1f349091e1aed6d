"""The controller commands a playbook runs, forked from `ext4audit run` with their modules loaded:
an optimisation of the `ext4audit` command (ext4audit/__main__.py), which it does not import.

`ext4audit report` imports about a second of modules (matplotlib alone about half of it) before it
does anything, and `make audit` waits for it at the end of every run. `ext4audit run` has nothing
to do while ansible-playbook runs, so it loads those modules then (`serve`) and listens on a socket
in its private directory (mode 0700), named to the playbook by EXT4AUDIT_FORKSERVER. An `ext4audit`
command started under that playbook (`forward`, before it imports anything heavy) hands the
server its arguments, working directory, environment and standard streams; the server forks, the
child runs the command on those streams and the server sends back its exit code. Each command runs
in a fresh fork, so one command's state never reaches another.

Anything amiss is never a pass: a server that is not there, belongs to another user or another
installation of the package, or has another umask (its modules fixed their file modes by its own)
means the command runs in its own process as usual; a server that goes away before it answers
means exit 2 (could not run).
"""

import json
import os
import select
import signal
import socket
import struct
import sys
from typing import Callable, Sequence

import ext4audit
from ext4audit import ERROR, umask

ENV = "EXT4AUDIT_FORKSERVER"
SOCKET_NAME = "forkserver.sock"
REQUEST_MAX = 1 << 20  # arguments and environment: a few KB
REFUSED = "refused"
POLL_S = 0.05  # how often the server looks for the playbook's end when no request comes


def package_dir():
    """The package the commands come from: a command of another installation is not served."""
    return os.path.realpath(os.path.dirname(os.path.abspath(ext4audit.__file__)))


# ------------------------------------------------------------------ the command's side
def forward(argv: list) -> "int | None":
    """Run `ext4audit ARGV` in the fork server named by EXT4AUDIT_FORKSERVER: its exit code, or None
    when there is no server to run it (run it here)."""
    path = os.environ.get(ENV)
    if not path or argv[:1] in ([], ["run"]):
        return None
    request = json.dumps({"argv": argv, "cwd": os.getcwd(), "env": dict(os.environ),
                          # the server's loaded modules fixed their file modes by its umask (reports.FILE_MODE)
                          "package": package_dir(), "umask": umask()}).encode("utf-8")
    if len(request) > REQUEST_MAX:  # the server would drop it: run here
        return None
    try:
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    except OSError:
        return None
    with conn:
        try:
            conn.connect(path)
            socket.send_fds(conn, [struct.pack("!I", len(request)), request], [0, 1, 2])
            conn.shutdown(socket.SHUT_WR)
        except OSError:
            return None  # no server there (it ended, or is not ours to reach): run here
        reply = b""
        try:
            while len(reply) < 64:
                chunk = conn.recv(64)
                if not chunk:
                    break
                reply += chunk
        except OSError:
            pass
    answer = reply.decode("ascii", "replace").strip()
    if answer == REFUSED:
        return None
    if answer.lstrip("-").isdigit():
        return int(answer)
    print("ext4audit: the fork server of `ext4audit run` (%s) ended without an exit code" % path, file=sys.stderr)
    return ERROR


# ------------------------------------------------------------------ the server's side
def listen(directory):
    """A listening socket in `directory` (private to this user): (socket, its path), or (None, None)
    when none can be made there (a path longer than AF_UNIX takes): the commands then start as usual."""
    path = os.path.join(directory, SOCKET_NAME)
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM | socket.SOCK_CLOEXEC)
    try:
        listener.bind(path)
        listener.listen(8)
    except OSError:
        listener.close()
        return None, None
    return listener, path


def _read_request(conn):
    """(request, fds) from a connection: the length, the JSON document and the three streams."""
    head, fds, _flags, _addr = socket.recv_fds(conn, 4, 3)
    try:
        if len(head) != 4 or len(fds) != 3:
            raise ValueError("a request is a length, a document and three file descriptors")
        size = struct.unpack("!I", head)[0]
        if size > REQUEST_MAX:
            raise ValueError("a request of %d bytes" % size)
        data = b""
        while len(data) < size:
            chunk = conn.recv(size - len(data))
            if not chunk:
                raise ValueError("a request cut short")
            data += chunk
        request = json.loads(data)
        if not (isinstance(request, dict) and isinstance(request.get("argv"), list)
                and all(isinstance(a, str) for a in request["argv"]) and isinstance(request.get("cwd"), str)
                and isinstance(request.get("env"), dict)
                and all(isinstance(k, str) and isinstance(v, str) for k, v in request["env"].items())):
            raise ValueError("not a request document")
        return request, fds
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise


def _child(request, fds, listener, command):
    """In the fork: command(argv) on the client's streams, in its directory and environment; never returns."""
    code = ERROR
    try:
        listener.close()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # the server's passes it on to ansible-playbook
        signal.signal(signal.SIGINT, signal.default_int_handler)
        for target, fd in enumerate(fds):
            os.dup2(fd, target)
            os.close(fd)
        os.chdir(request["cwd"])
        os.environ.clear()
        os.environ.update(request["env"])
        sys.argv = ["ext4audit"] + request["argv"]
        try:
            code = command(request["argv"])
        except SystemExit as exc:  # argparse's errors and --help
            code = exc.code if isinstance(exc.code, int) else (0 if exc.code is None else ERROR)
            if not isinstance(exc.code, (int, type(None))):
                print(exc.code, file=sys.stderr)
    except BaseException:  # pylint: disable=broad-except  # whatever it was, the code says "could not run"
        import traceback  # pylint: disable=import-outside-toplevel
        traceback.print_exc()
        code = ERROR
    finally:
        try:
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code if isinstance(code, int) and 0 <= code < 256 else ERROR)


def _serve_one(listener, command):
    """Accept one request: refuse it, or fork its command and answer with the command's exit code."""
    conn = listener.accept()[0]
    with conn:
        uid = struct.unpack("3i", conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i")))[1]
        try:
            request, fds = _read_request(conn)
        except (OSError, ValueError):
            return
        if uid != os.geteuid() or request.get("package") != package_dir() or request.get("umask") != umask():
            for fd in fds:
                os.close(fd)
            conn.sendall(REFUSED.encode("ascii"))
            return
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:
            conn.close()
            _child(request, fds, listener, command)
        for fd in fds:
            os.close(fd)
        while True:
            try:
                status = os.waitpid(pid, 0)[1]
                break
            except ChildProcessError:
                status = None
                break
            except KeyboardInterrupt:
                continue  # the command got it too (same process group); wait for it to stop
        code = os.waitstatus_to_exitcode(status) if status is not None else ERROR
        try:
            conn.sendall(b"%d\n" % (code if code >= 0 else ERROR))  # killed by a signal: could not run
        except OSError:
            pass


def serve(listener, child, command: Callable[[list], int], preload: Sequence[str] = ()) -> int:
    """Load the modules `preload` names and serve requests, each by command(argv) in a fork, until
    the process `child` (ansible-playbook, a Popen) ends; returns its exit code. Each module is a
    step after which waiting requests are served (a request that comes during an import waits for
    it, as its own process would have); one that cannot be loaded is left to the command to load.
    Without a listener (listen could not make one), only waits for `child`."""
    pending = list(preload) if listener else []
    while True:
        try:
            code = child.poll() if listener else child.wait()
            if code is not None:
                return code
            ready = select.select([listener], [], [], 0 if pending else POLL_S)[0]
            if ready:
                try:
                    _serve_one(listener, command)
                except Exception as exc:  # pylint: disable=broad-except  # its command exits 2; the run goes on
                    print("ext4audit run: could not run a command of the playbook: %s" % exc, file=sys.stderr)
            elif pending:
                try:
                    __import__(pending.pop(0))
                except Exception:  # pylint: disable=broad-except  # the command will say what is wrong
                    pass
        except KeyboardInterrupt:
            continue  # ansible-playbook got it too; wait for it to stop

