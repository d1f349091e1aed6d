"""Sliced runs (docs/scaling.md, "Beyond one controller"): the real playbook once over the whole fleet and once
as three --limit slices, one of them with an unreachable host; `python -m ext4audit merge` of the
slices must give what the full run gave. The fleet is this machine under six inventory names
(local connections) plus a host nobody answers for, with real loop-mounted ext4 filesystems, a
waiver, an expired waiver and a probe record (skipped: its mount point does not exist)."""

import json
import os
import shutil
import subprocess
import sys

import pytest

from conftest import ROOT, VENV_BIN, LoopFilesystems, ansible_playbook, load_host_report, load_json, needs_root, run

pytestmark = needs_root

SLICES = {"slice-1": ["node-a", "node-b"], "slice-2": ["node-c", "gone-1"], "slice-3": ["node-d", "node-e"]}
RUN_SPECIFIC = ("run_id", "generated_at")  # the only fields that may differ between the two ways
LIVE = ("usage",)  # a filesystem's live statvfs numbers: the two runs read them at different times


def inventory(folder, mount_base):
    hosts = {name: {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}
             for name in ("node-a", "node-b", "node-c", "node-d", "node-e")}
    # The probe is recorded as skipped: deterministic, unlike a measurement.
    hosts["node-e"].update(chopper_probe_enabled=True, chopper_probe_mountpoint="/nonexistent-mount")
    # Port 9 on loopback: nothing listens, ssh is refused at once.
    hosts["gone-1"] = {"ansible_host": "127.0.0.1", "ansible_port": 9, "ansible_connection": "ssh",
                       "ansible_ssh_common_args": "-o ConnectTimeout=3 -o StrictHostKeyChecking=no -o BatchMode=yes"}
    (folder / "hosts.yml").write_text(json.dumps({"all": {"vars": {"ext4_audit_become": False,
                                                                    "chopper_probe_enabled": False},
                                                           "hosts": hosts}}))
    (folder / "waivers.yml").write_text(json.dumps({"waivers": [
        {"rule": "EXT4_SMALL_JOURNAL", "hosts": ["node-b"], "mountpoints": [mount_base + "/*"],
         "justification": "test: journal resize planned", "approver": "storage-team", "expires": "2099-12-31"},
        {"rule": "EXT4_ONLINE_DISCARD", "hosts": ["node-c"], "justification": "test: expired",
         "approver": "storage-team", "expires": "2020-01-01"}]}))


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """One full run and three --limit slices of the same fleet, with the same policy and waivers."""
    base = tmp_path_factory.mktemp("sliced")
    shm = "/dev/shm/ext4audit-test-sliced-%d" % os.getpid()
    os.makedirs(shm)
    filesystems = LoopFilesystems(shm)
    try:
        # nodelalloc,discard: EXT4_ONLINE_DISCARD (low), the rule of the expired waiver (nodelalloc alone
        # is no finding on kernels that ignore dioread_nolock without delalloc)
        for name, kwargs in (("nodelalloc", {"mount_options": "nodelalloc,discard"}),
                             ("smalljournal", {"size": "2G", "mkfs_args": ["-J", "size=4"]})):
            made = filesystems.make(name, **kwargs)
            # Commit the mount's first journal transaction now, so the jbd2 counters in the facts
            # stay the same for all four runs (the filesystems are idle afterwards).
            run(["sync", "--file-system", made["mountpoint"]])
        invdir = base / "inventory"
        invdir.mkdir()
        inventory(invdir, os.path.join(shm, "mnt"))
        reports = base / "reports"
        common = ["-i", str(invdir), "playbooks/audit.yml", "-e", "ext4_audit_reports_dir=%s" % reports]
        rc, out = ansible_playbook(*common, "-e", "ext4_audit_run_id=full")
        # 4: Ansible counts the unreachable host unreachable (ansible-runner's dark), not ignored.
        assert rc == 4 and "verdict: incomplete" in out, out[-5000:]
        for run_id, hosts in SLICES.items():
            # localhost is named too: the prepare and report plays run there. The gate is the
            # merged run's, so a slice only reports.
            rc, out = ansible_playbook(*common, "--limit", ",".join(hosts + ["localhost"]),
                                       "-e", "ext4_audit_run_id=%s" % run_id, "-e", "ext4_audit_gate=false")
            assert rc == 0, out[-5000:]
        yield {"base": base, "reports": reports, "invdir": invdir}
    finally:
        filesystems.cleanup()
        shutil.rmtree(shm, ignore_errors=True)


