"""The superblock fields of the RETURN blocks of ext4_facts and ext4_image_facts, written from the
one table of them, plugins/module_utils/ext4_parsers/superblock.py SUPERBLOCK_FIELDS (ansible-doc reads a
RETURN block as a literal in the module's file: it cannot import the table).

    python tools/module_return.py          # rewrite both modules' superblock fields
    python tools/module_return.py --check  # exit 1 naming each module that differs (tests/unit/test_contract.py)
"""
import importlib
import os
import re
import sys
import textwrap
import types

import yaml

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _superblock() -> types.ModuleType:
    """plugins/module_utils/ext4_parsers/superblock.py (stdlib only), imported from this checkout by
    its path (plugins and module_utils are namespace packages here): the table's one place."""
    sys.path.insert(0, ROOT)
    return importlib.import_module("plugins.module_utils.ext4_parsers.superblock")


MODULES = [os.path.join(ROOT, "plugins", "modules", name) for name in ("ext4_facts.py", "ext4_image_facts.py")]
BEGIN = "# superblock fields: written by tools/module_return.py from ext4_parsers.superblock.SUPERBLOCK_FIELDS"
END = "# end of the superblock fields"
WIDTH = 120


def _description(text: str, indent: str) -> str:
    """A description line, folded (>-) when a plain YAML scalar would not read back as the text."""
    line = "%sdescription: %s\n" % (indent, text)
    if len(line) <= WIDTH and yaml.safe_load(line) == {"description": text}:
        return line
    wrapped = textwrap.wrap(text, WIDTH - len(indent) - 2)
    return "%sdescription: >-\n%s" % (indent, "".join("%s  %s\n" % (indent, part) for part in wrapped))


def fields(indent: str) -> str:
    """The fields as RETURN `contains` entries, each name at `indent`."""
    out = []
    for name, kind, text in _superblock().SUPERBLOCK_FIELDS:
        inner = indent + "  "
        out.append("%s%s:\n%s%stype: %s\n" % (indent, name, _description(text, inner), inner, kind))
        if kind == "list":
            out.append("%selements: str\n" % inner)
    return "".join(out)


def render(source: str, path: str) -> str:
    """The module's source with its superblock fields written from the table."""
    pattern = re.compile(r"^( *)%s\n.*?^ *%s\n" % (re.escape(BEGIN), re.escape(END)), re.M | re.S)
    match = pattern.search(source)
    if not match:
        raise SystemExit("%s: no %r ... %r lines in its RETURN block" % (path, BEGIN, END))
    indent = match.group(1)
    block = "%s%s\n%s%s%s\n" % (indent, BEGIN, fields(indent), indent, END)
    return source[:match.start()] + block + source[match.end():]


def main(argv: list) -> int:
    stale = []
    for path in MODULES:
        with open(path, encoding="utf-8") as handle:
            source = handle.read()
        text = render(source, path)
        if text != source:
            stale.append(path)
            if "--check" not in argv:
                with open(path, "w", encoding="utf-8") as handle:
                    handle.write(text)
    if stale and "--check" in argv:
        print("stale superblock fields (run python tools/module_return.py): %s" % ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
