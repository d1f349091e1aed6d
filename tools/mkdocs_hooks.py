"""MkDocs hooks (mkdocs.yml): README.md is the site's home page, each role's README.md a page
under roles/ and each JSON Schema of schemas/ a file under schemas/, so each text has one source,
read where it lives in the repository.

Links are written for a reader of the repository (README.md: docs/probe.md; docs/*.md: ../README.md,
../roles/<role>/README.md); on the site they become the pages' own paths.
"""
import os
import re

from mkdocs.structure.files import File

SITE_LINKS = (
    (re.compile(r"\]\(docs/"), "]("),
    (re.compile(r"\]\(\.\./README\.md"), "](index.md"),
    (re.compile(r"\]\((?:\.\./)?roles/([a-z0-9_]+)/README\.md"), r"](roles/\1.md"),
    (re.compile(r"\]\(\.\./schemas/"), "](schemas/"),
)


def _read(path):
    with open(path, encoding="utf-8") as handle:
        return handle.read()


def on_files(files, config):
    root = os.path.dirname(config["config_file_path"])
    files.append(File.generated(config, "index.md", content=_read(os.path.join(root, "README.md"))))
    roles = os.path.join(root, "roles")
    for role in sorted(os.listdir(roles)):
        readme = os.path.join(roles, role, "README.md")
        if os.path.isfile(readme):
            files.append(File.generated(config, "roles/%s.md" % role, content=_read(readme)))
    schemas = os.path.join(root, "schemas")
    for name in sorted(os.listdir(schemas)):
        files.append(File.generated(config, "schemas/" + name, content=_read(os.path.join(schemas, name))))
    return files


def on_page_markdown(markdown, page, config, files):
    for pattern, replacement in SITE_LINKS:
        markdown = pattern.sub(replacement, markdown)
    return markdown
