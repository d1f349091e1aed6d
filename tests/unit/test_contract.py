"""The contract (ext4audit/model/contract.py): the published JSON Schemas are the models' (regenerated
here, compared byte for byte), valid JSON Schemas, and true to the shipped rule catalog and
example waivers; a constant both sides of the audit use exists once, and the Ansible side's
copies (argument specs, defaults, the modules' documentation) are checked against it."""

import ast
import json
import os
import subprocess
import sys

import jsonschema
import pytest
import yaml

from conftest import ROOT, module_return_doc
from ext4audit import DEFAULT_FAIL_ON, EXIT_CODES, SEVERITIES
from ext4audit.model import contract, fact_paths
from ext4audit.parsers.ext4_probe import confirmations as probe_confirmations, job as probe_job
from ext4audit.parsers.ext4_parsers.common import (
    CONFIRM_SCOPES, CONFIRMATION_PROBES, FACTS_SCHEMA, NETFS_TYPES, PROBE_RESULT_SCHEMA,
)
from ext4audit.parsers.ext4_parsers.superblock import SUPERBLOCK_FIELDS


def _schema(name):
    with open(os.path.join(contract.SCHEMAS_DIR, name), encoding="utf-8") as handle:
        return json.load(handle)


def _yaml(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return yaml.safe_load(handle)


def _as_json(doc):
    """A YAML document as JSON holds it (dates as their ISO text)."""
    return json.loads(json.dumps(doc, default=lambda value: value.isoformat()))


def test_the_published_schemas_are_the_models(tmp_path):
    contract.write_schemas(str(tmp_path))
    assert sorted(os.listdir(contract.SCHEMAS_DIR)) == sorted(contract.SCHEMAS), "make schemas"
    for name in contract.SCHEMAS:
        with open(os.path.join(contract.SCHEMAS_DIR, name), encoding="utf-8") as published:
            assert published.read() == (tmp_path / name).read_text(encoding="utf-8"), \
                "schemas/%s differs from ext4audit/model/contract.py's model: run make schemas" % name


@pytest.mark.parametrize("name", sorted(contract.SCHEMAS))
def test_each_schema_is_a_valid_json_schema(name):
    jsonschema.Draft202012Validator.check_schema(_schema(name))


def test_the_shipped_catalog_and_example_waivers_match_their_schemas():
    jsonschema.validate(_as_json(_yaml("rules", "catalog.yml")), _schema("rules.json"))
    jsonschema.validate(_as_json(_yaml("inventories", "example", ".ext4audit", "waivers.yml")), _schema("waivers.json"))


def test_a_misspelt_waiver_or_rule_field_is_refused_by_the_schema():
    waiver = {"rule": "R", "justification": "j", "approver": "a", "expires": "2027-01-01", "hostz": ["db"]}
    with pytest.raises(jsonschema.ValidationError, match="hostz"):
        jsonschema.validate({"waivers": [waiver]}, _schema("waivers.json"))
    catalog = _as_json(_yaml("rules", "catalog.yml"))
    catalog["rules"][0]["serverity"] = "high"
    with pytest.raises(jsonschema.ValidationError, match="serverity"):
        jsonschema.validate(catalog, _schema("rules.json"))


RECORD = {"host": "db-1", "status": "audited", "groups": ["db"], "reason": None, "added_later": 1,
          "facts": {"schema": FACTS_SCHEMA, "kernel": {"release": "6.1.0"}, "netfs": [],
                    "filesystems": [{"mountpoint": "/", "options": ["rw"], "superblock": {"inode_size": 256,
                                                                                         "a_new_key": "x"}}]}}


def test_records_may_carry_keys_a_later_version_adds():
    contract.check(RECORD, contract.FactsRecord, "facts record f.json")
    jsonschema.validate(RECORD, _schema("facts-record.json"))


@pytest.mark.parametrize("change, message", [
    (lambda r: r["facts"]["filesystems"][0].update(options="rw"),
     "facts record f.json (host 'db-1'): $.facts.filesystems[0].options: Expected `array | null`, got `str`"),
    (lambda r: r.update(status="lost"),
     "facts record f.json (host 'db-1'): $.status 'lost' is not one of audited, unreachable, failed"),
    (lambda r: r["facts"].update(schema="ext4-fleet-audit/facts/v9"),
     "$.facts.schema 'ext4-fleet-audit/facts/v9' is not a ext4-fleet-audit/facts/v1 document"),
    (lambda r: r["facts"]["filesystems"][0]["superblock"].update(inode_size=True),
     "$.facts.filesystems[0].superblock.inode_size: Expected `int | null`, got `bool`"),
])
def test_an_error_names_the_file_the_host_and_the_field(change, message):
    record = json.loads(json.dumps(RECORD))
    change(record)
    with pytest.raises(contract.ContractError) as error:
        contract.check(record, contract.FactsRecord, "facts record f.json")
    assert message in str(error.value)
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(record, _schema("facts-record.json"))


ALLOCATOR = {"status": "ran", "reason": None, "issues": [
    {"id": "A1", "name": "n", "verdict": "present", "reason": None, "pairs": 8, "p_value": 0.01, "test": "wilcoxon",
     "effect": {"dspan_p50_ratio": 2.0, "dspan_p90_ratio": None, "tail_share_trigger": 0.5, "tail_share_control": 0.1}}]}


def test_the_probe_result_may_carry_the_allocator_experiments():
    record = {"host": "db-1", "status": "ran", "result": {"schema": PROBE_RESULT_SCHEMA,
                                                          "allocator": ALLOCATOR}}
    contract.check(record, contract.ProbeRecord, "probe file p.json")
    jsonschema.validate(record, _schema("probe-record.json"))
    record["result"]["allocator"]["issues"][0]["verdict"] = "maybe"
    with pytest.raises(contract.ContractError, match=r"\$.result.allocator.issues\[0\].verdict 'maybe' is not one"):
        contract.check(record, contract.ProbeRecord, "probe file p.json")


def test_the_probe_result_may_carry_a_confirmation_its_scope_skipped():
    """chopper_probe_confirm_scope `own`: an entry without a measurement, shaped like a measured one."""
    skipped = {"id": "buffered_write_fsync", "seed": "001", "status": "skipped", "metric": None, "unit": "s",
               "mountpoint": None, "repetitions": 0, "ratio": None, "ratio_spread": None, "risky": None, "safe": None,
               "reason": "not your configuration: the replica of / does not use nodelalloc (set "
                         "chopper_probe_confirm_scope: all to measure it)"}
    record = {"host": "db-1", "status": "ran", "result": {"schema": PROBE_RESULT_SCHEMA,
                                                          "confirmations": [skipped]}}
    contract.check(record, contract.ProbeRecord, "probe file p.json")
    jsonschema.validate(record, _schema("probe-record.json"))


# ------------------------------------------------------------------ one place for each constant
def _role_spec(role, entry_point, option):
    return _yaml("roles", role, "meta", "argument_specs.yml")["argument_specs"][entry_point]["options"][option]


def test_the_ansible_copies_of_the_severities_fail_on_default_and_exit_codes_are_the_controllers():
    """The one agreement test for the facts that Ansible's YAML holds as literals (argument specs,
    defaults, a failed_when). The other copies of each (the role's other entry points, its README,
    docs/variables.md) are checked against these by tests/unit/test_role_variables.py."""
    for role, name in (("ext4_audit", "ext4_audit_fail_on"), ("ext4_remediate", "ext4_remediate_min_severity")):
        specs = _yaml("roles", role, "meta", "argument_specs.yml")["argument_specs"]
        choices = [spec["options"][name]["choices"] for spec in specs.values() if name in spec["options"]]
        assert choices and all(tuple(c) == SEVERITIES for c in choices), name
    with open(os.path.join(ROOT, "playbooks", "remediate.yml"), encoding="utf-8") as handle:
        assert "ext4_remediate_min_severity | default('medium') in %s" % list(SEVERITIES) in handle.read()
    assert _yaml("roles", "ext4_audit", "defaults", "main.yml")["ext4_audit_fail_on"] == DEFAULT_FAIL_ON
    codes = "rc not in %s" % sorted(EXIT_CODES.values())
    for path in (("roles", "ext4_audit", "tasks", "report.yml"), ("playbooks", "kernel_gate.yml")):
        with open(os.path.join(ROOT, *path), encoding="utf-8") as handle:
            assert codes in handle.read(), path
    assert EXIT_CODES["fail"] == 1  # report.yml's message: "policy failed" for 1


def test_the_confirmation_probes_are_the_probes():
    assert tuple(_role_spec("chopper_probe", "main", "chopper_probe_confirmations")["default"]) == contract.PROBES
    assert tuple(_yaml("roles", "chopper_probe", "defaults", "main.yml")["chopper_probe_confirmations"]) == \
        contract.PROBES
    # the probe takes them (and its result's schema id) from the parsers it travels with
    assert probe_confirmations.Confirmations.PROBES is CONFIRMATION_PROBES
    assert probe_job.RESULT_SCHEMA is PROBE_RESULT_SCHEMA
    probe_dir = os.path.join(ROOT, "plugins", "module_utils", "ext4_probe")
    for name in os.listdir(probe_dir):
        with open(os.path.join(probe_dir, name), encoding="utf-8") as handle:
            assert "ext4-fleet-audit/probe-result" not in handle.read(), name


def test_the_confirm_scopes_are_the_probes():
    """One list of scopes (ext4_parsers.common, shipped with the probe), the role's choices and default
    from it, and the role sends the scope in every job."""
    spec = _role_spec("chopper_probe", "main", "chopper_probe_confirm_scope")
    assert tuple(spec["choices"]) == CONFIRM_SCOPES
    assert spec["default"] == _yaml("roles", "chopper_probe", "defaults", "main.yml")["chopper_probe_confirm_scope"] \
        == "own"
    [start] = [task for block in _yaml("roles", "chopper_probe", "tasks", "run.yml") for task in block.get("block", [])
               if "ext4audit.fleet.ext4_probe_run" in task]
    assert start["ext4audit.fleet.ext4_probe_run"]["job"]["confirm_scope"] == "{{ chopper_probe_confirm_scope }}"
    assert probe_job.CONFIRM_SCOPES is CONFIRM_SCOPES


def test_the_facts_modules_document_the_constants_they_use():
    for name in ("ext4_facts", "ext4_image_facts"):
        path = os.path.join(ROOT, "plugins", "modules", name + ".py")
        assert module_return_doc(path)[name]["contains"]["schema"]["sample"] == FACTS_SCHEMA
        with open(path, encoding="utf-8") as handle:
            tree = ast.parse(handle.read())
        [doc] = [node.value.value for node in tree.body if isinstance(node, ast.Assign)
                 and getattr(node.targets[0], "id", None) == "DOCUMENTATION"]
        options = yaml.safe_load(doc)["options"]
        if "netfs_types" in options:
            assert tuple(options["netfs_types"]["default"]) == NETFS_TYPES


def test_no_schema_id_is_written_twice():
    """Each schema id's text is in one file of the code that writes or reads it."""
    ids = (FACTS_SCHEMA, PROBE_RESULT_SCHEMA, contract.HOST_REPORT_SCHEMA,
           contract.SUMMARY_SCHEMA, contract.PROBE_PLAN_SCHEMA, contract.KERNEL_GATE_SCHEMA, contract.FINDINGS_INDEX_SCHEMA)
    code = [os.path.join(folder, name) for top in ("ext4audit", "plugins", "roles")
            for folder, _, names in os.walk(os.path.join(ROOT, top)) for name in names
            if name.endswith(".py") and not os.path.islink(os.path.join(folder, name))]
    for schema_id in ids:
        holders = []
        for path in code:
            with open(path, encoding="utf-8") as handle:
                if '"%s"' % schema_id in handle.read():
                    holders.append(os.path.relpath(path, ROOT))
        assert len(holders) == 1, (schema_id, holders)


def test_the_superblock_fields_are_one_table():
    """ext4_parsers.superblock.SUPERBLOCK_FIELDS: the fact paths are its names, the contract decodes some of
    them, and both modules' RETURN blocks list them as tools/module_return.py writes them."""
    names = [name for name, _kind, _text in SUPERBLOCK_FIELDS]
    assert tuple(names) == fact_paths.SUPERBLOCK and set(contract.Superblock.__struct_fields__) <= set(names)
    for module in ("ext4_facts", "ext4_image_facts"):
        doc = module_return_doc(os.path.join(ROOT, "plugins", "modules", module + ".py"))
        filesystems = doc[module]["contains"]["filesystems"]["contains"]
        assert list(filesystems["superblock"]["contains"]) == names, module
    result = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "module_return.py"), "--check"],
                            stderr=subprocess.PIPE, universal_newlines=True, check=False)
    assert result.returncode == 0, result.stderr
