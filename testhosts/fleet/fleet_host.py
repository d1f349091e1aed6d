#!/usr/bin/python3
"""The parts of the loopback SSH fleet that need a process view (playbooks/testhosts/fleet_*.yml).

  start SPEC_JSON            boot one host (its spec from fleet_up.yml as a JSON argument), run as
                             `unshare --mount --uts --propagation private python3 fleet_host.py
                             start SPEC_JSON`: host key, sshd_config, images (mkfs, tune2fs),
                             hostname, loop mounts, then sshd, which daemonizes and keeps the
                             namespace alive; returns once the host accepts connections
  stop PIDFILE CONFIG        kill every process in the mount namespace of that host's sshd: its
                             listener and its SSH sessions (a session keeps the mounts alive)
  sweep --images DIR         stop the test hosts whose sshd is gone but whose processes (an SSH
                             session) still mount loop devices backed by the image folder
  arm-tripwire PIDFILE CONFIG SCRIPT
                             inside that host only, bind SCRIPT over dumpe2fs (see tripwire.py)
  status [--state DIR] --images DIR
                             JSON of what is left: sshd processes started from DIR's configs, loop
                             devices backed by files in the image folder, mounts of them in this
                             namespace, and processes of other namespaces that still mount them

Stdlib only, argument lists only. stop and arm-tripwire act only on a namespace that carries a
test host's marker (the `fleet-srv` tmpfs on /srv that start mounts) and is not the caller's own.
"""

import json
import os
import re
import signal
import socket
import subprocess
import sys
import time

SSHD = "/usr/sbin/sshd"
SRV_MARKER = "fleet-srv"  # source name of the tmpfs each host has on /srv; tripwire.py checks it too
DUMPE2FS = "/usr/sbin/dumpe2fs"
# Mounts copied in from the machine that belong to someone else's tests (their loop devices,
# their network mounts). A host drops its copies: it sees only the machine's own filesystems
# and its own, and does not keep another test's loop device busy.
FOREIGN_EXT = ("ext2", "ext3", "ext4")
FOREIGN_NETFS = ("nfs", "nfs4", "cifs", "smb3", "9p")  # and every fuse.* (sshfs is fuse.sshfs)


def run(argv):
    subprocess.run(argv, check=True)


def mnt_ns(pid):
    """The mount namespace of a process ('mnt:[4026531841]'), or None if it is gone."""
    try:
        return os.readlink("/proc/%s/ns/mnt" % pid)
    except OSError:
        return None


def pids():
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def unescape(field):
    """Mount points in mountinfo are octal-escaped (\\040 is a space)."""
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m.group(1), 8)), field)


def mountinfo(pid="self"):
    """(device major:minor, mount point, fstype, source) of each mount a process sees."""
    result = []
    try:
        # Another test's mount point may hold any byte but the four the kernel escapes (space, tab,
        # newline, backslash): not UTF-8, CR, form feed, U+2028. Fields are split on the kernel's
        # single spaces and lines on newlines only, so such a name cannot stop a teardown.
        with open("/proc/%s/mountinfo" % pid, encoding="utf-8", errors="surrogateescape", newline="") as handle:
            lines = [line for line in handle.read().split("\n") if line]
    except OSError:
        return result
    for line in lines:
        before, _, after = line.partition(" - ")
        fields, tail = before.split(" "), after.split(" ")
        result.append((fields[2], unescape(fields[4]), tail[0], unescape(tail[1]) if len(tail) > 1 else ""))
    return result


def is_test_host(pid):
    """Whether a process lives in a test host's own mount namespace: not the caller's (the
    machine's), and with the host's marker, the `fleet-srv` tmpfs on /srv that `start` mounts.
    (pid 1's namespace is no reference: some sandboxes do not let even root read it.)"""
    ns = mnt_ns(pid)
    return ns is not None and ns != mnt_ns("self") and ns != mnt_ns(1) and any(
        (target, fstype, source) == ("/srv", "tmpfs", SRV_MARKER) for _, target, fstype, source in mountinfo(pid))


def refuse_unless_test_host(pid, what):
    if not is_test_host(pid):
        sys.exit("fleet_host: refusing: %s is not in a test host's own mount namespace (%s)" % (what, mnt_ns(pid)))


