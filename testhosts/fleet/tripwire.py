#!/usr/bin/python3
"""A host that goes down while it is being audited (molecule/fleet, converge).

`fleet_host.py arm-tripwire` binds this file over /usr/sbin/dumpe2fs inside ONE test host's mount
namespace (nobody else sees it). The audit's ext4_facts module runs dumpe2fs once it has read the
host's mounts, so the host dies in the middle of its own facts module, with the SSH session open:
every process of the host (its sshd listener, the audit's session, the module, this script) is
SIGKILLed, like pulling the plug. No timing guess is involved.

Acts only inside a test host: its mount namespace must carry the host's marker (the `fleet-srv`
tmpfs on /srv that fleet_host.py start mounts). Anywhere else it exits non-zero and does nothing.
"""

import os
import signal
import sys

with open("/proc/self/mountinfo") as handle:
    marked = any(line.split(" - ")[0].split()[4] == "/srv" and line.split(" - ")[1].split()[:2] == ["tmpfs", "fleet-srv"]
                 for line in handle)
if not marked:
    sys.exit("tripwire: not inside a test host of the loopback fleet; doing nothing")
own = os.readlink("/proc/self/ns/mnt")
for name in os.listdir("/proc"):
    if name.isdigit() and int(name) != os.getpid():
        try:
            if os.readlink("/proc/%s/ns/mnt" % name) == own:
                os.kill(int(name), signal.SIGKILL)
        except OSError:  # gone, or not ours to read
            pass
os.kill(os.getpid(), signal.SIGKILL)
