# -*- coding: utf-8 -*-
# SPDX-License-Identifier: MIT
"""The ext4 probe: short Chopper-style sweeps (He et al., FAST '15), a diagnosis of the four
allocator issues Chopper found, and confirmation probes, on scratch loop devices, on this host's
own kernel. Standard library only, Python >= 3.8. It travels to a host as one zip file
(probe_payload.py) that ext4_probe_run runs; job.py says how it is run and what it returns.

- base: sizes, errors, the libc calls        - loops: loop devices, mounts, stale releases
- scratch_dir: the scratch directory         - replica: mke2fs arguments, sparse copies
- layouts: free-space layouts                - image_cache: pristine images, cached and checked
- extents: FIEMAP and layout measures        - player: the workload player and the sweep
- confirmations: the confirmation probes     - allocator: Chopper's four allocator issues
- job: the job, the result, the command line

Safety, in the order the code enforces it:
- the scratch directory is the probe's own or nothing: reached from / by descriptor without
  following a symlink, through directories only root can change; made by the probe as root
  with mode 0700 and its marker, or refused untouched (Scratch); every later path goes through
  the descriptor it holds, and cleanup removes by descriptor only what is inside it;
- everything lives under the scratch directory: image files, mount points, and loop devices
  attached by this process to those files (with autoclear, so a killed run frees them on the
  last close); no other block device is ever opened for writing;
- the marker in it is the lock (flock, held for the whole run): one probe per directory at a
  time, a second one waits a bounded time and is then refused;
- at start, after taking the lock, stale mounts under the directory and loop devices backed by
  files in it are released (a SIGKILLed run cannot clean up after itself);
- cleanup runs in `finally`, and SIGTERM/SIGINT/SIGHUP are turned into an exception so it runs;
- a time budget, a cap on scratch bytes, and a memory/space check before anything is made.

Differences from Chopper, on purpose: `Sync` is syncfs(2) on the scratch filesystem, not a
global sync(2); CPUCount pins the player with sched_setaffinity instead of CPU hotplug; extents
come from the FIEMAP ioctl; hole sizes keep the byte mass of buckets too large for the disk
(Chopper's int() truncation made layout 5 identical to layout 6 on small disks).
"""

from __future__ import absolute_import, division, print_function

__metaclass__ = type
