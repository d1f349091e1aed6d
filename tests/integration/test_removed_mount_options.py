"""rules/removed_mount_options.yml against this machine's kernel, with real loop-mounted ext4: every
option the data says this kernel refuses is refused by a real mount, and a mounted filesystem
whose fstab entry names one gets EXT4_FSTAB_OPTION_REFUSED from the real ext4_facts record, and
really fails its next mount from that fstab (mount --fstab)."""

import subprocess

import pytest

from conftest import needs_root
from ext4audit.rules import catalog as catalog_mod, engine, mount_options
from ext4audit.parsers import kernel_version
from test_module_errors import run_module

pytestmark = needs_root

DOC = mount_options.load()
KERNEL = kernel_version.identify(open("/proc/sys/kernel/osrelease").read().strip(),
                                 open("/proc/version").read().strip())
REFUSED_HERE = [(option, entry["removed_in"]) for entry in DOC["removed"] for option in entry["options"]
                if kernel_version.compare_upstream(KERNEL["upstream"], entry["removed_in"]) >= 0]


def mount(*argv):
    return subprocess.run(["mount"] + list(argv), stdout=subprocess.PIPE, stderr=subprocess.STDOUT)


@pytest.mark.skipif(not REFUSED_HERE, reason="this kernel predates every removal in the data")
@pytest.mark.parametrize("option, removed_in", REFUSED_HERE)
def test_the_data_matches_this_kernel(loopfs, option, removed_in):
    made = loopfs.make("opt", size="64M")
    subprocess.run(["umount", made["mountpoint"]], check=True)
    refused = mount("-t", "ext4", "-o", option, made["device"], made["mountpoint"])
    assert refused.returncode != 0, "%s (removed in %s) mounted on %s" % (option, removed_in, KERNEL["release"])
    assert mount("-t", "ext4", made["device"], made["mountpoint"]).returncode == 0  # the option, not the filesystem


@pytest.mark.skipif(not any(option == "noacl" for option, _ in REFUSED_HERE), reason="needs a kernel from 6.1 on")
def test_a_mounted_filesystem_whose_fstab_names_noacl(loopfs, tmp_path):
    made = loopfs.make("noacl", size="64M")
    fstab = tmp_path / "fstab"
    fstab.write_text("%s %s ext4 defaults,noacl 0 2\n" % (made["device"], made["mountpoint"]))
    facts = run_module("fstab_path=%s" % fstab, tmp_path)["ext4_facts"]
    findings = engine.evaluate_host(facts, catalog_mod.load())[0]
    refused, = [f for f in findings if f["rule"] == "EXT4_FSTAB_OPTION_REFUSED" and f["mountpoint"] == made["mountpoint"]]
    assert refused["severity"] == "high"
    assert [item["option"] for item in refused["evidence"]["fstab_options_refused"]] == ["noacl"]
    # what the finding says happens: the next mount from this fstab fails
    subprocess.run(["umount", made["mountpoint"]], check=True)
    failed = mount("--fstab", str(fstab), made["mountpoint"])
    assert failed.returncode != 0, failed.stdout.decode()
    assert mount("-t", "ext4", made["device"], made["mountpoint"]).returncode == 0
