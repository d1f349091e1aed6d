"""The documentation (`make docs`): the MkDocs site from README.md and docs/ builds with no link to a
missing page or anchor, and a broken one fails the build; the front door stays short with the
two-command set-up first; each role's README is what tools/role_readme.py generates from its
argument specs; antsibull-docs finds no error in the modules' and roles' documentation.
The README, the docs pages and the rules' cases ship in the collection. About 15 s, most of it antsibull-docs running ansible-doc."""
import os
import shutil
import subprocess
import tarfile
import sys

from conftest import ROOT, VENV_BIN

sys.path.insert(0, os.path.join(ROOT, "tools"))
import role_readme  # noqa: E402  (tools/ is not a package)


def _mkdocs_build(config, site_dir):
    # No --quiet: it hides the warnings that strict mode turns into a failure.
    return subprocess.run([os.path.join(VENV_BIN, "mkdocs"), "build", "-f", config, "--site-dir", site_dir],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True)


def test_site_builds_with_no_broken_link(tmp_path):
    result = _mkdocs_build(os.path.join(ROOT, "mkdocs.yml"), str(tmp_path / "site"))
    assert result.returncode == 0, result.stdout
    site = tmp_path / "site"
    assert "make audit" in (site / "index.html").read_text()  # README.md is the home page
    for role in role_readme.roles_with_specs():
        assert (site / "roles" / ("%s.html" % role)).is_file()
    for name in os.listdir(os.path.join(ROOT, "schemas")):  # published beside reports.html, which links them
        assert (site / "schemas" / name).read_bytes() == open(os.path.join(ROOT, "schemas", name), "rb").read()


def test_a_broken_link_or_anchor_fails_the_build(tmp_path):
    """The same site copied, with one broken link of each kind: every one is named and the build fails."""
    copy = tmp_path / "repo"
    for folder in ("docs", "schemas"):
        shutil.copytree(os.path.join(ROOT, folder), str(copy / folder))
    for name in ("mkdocs.yml", "README.md", os.path.join("tools", "mkdocs_hooks.py")):
        os.makedirs(str((copy / name).parent), exist_ok=True)
        shutil.copy(os.path.join(ROOT, name), str(copy / name))
    for role in role_readme.roles_with_specs():
        os.makedirs(str(copy / "roles" / role))
        shutil.copy(os.path.join(ROOT, "roles", role, "README.md"), str(copy / "roles" / role / "README.md"))
    with open(str(copy / "docs" / "probe.md"), "a") as page:
        page.write("\n[a](no-such-page.md) [b](rules.md#no-such-anchor) [c](#nowhere)\n")
    with open(str(copy / "README.md"), "a") as readme:
        readme.write("\n[d](docs/gone.md) [e](roles/no_role/README.md)\n")
    result = _mkdocs_build(str(copy / "mkdocs.yml"), str(tmp_path / "site"))
    assert result.returncode != 0
    for link in ("no-such-page.md", "rules.md#no-such-anchor", "#nowhere", "gone.md", "roles/no_role.md"):
        assert "'%s'" % link in result.stdout, (link, result.stdout)


def test_readme_is_a_short_front_door_with_the_two_commands_first():
    lines = open(os.path.join(ROOT, "README.md")).read().splitlines()
    assert len(lines) <= 210, "README.md has %d lines: move detail into docs/" % len(lines)
    setup = lines.index("## Set-up: two commands")
    assert setup < 20
    commands = lines.index("```sh", setup) + 1
    assert setup < commands < setup + 6 and lines[commands:commands + 3] == [
        "make audit   # the main job: audit the local host (inventories/local), write reports/, exit by the gate",
        "make test    # the tests: unit tests, then integration tests on real loop-mounted ext4 (root)", "```"]


def test_every_page_closes_its_code_blocks():
    """An unclosed ``` swallows the rest of a page without a warning from MkDocs."""
    pages = [os.path.join(ROOT, "README.md")] + [os.path.join(ROOT, "docs", page)
                                                 for page in os.listdir(os.path.join(ROOT, "docs"))]
    for page in pages:
        fences = [line for line in open(page).read().splitlines() if line.lstrip().startswith("```")]
        assert len(fences) % 2 == 0, page


def test_every_role_readme_is_generated_from_its_argument_specs():
    roles = role_readme.roles_with_specs()
    assert roles == sorted(r for r in os.listdir(os.path.join(ROOT, "roles"))
                           if os.path.isdir(os.path.join(ROOT, "roles", r, "meta")))
    for role in roles:
        path = os.path.join(ROOT, "roles", role, "README.md")
        assert os.path.isfile(path), "%s is missing: run make role-readmes" % path
        assert open(path).read() == role_readme.render(role), "%s is stale: run make role-readmes" % path


def test_antsibull_docs_finds_no_error_in_the_collection_docs():
    # --validate-collection-refs self: galaxy.yml depends on amazon.aws (the AMI playbook), which is
    # not installed here (no Galaxy); the default would ask ansible-doc for it and fail.
    result = subprocess.run([os.path.join(VENV_BIN, "antsibull-docs"), "lint-collection-docs", "--plugin-docs",
                             "--validate-collection-refs", "self", "."],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, universal_newlines=True,
                            env=dict(os.environ, PATH=VENV_BIN + os.pathsep + os.environ.get("PATH", ""),
                                     ANSIBLE_CONFIG=os.path.join(ROOT, "ansible.cfg")))
    assert result.returncode == 0 and not result.stdout.strip(), result.stdout


def test_the_collection_ships_readme_docs_role_readmes_rule_cases_and_schemas_not_the_site_build(tmp_path):
    subprocess.run([os.path.join(VENV_BIN, "ansible-galaxy"), "collection", "build", "--output-path", str(tmp_path),
                    "."], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, check=True)
    [tarball] = os.listdir(str(tmp_path))
    with tarfile.open(str(tmp_path / tarball)) as archive:
        names = set(archive.getnames())
    pages = {"docs/" + page for page in os.listdir(os.path.join(ROOT, "docs")) if page.endswith(".md")}
    role_readmes = {"roles/%s/README.md" % role for role in role_readme.roles_with_specs()}
    rule_cases = {"rules/cases/" + name for name in os.listdir(os.path.join(ROOT, "rules", "cases"))}  # docs/rules.md
    schemas = {"schemas/" + name for name in os.listdir(os.path.join(ROOT, "schemas"))}
    assert {"README.md"} | pages | role_readmes | rule_cases | schemas <= names
    assert not {"mkdocs.yml", "tools/mkdocs_hooks.py", "tools/role_readme.py"} & names
