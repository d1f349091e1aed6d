"""The repository speaks for itself: no product file points outside the checkout (the `../shared`
folder the project was started from is not shipped), the docs name the machine a figure came from
instead of saying "this machine", and docs/sources.md names every rule a seed document gave."""
import os
import re

import yaml

from conftest import ROOT

# What ships or is read as the product: the collection, the controller package, the docs.
PRODUCT_FOLDERS = ("docs", "ext4audit", "plugins", "roles", "rules", "playbooks")
PRODUCT_FILES = ("README.md", "pyproject.toml", "galaxy.yml", "Makefile")


def _product_files():
    for name in PRODUCT_FILES:
        yield os.path.join(ROOT, name)
    for folder in PRODUCT_FOLDERS:
        for parent, dirs, files in os.walk(os.path.join(ROOT, folder)):
            dirs[:] = [d for d in dirs if d != "__pycache__"]
            for name in files:
                yield os.path.join(parent, name)


def test_no_product_file_refers_to_the_shared_folder():
    offenders = []
    for path in _product_files():
        with open(path, "rb") as handle:
            text = handle.read().decode("utf-8", "replace")
        offenders += ["%s:%d" % (os.path.relpath(path, ROOT), number)
                      for number, line in enumerate(text.splitlines(), 1) if "../shared" in line]
    assert not offenders, "product files refer to ../shared (cite the original source, docs/sources.md): %s" % offenders


def test_docs_describe_the_machine_a_figure_came_from():
    pages = [os.path.join(ROOT, "README.md")] + [os.path.join(ROOT, "docs", name)
                                                 for name in sorted(os.listdir(os.path.join(ROOT, "docs")))
                                                 if name.endswith(".md")]
    offenders = []
    for path in pages:
        with open(path, encoding="utf-8") as handle:
            offenders += ["%s:%d" % (os.path.relpath(path, ROOT), number)
                          for number, line in enumerate(handle, 1)
                          if re.search(r"\bthis machine\b|\bmeasured here\b", line, re.IGNORECASE)]
    assert not offenders, "say which machine (e.g. a 2-CPU VM, kernel 6.18.44), not 'this machine': %s" % offenders


def test_sources_page_names_every_seeded_rule():
    with open(os.path.join(ROOT, "rules", "catalog.yml"), encoding="utf-8") as handle:
        seeded = {rule["id"]: rule["seed"] for rule in yaml.safe_load(handle)["rules"] if rule.get("seed")}
    with open(os.path.join(ROOT, "docs", "sources.md"), encoding="utf-8") as handle:
        rows = {line.split("|")[1].strip(): line for line in handle if line.startswith("| 0")}
    missing = [rule_id for rule_id, seed in seeded.items() if rule_id not in rows.get(seed, "")]
    assert seeded and not missing, "docs/sources.md: name each rule in its seed's row: %s" % missing
