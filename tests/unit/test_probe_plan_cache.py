"""The probe's plan on the controller: cached by a digest of everything it depends on besides its
arguments, and made and put into the run folder once per batch, never once per probe host (several
hosts wrote RUN/probe/plan.json at once)."""

import os
import shutil

import yaml

from conftest import ROOT

from ext4audit.probe import analysis as probe


def test_the_cache_is_named_by_the_plan_code(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    prefix = probe.plan_cache_prefix()
    assert prefix.startswith(str(tmp_path / "cache" / "ext4audit" / "plans") + os.sep)
    assert probe.plan_cache_prefix() == prefix
    factors = tmp_path / "factors.yml"
    shutil.copy(probe.FACTORS_FILE, str(factors))
    with open(str(factors), "a") as handle:
        handle.write("# another level set\n")
    monkeypatch.setattr(probe, "FACTORS_FILE", str(factors))
    assert probe.plan_cache_prefix() != prefix


def test_the_plan_is_written_once_per_batch():
    with open(os.path.join(ROOT, "roles", "chopper_probe", "tasks", "run.yml")) as handle:
        tasks = yaml.safe_load(handle)
    writers = [task for task in tasks if "plan" in yaml.safe_dump(task.get("ext4audit.fleet.ext4_audit_controller", {}))
               or "plan" in str(task.get("ext4audit.fleet.ext4_audit_run_folder", {}).get("probe", ""))]
    assert [task["name"] for task in writers] == ["Make the plan on the controller (one seeded plan for every host)",
                                                   "Put the plan into the run folder"]
    assert all(task.get("run_once") is True for task in writers)