def start(spec_json):
    spec = json.loads(spec_json)
    # unshare execs this script in the process it made the namespaces for: the parent must be
    # outside them. Never mount on the machine's own /srv.
    if mnt_ns("self") in (None, mnt_ns(os.getppid())):
        sys.exit("fleet_host start: run me under unshare --mount --uts --propagation private")
    folder = spec["dir"]
    if not all(fs["mountpoint"].startswith("/srv/") for fs in spec["filesystems"]):
        sys.exit("fleet_host start: mount points must be under /srv (the host's own tmpfs)")
    if not os.path.exists(os.path.join(folder, "host_key")):
        run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", spec["hostname"], "-f", os.path.join(folder, "host_key")])
    with open(os.path.join(folder, "sshd_config"), "w") as handle:
        handle.write(spec["sshd_config"])
    for fs in spec["filesystems"]:
        # The sparse file first, as tests/conftest.py does: on an existing file mke2fs discards
        # (zeroes) it and marks the inode tables zeroed. On a file it creates itself it does not,
        # and the kernel's lazy init then zeroes them after mount and journals that: the
        # superblock would change during the test without anyone touching the filesystem.
        run(["truncate", "--size", fs["size"], fs["image"]])
        run(["mkfs.ext4", "-F", "-q"] + fs["mkfs"] + [fs["image"]])
        if fs["tune2fs"]:
            run(["tune2fs"] + fs["tune2fs"] + [fs["image"]])

    socket.sethostname(spec["hostname"])
    foreign = [target for _, target, fstype, source in mountinfo()
               if (fstype in FOREIGN_EXT and source.startswith("/dev/loop"))
               or fstype.startswith("fuse") or fstype in FOREIGN_NETFS]
    for target in reversed(foreign):  # children before parents
        run(["umount", "--lazy", target])
    # A tmpfs on /srv in this namespace only: the mount points are made there, not on the real root.
    run(["mount", "-t", "tmpfs", "-o", "mode=0755,size=1m", SRV_MARKER, "/srv"])
    lines = ["# %s: its own fstab (testhosts/fleet/fleet_host.py)\n" % spec["hostname"]]
    for fs in spec["filesystems"]:
        os.makedirs(fs["mountpoint"])
        # -o loop: mount attaches the loop device with autoclear, so it detaches itself when the
        # namespace (the host) goes away.
        options = ",".join(["loop"] + ([fs["options"]] if fs["options"] else []))
        run(["mount", "-t", "ext4", "-o", options, fs["image"], fs["mountpoint"]])
        lines.append("%s %s ext4 %s 0 2\n" % (fs["image"], fs["mountpoint"], options))
    if spec.get("fstab"):  # on the host's /srv tmpfs: seen by this host only
        if not spec["fstab"].startswith("/srv/"):
            sys.exit("fleet_host start: the fstab must be under /srv (the host's own tmpfs)")
        with open(spec["fstab"], "w") as handle:
            handle.writelines(lines)

    # Without -D sshd listens, then daemonizes (its parent exits): the daemon keeps this namespace
    # alive after this script ends, and the caller (an Ansible task) is not left waiting.
    pidfile, log = os.path.join(folder, "sshd.pid"), os.path.join(folder, "sshd.log")
    run([SSHD, "-f", os.path.join(folder, "sshd_config"), "-E", log])
    deadline = time.monotonic() + 10
    while not (os.path.exists(pidfile) and accepts(spec["address"], 22)):
        if time.monotonic() > deadline:
            sys.exit("fleet_host start: %s has no pidfile or does not accept connections; see %s"
                     % (spec["hostname"], log))
        time.sleep(0.05)


def accepts(address, port):
    with socket.socket() as sock:
        sock.settimeout(1)
        return sock.connect_ex((address, port)) == 0


def host_sshd(pidfile, config):
    """The pid of the host's sshd listener, or None when it is not running (pid reuse checked)."""
    try:
        with open(pidfile) as handle:
            pid = int(handle.read().strip())
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
        exe = os.readlink("/proc/%d/exe" % pid)
    except (OSError, ValueError):
        return None
    return pid if exe == SSHD and config in cmdline else None