def merge(runs, out, *slices, extra=()):
    """The merge command with the report options the playbook's report step used."""
    argv = [os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "merge", str(out)] + [str(s) for s in slices]
    argv += ["--fail-on", "high", "--unreachable-incomplete", "true", "--waivers", str(runs["invdir"] / "waivers.yml"),
             "--inventory", str(runs["invdir"]), "--baseline", "", "--fail-on-new", "false"] + list(extra)
    result = subprocess.run(argv, cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    return result.returncode, result.stdout.decode(errors="replace"), result.stderr.decode(errors="replace")


def without_run_fields(doc):
    doc = {key: value for key, value in doc.items() if key not in RUN_SPECIFIC}
    if "filesystems" in doc:
        doc["filesystems"] = [{key: value for key, value in fs.items() if key not in LIVE} for fs in doc["filesystems"]]
    return doc


def test_merged_slices_report_what_the_full_run_reported(runs):
    reports = runs["reports"]
    slices = [reports / name for name in SLICES]
    for folder, hosts in zip(slices, SLICES.values()):
        assert sorted(h["host"] for h in load_json(str(folder / "summary.json"))["hosts"]) == sorted(hosts)
    # --store off: the full run and the slices are nights of the embedded store by now, so the
    # merged summary.md would add their history (open since, trend), which the full run, the
    # store's first night, could not have
    rc, out, err = merge(runs, reports / "merged", *slices, extra=("--store", "off"))
    assert rc == 2, err + out  # incomplete, as the full run: gone-1 could not be audited
    full, merged = reports / "full", reports / "merged"
    assert os.path.realpath(str(reports / "latest")) == str(merged)

    summary = load_json(str(merged / "summary.json"))
    assert summary["run_id"] == "merged" and summary["verdict"] == "incomplete"
    assert without_run_fields(summary) == without_run_fields(load_json(str(full / "summary.json")))
    # The test exercises what it says: every host, the unreachable one, a waiver, an expired
    # waiver and a probe record.
    assert summary["counts"]["hosts"] == 6 and summary["counts"]["hosts_audited"] == 5
    assert [(h["host"], h["status"]) for h in summary["hosts_not_audited"]] == [("gone-1", "unreachable")]
    assert summary["counts"]["waived"] == 1 and summary["counts"]["by_rule"]["EXT4_SMALL_JOURNAL"] == 4
    assert [(w["host"], w["rule"]) for w in summary["expired_waivers"]] == [("node-c", "EXT4_ONLINE_DISCARD")]
    assert [(p["host"], p["status"]) for p in summary["probe"]["hosts"]] == [("node-e", "skipped")]

    names = sorted(os.listdir(str(full / "hosts")))
    assert sorted(os.listdir(str(merged / "hosts"))) == names and len(names) == 6
    for name in names:
        assert without_run_fields(load_host_report(str(merged / "hosts" / name))) == \
            without_run_fields(load_host_report(str(full / "hosts" / name))), name
    for name in ("junit.xml", "summary.md"):
        assert (merged / name).read_bytes() == (full / name).read_bytes(), name
    # The slices' records were copied byte for byte.
    for sub in ("facts", "probe"):
        copied = sorted(os.listdir(str(merged / sub)))
        assert copied == sorted(n for s in slices for n in os.listdir(str(s / sub)))
        for name in copied:
            source = [s / sub / name for s in slices if (s / sub / name).exists()][0]
            assert (merged / sub / name).read_bytes() == source.read_bytes()


def test_merge_refuses_and_writes_nothing(runs):
    reports, base = runs["reports"], runs["base"]
    s1, s2, s3 = [reports / name for name in SLICES]
    out = base / "refused"

    rc, _, err = merge(runs, out, s1, s2, s1)
    assert rc == 2 and "host 'node-a' has facts records in two slices" in err.splitlines()[0], err
    assert not out.exists()

    out.mkdir()
    rc, _, err = merge(runs, out, s1, s2, s3)
    assert rc == 2 and "exists already" in err.splitlines()[0], err
    assert os.listdir(str(out)) == []
    out.rmdir()

    (base / "not-a-run").mkdir()
    rc, _, err = merge(runs, out, s1, base / "not-a-run")
    assert rc == 2 and "has no facts/ folder" in err.splitlines()[0], err
    assert not out.exists()

    # Slices that ran different probe plans do not compare; the same plan is merged once.
    planned = []
    for folder, runs_in_plan in ((s1, 8), (s3, 16)):
        copy = base / (folder.name + "-planned")
        shutil.copytree(str(folder), str(copy), symlinks=True)
        run([os.path.join(VENV_BIN, "python"), "-m", "ext4audit", "plan", "--runs", str(runs_in_plan),
             "--out", str(copy / "probe" / "plan.json")], cwd=ROOT)
        planned.append(copy)
    rc, _, err = merge(runs, out, *planned)
    assert rc == 2 and "ran different probe plans" in err.splitlines()[0], err
    assert not out.exists()
    shutil.copyfile(str(planned[0] / "probe" / "plan.json"), str(planned[1] / "probe" / "plan.json"))
    rc, _, err = merge(runs, out, *planned)
    assert rc in (0, 1, 2) and "error" not in err, err
    assert load_json(str(out / "probe" / "plan.json"))["runs"] == 8
    shutil.rmtree(str(out))

    # A report option that fails (a waiver without a justification): the new folder is removed.
    bad = base / "bad-waivers.yml"
    bad.write_text(json.dumps({"waivers": [{"rule": "EXT4_SMALL_JOURNAL", "approver": "x", "expires": "2099-01-01"}]}))
    rc, _, err = merge(runs, out, s1, s2, s3, extra=["--waivers", str(bad)])
    assert rc == 2 and err.startswith("error:"), err
    assert not out.exists()


def test_report_step_loads_neither_scipy_nor_matplotlib(runs, tmp_path):
    """The report step runs in every audit: without probe sweeps or a kernel gate it must not pay
    for importing scipy or matplotlib (2 to 3 s of controller time per run when it did)."""
    reports = runs["reports"]
    code = ("import runpy, sys\nsys.argv = ['ext4audit'] + sys.argv[1:]\ntry:\n"
            "    runpy.run_module('ext4audit', run_name='__main__')\nexcept SystemExit:\n    pass\n"
            "print('loaded:', sorted(m for m in sys.modules if m.split('.')[0] in ('scipy', 'matplotlib')))")
    argv = [os.path.join(VENV_BIN, "python"), "-c", code, "merge", str(tmp_path / "merged")]
    argv += [str(reports / name) for name in SLICES]
    out = run(argv, cwd=ROOT)
    assert "loaded: []" in out, out[-3000:]
    assert os.path.exists(str(tmp_path / "merged" / "report.html"))
