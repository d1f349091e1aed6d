"""A fleet audited the way Ansible users slice it, through the real playbook (issue 31):

- `--limit web` (a group, localhost not named) audits web's hosts alone: the prepare and report
  steps still run on the controller, the report covers those hosts and the exit code is the verdict's.
- A directory inventory with its waiver file at the new place, .ext4audit/waivers.yml, gets no
  "Skipping 'waivers' as this is not a valid group definition" warning, and the file is read.
- waivers.yml in the inventory folder itself (the old place) is still read, with one deprecation
  message.

The hosts are this machine under inventory names (local connections), and one host nobody answers
for in the other group: had --limit let it in, the verdict would be incomplete."""

import json
import os
import sys

from conftest import ROOT, ansible_playbook, load_json, needs_root

pytestmark = needs_root

ENV = {"PYTHONPATH": ROOT}  # this checkout's controller package, whatever the venv's editable install points at
OLD_PLACE_WARNING = "not a valid group definition"
DEPRECATED = "[DEPRECATED]"
VALID_WAIVERS = {"waivers": [{"rule": "EXT4_ONLINE_DISCARD", "hosts": ["web-1"], "justification": "test: fstrim rollout",
                              "approver": "storage-team", "expires": "2099-12-31"}]}
# The waiver tests select web without --limit, so that they show the waiver file's place alone.
WEB = ("-e", "ext4_audit_hosts=web")
BAD_DATE = dict(VALID_WAIVERS["waivers"][0], expires="0999-06-30")  # refused before any host is contacted


def fleet(folder):
    """An inventory folder: group web (two local hosts) and group db (a local host and one that refuses ssh)."""
    local = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
    gone = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh",  # port 9: refused at once
            "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no -o BatchMode=yes"}
    folder.mkdir()
    (folder / "hosts.yml").write_text(json.dumps({"all": {
        "vars": {"ext4_audit_become": False, "chopper_probe_enabled": False},
        "children": {"web": {"hosts": {"web-1": local, "web-2": local}},
                     "db": {"hosts": {"db-1": local, "db-gone": gone}}}}}))
    return folder


def write_waivers(path, *waivers):
    path.parent.mkdir(exist_ok=True)
    path.write_text(json.dumps({"waivers": list(waivers)}))


def audit(inventory, reports, *extra):
    return ansible_playbook("-i", str(inventory), "playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports,
                            "-e", "ext4_audit_run_id=run-1", *extra, env=ENV)


def test_limit_by_group_audits_that_group_and_reports_it(tmp_path):
    inventory = fleet(tmp_path / "inventory")
    write_waivers(inventory / ".ext4audit" / "waivers.yml", *VALID_WAIVERS["waivers"])
    rc, out = audit(inventory, tmp_path / "reports", "--limit", "web")
    run_dir = tmp_path / "reports" / "run-1"
    assert (run_dir / "summary.json").is_file(), out[-5000:]  # the report step ran
    summary = load_json(str(run_dir / "summary.json"))
    assert sorted(h["host"] for h in summary["hosts"]) == ["web-1", "web-2"], summary["hosts"]
    assert summary["counts"]["hosts"] == summary["counts"]["hosts_audited"] == 2 and not summary["hosts_not_audited"]
    assert load_json(str(run_dir / "play-hosts.json"))["hosts"] == ["web-1", "web-2"]
    assert sorted(name.rsplit("-", 1)[0] for name in os.listdir(str(run_dir / "facts"))) == ["web-1", "web-2"]
    # db-gone was not contacted: not incomplete; the gate (on) gives the verdict's exit code
    assert summary["verdict"] in ("pass", "fail"), summary["reason"]
    assert rc == (0 if summary["verdict"] == "pass" else 2), out[-5000:]
    assert "verdict: %s" % summary["verdict"] in out, out[-5000:]
    assert "db-1" not in out and "db-gone" not in out, out[-5000:]
    # the waiver file at its new place: no inventory warning, no deprecation
    assert OLD_PLACE_WARNING not in out and DEPRECATED not in out, out[-5000:]


def test_a_waiver_file_at_the_new_place_is_read(tmp_path):
    inventory = fleet(tmp_path / "inventory")
    waivers = inventory / ".ext4audit" / "waivers.yml"
    write_waivers(waivers, BAD_DATE)
    rc, out = audit(inventory, tmp_path / "reports", *WEB)
    flat = " ".join(out.split())  # the callback folds long messages
    assert rc != 0 and "%s: waiver #1 (EXT4_ONLINE_DISCARD)" % waivers in flat, out[-5000:]
    assert OLD_PLACE_WARNING not in out and DEPRECATED not in out, out[-5000:]
    assert not (tmp_path / "reports" / "run-1").exists()  # stopped before any host was contacted


def test_the_old_waiver_place_is_still_read_with_a_deprecation_message(tmp_path):
    inventory = fleet(tmp_path / "inventory")
    waivers = inventory / "waivers.yml"
    write_waivers(waivers, BAD_DATE)
    rc, out = audit(inventory, tmp_path / "reports", *WEB)
    flat = " ".join(out.split())
    assert rc != 0 and "%s: waiver #1 (EXT4_ONLINE_DISCARD)" % waivers in flat, out[-5000:]
    assert flat.count(DEPRECATED) == 1 and "Move it to %s/.ext4audit/waivers.yml" % inventory in flat, out[-5000:]

    write_waivers(waivers, *VALID_WAIVERS["waivers"])
    rc, out = audit(inventory, tmp_path / "reports", *WEB, "-e", "ext4_audit_gate=false")
    flat = " ".join(out.split())
    assert rc == 0 and (tmp_path / "reports" / "run-1" / "summary.json").is_file(), out[-5000:]
    assert flat.count(DEPRECATED) == 1, out[-5000:]