def stop(pidfile, config):
    pid = host_sshd(pidfile, config)
    if pid is None:
        print("not running")
        return
    ns = mnt_ns(pid)
    refuse_unless_test_host(pid, "sshd %d" % pid)
    kill_namespace(ns)
    print("stopped %d (%s)" % (pid, ns))


def sweep(image_dir):
    """Stop the test hosts whose sshd is gone but whose processes (an SSH session) still hold
    loop devices of the image folder."""
    for holder in status(None, image_dir)["holders"]:
        if is_test_host(holder["pid"]):
            kill_namespace(holder["mnt_ns"])
            print("swept %s" % holder["mnt_ns"])


def kill_namespace(ns, timeout=10.0):
    """SIGKILL every process of a (checked) test host's mount namespace, like pulling the plug."""
    deadline = time.monotonic() + timeout
    while True:
        members = [p for p in pids() if mnt_ns(p) == ns]
        alive = [p for p in members if not zombie(p)]
        if not alive:
            break
        if time.monotonic() > deadline:
            sys.exit("fleet_host stop: processes still alive in %s: %s" % (ns, alive))
        for member in alive:
            try:
                os.kill(member, signal.SIGKILL)
            except ProcessLookupError:
                pass
        time.sleep(0.05)


def zombie(pid):
    try:
        with open("/proc/%d/stat" % pid) as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return True


def arm_tripwire(pidfile, config, script):
    pid = host_sshd(pidfile, config)
    if pid is None:
        sys.exit("fleet_host arm-tripwire: the host of %s is not running" % pidfile)
    refuse_unless_test_host(pid, "sshd %d" % pid)
    run(["nsenter", "--target", str(pid), "--mount", "--", "mount", "--bind", script, DUMPE2FS])
    print("armed in %s" % mnt_ns(pid))


def status(state_dir, image_dir):
    image_dir = os.path.realpath(image_dir).rstrip("/") + "/"
    loops = {}
    for name in sorted(os.listdir("/sys/block")):
        try:
            with open("/sys/block/%s/loop/backing_file" % name) as handle:
                backing = handle.read().strip()
            with open("/sys/block/%s/dev" % name) as handle:
                devno = handle.read().strip()
        except OSError:
            continue
        if backing.startswith(image_dir):
            loops[devno] = {"device": "/dev/" + name, "backing_file": backing}
    sshd, holders, own_ns = [], [], mnt_ns("self")
    for pid in pids():
        if state_dir:
            try:
                with open("/proc/%d/cmdline" % pid, "rb") as handle:
                    cmdline = handle.read().replace(b"\0", b" ").decode(errors="replace")
            except OSError:
                cmdline = ""
            if cmdline.startswith("sshd:") or cmdline.startswith(SSHD):
                if state_dir.rstrip("/") + "/" in cmdline:
                    sshd.append({"pid": pid, "cmdline": cmdline.strip()})
        # Other namespaces only: what this one mounts is listed under "mounts".
        if loops and mnt_ns(pid) != own_ns and not zombie(pid) and any(dev in loops for dev, _, _, _ in mountinfo(pid)):
            holders.append({"pid": pid, "mnt_ns": mnt_ns(pid)})
    mounts = [target for dev, target, _, source in mountinfo()
              if dev in loops or target.startswith(image_dir) or source.startswith(image_dir)]
    return {"sshd": sshd, "loops": list(loops.values()), "mounts": mounts, "holders": holders}


def main(argv):
    if argv[:1] == ["start"] and len(argv) == 2:
        start(argv[1])
    elif argv[:1] == ["stop"] and len(argv) == 3:
        stop(argv[1], argv[2])
    elif argv[:2] == ["sweep", "--images"] and len(argv) == 3:
        sweep(argv[2])
    elif argv[:1] == ["arm-tripwire"] and len(argv) == 4:
        arm_tripwire(argv[1], argv[2], argv[3])
    elif argv[:1] == ["status"]:
        options = dict(zip(argv[1::2], argv[2::2]))
        if "--images" not in options or set(options) - {"--state", "--images"}:
            sys.exit(__doc__)
        print(json.dumps(status(options.get("--state"), options["--images"]), indent=1))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main(sys.argv[1:])
