"""Every variable a role takes (its meta/argument_specs.yml) is documented where a user looks for it:
in docs/variables.md (the audit's own in the README's Variables section, which docs/variables.md
points to) and in its role's defaults/main.yml, with the argument spec's default (a required one,
which has none, named there in a comment)."""

import glob
import os
import re

import pytest
import yaml

from conftest import ROOT

ROLES = sorted(os.path.basename(os.path.dirname(os.path.dirname(path)))
               for path in glob.glob(os.path.join(ROOT, "roles", "*", "meta", "argument_specs.yml")))


def read(*parts):
    with open(os.path.join(ROOT, *parts), encoding="utf-8") as handle:
        return handle.read()


def options(role):
    """[(variable, its option)] of every entry point of the role's argument specs."""
    specs = yaml.safe_load(read("roles", role, "meta", "argument_specs.yml"))["argument_specs"]
    return [item for entry in specs.values() for item in (entry.get("options") or {}).items()]


def owner(variable):
    """The role whose defaults hold a variable: the one its name starts with (ext4_audit_fstab_path
    is the audit's, though the remediation takes it too)."""
    return next(role for role in ROLES if variable.startswith(role + "_"))


def documented():
    """{variable: its row's default cell} of the tables of docs/variables.md and the README's Variables."""
    readme = read("README.md")
    variables_section = readme[readme.index("\n## Variables"):]
    text = read("docs", "variables.md") + "\n" + variables_section[:variables_section.find("\n## ", 1)]
    return dict(re.findall(r"^\| `([a-z0-9_]+)` \| ([^|]*) \|", text, re.M))


def documented_names():
    return set(documented())


@pytest.mark.parametrize("role", ROLES)
def test_every_variable_of_a_role_is_in_docs_variables(role):
    missing = sorted({name for name, _option in options(role)} - documented_names())
    assert not missing, "not in docs/variables.md (nor the README's Variables): %s" % missing


@pytest.mark.parametrize("role", ROLES)
def test_every_variable_of_a_role_is_in_its_defaults_with_the_specs_default(role):
    for name, option in options(role):
        text = read("roles", owner(name), "defaults", "main.yml")
        defaults = yaml.safe_load(text) or {}
        if option.get("required"):
            assert name in defaults or re.search(r"^# %s: required" % name, text, re.M), \
                "%s: required, and not named in roles/%s/defaults/main.yml" % (name, owner(name))
        else:
            assert name in defaults, "%s is not in roles/%s/defaults/main.yml" % (name, owner(name))
            if "default" in option:  # none where the default is a template (ext4_audit_inventory_dir)
                assert defaults[name] == option["default"], (name, defaults[name], option["default"])


@pytest.mark.parametrize("role", ROLES)
def test_the_documented_defaults_are_the_argument_specs(role):
    """A default cell that starts with a value in backticks (`high`, `[]`, `{...}`) gives the spec's
    default; others describe it (UTC timestamp, required)."""
    cells = documented()
    for name, option in options(role):
        cell = cells.get(name, "")
        if "default" in option and cell.startswith("`"):
            assert yaml.safe_load(cell[1:cell.index("`", 1)]) == option["default"], (name, cell, option["default"])
