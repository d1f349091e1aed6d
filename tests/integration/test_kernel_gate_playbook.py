"""The kernel gate through the real playbook, on this machine: a baseline, a candidate with the
same configuration (must pass), and a candidate whose scratch filesystems carry a risky option
set (stripe=4096: RAID stripe alignment on an unstriped device; must fail with the numbers).
Both "hosts" are this machine under other inventory names; the VM test runs two real kernels."""

import json
import os

import pytest

from conftest import ansible_playbook, load_json, needs_root

pytestmark = needs_root


@pytest.fixture
def gate_inventory(loopfs, tmp_path):
    target = loopfs.make("gated", size="1G")
    hosts = {}
    for name, options in (("baseline", []), ("same", []), ("risky", ["data=ordered", "delalloc", "stripe=4096"])):
        hosts[name] = {"ansible_connection": "local", "ansible_python_interpreter": "{{ ansible_playbook_python }}",
                       "chopper_probe_scratch_dir": "/dev/shm/ext4-audit-gate-%s-%d" % (name, os.getpid()),
                       "chopper_probe_mountpoint": target["mountpoint"], "chopper_probe_mount_options": options,
                       "chopper_probe_keep_cache": False}
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(json.dumps({"all": {"hosts": hosts, "vars": {
        "ext4_audit_become": False, "chopper_probe_runs": 128, "chopper_probe_confirmations": [],
        "chopper_probe_poll_s": 1}}}))
    return str(inventory)


def gate(inventory, reports, candidate, *extra):
    return ansible_playbook("-i", inventory, "playbooks/kernel_gate.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                            "-e", "kernel_gate_baseline=baseline", "-e", "kernel_gate_candidate=%s" % candidate,
                            "-e", "ext4_audit_fail_on=critical", *extra)


def test_same_configuration_passes_and_risky_option_set_fails(gate_inventory, tmp_path):
    rc, out = gate(gate_inventory, tmp_path / "same", "same")
    assert rc == 0, out
    same = load_json(os.path.join(str(tmp_path / "same"), "latest", "kernel_gate.json"))
    assert same["verdict"] == "pass" and same["dspan"]["paired_treatments"] == 128

    rc, out = gate(gate_inventory, tmp_path / "risky", "risky")
    assert rc != 0, out
    assert "kernel gate: fail: dspan:" in out
    risky = load_json(os.path.join(str(tmp_path / "risky"), "latest", "kernel_gate.json"))
    assert risky["verdict"] == "fail"
    d = risky["dspan"]
    assert d["wilcoxon_p"] < 0.01 and d["effect_size"] >= 0.3 and d["p99_change"] > 0.1
    print("stripe=4096: p99 %+.0f%%, p=%.2g, effect %.2f; same config: p99 %+.0f%%, p=%.2g" % (
        100 * d["p99_change"], d["wilcoxon_p"], d["effect_size"], 100 * same["dspan"]["p99_change"],
        same["dspan"]["wilcoxon_p"]))
    md = open(os.path.join(str(tmp_path / "risky"), "latest", "kernel_gate.md")).read()
    assert md.startswith("## Kernel gate: FAIL") and "Wilcoxon" in md
    for name in ("baseline", "same", "risky"):
        assert not os.path.exists("/dev/shm/ext4-audit-gate-%s-%d" % (name, os.getpid()))


def test_a_limit_by_group_gates_its_two_hosts_and_one_that_drops_either_is_refused(gate_inventory, tmp_path):
    """--limit filters every play, localhost's too: the prepare and compare steps still run on the
    controller when the limit names only the group of the two hosts; the host outside it (one nobody
    answers for) is never contacted."""
    hosts = json.loads(open(gate_inventory).read())["all"]
    gone = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh",  # port 9: refused at once
            "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no -o BatchMode=yes"}
    inventory = tmp_path / "grouped.yml"
    inventory.write_text(json.dumps({"all": {"vars": hosts["vars"], "children": {
        "pair": {"hosts": {"baseline": hosts["hosts"]["baseline"], "same": hosts["hosts"]["same"]}},
        "other": {"hosts": {"gone": gone}}}}}))
    rc, out = gate(str(inventory), tmp_path / "limited", "same", "--limit", "pair")
    assert rc == 0, out
    run_dir = os.path.join(str(tmp_path / "limited"), "latest")
    assert load_json(os.path.join(run_dir, "kernel_gate.json"))["verdict"] == "pass"
    assert sorted(h["host"] for h in load_json(os.path.join(run_dir, "summary.json"))["hosts"]) == ["baseline", "same"]
    assert "gone" not in out, out

    rc, out = gate(str(inventory), tmp_path / "half", "same", "--limit", "baseline")
    assert rc != 0 and "both within --limit" in " ".join(out.split()), out
    assert not (tmp_path / "half").exists()  # refused before the run folder or any probe
