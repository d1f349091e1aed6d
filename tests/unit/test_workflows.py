"""The GitHub Actions workflows (.github/workflows/): actionlint (with shellcheck) and yamllint pass;
least privilege; no untrusted input spliced into run: scripts; third-party actions pinned to a
commit; and every make target, playbook, `python -m ext4audit` subcommand, pytest path and Molecule
scenario they run exists in this repository, so what runs in GitHub is what this suite runs.
Each check is also shown failing on a deliberately bad workflow.
"""

import functools
import glob
import os
import re
import shlex
import shutil
import subprocess
import sys

import pytest
import yaml

from conftest import ROOT, VENV_BIN

WORKFLOW_DIR = os.path.join(ROOT, ".github", "workflows")
WORKFLOWS = sorted(glob.glob(os.path.join(WORKFLOW_DIR, "*.yml")))
EXPECTED_WORKFLOWS = {"ci.yml", "nightly-scan.yml", "ami-precheck.yml", "kernel-gate.yml"}
ACTIONLINT = os.path.join(VENV_BIN, "actionlint")
YAMLLINT = os.path.join(VENV_BIN, "yamllint")
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
# Contexts an outsider can set (issue titles, branch names, dispatch inputs): never in a script.
UNTRUSTED_IN_RUN = re.compile(r"\$\{\{\s*(inputs\.|github\.event\.|github\.head_ref)")
SHELL_KEYWORDS = {"if", "then", "else", "elif", "while", "until", "do", "!", "time", "exec", "sudo"}
MATRIX_REF = re.compile(r"\$\{\{\s*matrix\.([\w-]+)\s*\}\}")


def run_tool(argv, cwd=ROOT):
    result = subprocess.run(argv, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=300)
    return result.returncode, result.stdout.decode(errors="replace")


# ---- facts about this repository that the workflows' commands must match -----------------------

@functools.lru_cache()
def make_targets():
    """Explicit targets of the Makefile (rule lines; not variable assignments or recipes)."""
    targets = set()
    with open(os.path.join(ROOT, "Makefile")) as handle:
        for line in handle:
            match = re.match(r"^([A-Za-z0-9_.%/ -]+?)\s*::?(?!=)", line)
            if match:
                targets.update(match.group(1).split())
    return targets


@functools.lru_cache()
def ext4audit_subcommands():
    rc, output = run_tool([sys.executable, "-m", "ext4audit", "--help"])
    assert rc == 0, output
    return set(re.search(r"\{([\w,-]+)\}", output).group(1).split(","))


def molecule_scenarios():
    return {os.path.basename(os.path.dirname(path))
            for path in glob.glob(os.path.join(ROOT, "molecule", "*", "molecule.yml"))}


# ---- reading workflows ------------------------------------------------------------------------

def triggers(doc):
    """{event: its settings} from `on:` (a string, a list or a mapping)."""
    on = doc.get("on", doc.get(True))  # PyYAML reads the bare key `on` as the boolean True
    if isinstance(on, str):
        return {on: {}}
    if isinstance(on, list):
        return dict.fromkeys(on, {})
    return {event: settings or {} for event, settings in (on or {}).items()}


def commands(script):
    """The simple commands of a shell script, as word lists (leading VAR=value assignments dropped)."""
    tokens, pending = [], ""
    for line in script.replace("\\\n", " ").splitlines():
        pending += line + "\n"
        lexer = shlex.shlex(pending, posix=True, punctuation_chars=True)
        lexer.whitespace_split = True
        try:
            tokens += list(lexer) + [";"]
        except ValueError:  # a quote still open: the command goes on on the next line
            continue
        pending = ""
    words = []
    for token in tokens + pending.split() + [";"]:
        if token and set(token) <= set("();<>|&"):
            while words and (re.match(r"^[A-Za-z_]\w*=", words[0]) or words[0] in SHELL_KEYWORDS):
                words.pop(0)
            if words:
                yield words
            words = []
        else:
            words.append(token)


def expand_matrix(script, job):
    """One script per value of each ${{ matrix.X }} it uses (values from the job's strategy)."""
    matrix = (job.get("strategy") or {}).get("matrix") or {}
    scripts = [script]
    for name in sorted(set(MATRIX_REF.findall(script))):
        values = matrix.get(name)
        if not isinstance(values, list):
            raise KeyError(name)
        pattern = re.compile(r"\$\{\{\s*matrix\.%s\s*\}\}" % re.escape(name))
        scripts = [pattern.sub(str(value), s) for s in scripts for value in values]
    return scripts


def check_command(words, where, problems, checked):
    """The repository names a command uses: make targets, playbooks, subcommands, paths, scenarios."""
    program = os.path.basename(words[0])
    args = words[1:]
    if program == "make":
        for target in [a for a in args if not a.startswith("-") and "=" not in a]:
            checked.add("make " + target)
            if target not in make_targets():
                problems.append("%s: `make %s`: no such target in the Makefile" % (where, target))
    elif program == "ansible-playbook":
        playbooks = [a for i, a in enumerate(args) if a.endswith((".yml", ".yaml"))
                     and (i == 0 or args[i - 1] not in ("-i", "--inventory", "-e", "--extra-vars"))]
        if not playbooks:
            problems.append("%s: ansible-playbook without a playbook path" % where)
        for playbook in playbooks:
            checked.add(playbook)
            if not os.path.isfile(os.path.join(ROOT, playbook)):
                problems.append("%s: ansible-playbook %s: no such playbook in the repository" % (where, playbook))
    elif program.startswith("python") and args[:1] == ["-m"] and len(args) > 1:
        module, rest = args[1], args[2:]
        if module == "ext4audit":
            sub = rest[0] if rest else ""
            checked.add("ext4audit " + sub)
            if sub not in ext4audit_subcommands():
                problems.append("%s: `python -m ext4audit %s`: no such subcommand" % (where, sub))
        elif module == "pytest":
            for path in [a.split("::")[0] for a in rest if not a.startswith("-")]:
                checked.add("pytest " + path)
                if not os.path.exists(os.path.join(ROOT, path)):
                    problems.append("%s: pytest %s: no such test path" % (where, path))
    elif program == "molecule":
        for i, arg in enumerate(args[:-1]):
            if arg in ("-s", "--scenario-name"):
                checked.add("molecule " + args[i + 1])
                if args[i + 1] not in molecule_scenarios():
                    problems.append("%s: molecule -s %s: no molecule/%s/molecule.yml" % (where, args[i + 1], args[i + 1]))


def workflow_problems(name, text):
    """Everything wrong with one workflow, as readable lines; also the repository names it runs."""
    problems, checked = [], set()
    doc = yaml.safe_load(text)
    if "pull_request_target" in triggers(doc):
        problems.append("%s: pull_request_target runs with the base repository's token and secrets" % name)
    for event in ("push", "pull_request"):
        for path in triggers(doc).get(event, {}).get("paths", []):
            if not re.search(r"[*?\[!]", path) and not os.path.exists(os.path.join(ROOT, path)):
                problems.append("%s: %s paths: %s does not exist, so the trigger never fires" % (name, event, path))
    top = doc.get("permissions")
    if "permissions" not in doc:
        problems.append("%s: no top-level permissions block (the default token may write)" % name)
    elif not isinstance(top, dict) or any(value not in ("read", "none") for value in top.values()):
        problems.append("%s: top-level permissions must be {} or read-only, got %r" % (name, top))
    for key, value in (doc.get("env") or {}).items():
        if "secrets." in str(value) or "github.token" in str(value):
            problems.append("%s: workflow-level env %s carries a secret to every step" % (name, key))
    jobs = doc.get("jobs") or {}
    if "concurrency" not in doc and not all("concurrency" in job for job in jobs.values()):
        problems.append("%s: no concurrency group" % name)
    for line in text.splitlines():
        match = re.match(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", line)
        if match and not match.group(1).startswith(("./", "docker://")):
            if not SHA_PIN.match(match.group(1)):
                problems.append("%s: %s is not pinned to a full commit SHA" % (name, match.group(1)))
            elif not re.match(r"\s+#\s*v\d", match.group(2)):
                problems.append("%s: %s has no `# vX.Y.Z` comment naming the version" % (name, match.group(1)))
    for job_id, job in jobs.items():
        where = "%s: job %s" % (name, job_id)
        if "timeout-minutes" not in job:
            problems.append("%s: no timeout-minutes" % where)
        steps = job.get("steps") or []
        uploads_sarif = any(str(step.get("uses", "")).startswith("github/codeql-action/upload-sarif@")
                            for step in steps)
        perms = job.get("permissions")
        if perms == "write-all":
            problems.append("%s: permissions write-all" % where)
        security_write = isinstance(perms, dict) and perms.get("security-events") == "write"
        if uploads_sarif and not security_write:
            problems.append("%s: uploads SARIF without security-events: write" % where)
        if security_write and not uploads_sarif:
            problems.append("%s: has security-events: write but uploads no SARIF" % where)
        for key, value in (job.get("env") or {}).items():
            if "secrets." in str(value) or "github.token" in str(value):
                problems.append("%s: job-level env %s carries a secret to every step" % (where, key))
        for number, step in enumerate(steps, 1):
            script = step.get("run")
            if script is None:
                continue
            step_where = "%s step %d (%s)" % (where, number, step.get("name") or script.splitlines()[0])
            if UNTRUSTED_IN_RUN.search(script):
                problems.append("%s: ${{ inputs.* / github.event.* }} inside run: (pass it through env:)"
                                % step_where)
            try:
                scripts = expand_matrix(script, job)
            except KeyError as missing:
                problems.append("%s: matrix.%s is not in the job's matrix" % (step_where, missing.args[0]))
                continue
            for expanded in scripts:
                for words in commands(expanded):
                    check_command(words, step_where, problems, checked)
    return problems, checked


def read(path):
    with open(path) as handle:
        return handle.read()


# ---- the tests --------------------------------------------------------------------------------

def test_the_four_workflows_are_there():
    assert {os.path.basename(p) for p in WORKFLOWS} == EXPECTED_WORKFLOWS


@pytest.mark.parametrize("path", WORKFLOWS, ids=os.path.basename)
def test_workflow_structure(path):
    problems, checked = workflow_problems(os.path.basename(path), read(path))
    assert not problems, "\n".join(problems)
    assert checked, "no make/ansible-playbook/pytest/molecule command recognised in %s" % path


def test_workflows_run_what_the_suite_runs():
    checked = set()
    for path in WORKFLOWS:
        checked |= workflow_problems(os.path.basename(path), read(path))[1]
    # The commands the issue names, recognised (so the checks above are not vacuous).
    for expected in ("make lint", "make test-deps", "pytest tests/unit", "playbooks/audit.yml",
                     "playbooks/ami_precheck.yml", "make vm-kernel-gate"):
        assert expected in checked, "%s not found among the workflows' commands: %s" % (expected, sorted(checked))
    # Every Molecule scenario of the repository runs in ci.yml.
    missing = {"molecule " + s for s in molecule_scenarios()} - checked
    assert not missing, "Molecule scenarios that ci.yml does not run: %s" % sorted(missing)
    # Every test folder runs in ci.yml (tests/fleet is `molecule test` of each scenario, run above).
    folders = {os.path.basename(os.path.dirname(p)) for p in glob.glob(os.path.join(ROOT, "tests", "*", "test_*.py"))}
    missing = {"pytest tests/" + f for f in folders - {"fleet"}} - checked
    assert not missing, "test folders that ci.yml does not run: %s" % sorted(missing)


BAD_WORKFLOW = """
name: bad
on:
  pull_request_target:
  push:
    paths: [testhosts/no_such_file.yml]
jobs:
  scan:
    runs-on: ubuntu-24.04
    permissions:
      security-events: write
    env:
      TOKEN: ${{ secrets.DEPLOY_TOKEN }}
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.pull_request.title }}"
      - run: make setup no-such-target && .venv/bin/ansible-playbook -i inventories/local playbooks/no_such.yml
      - run: |
          .venv/bin/python -m ext4audit no-such-command reports/latest
          .venv/bin/python -m pytest tests/unit tests/no_such_dir
      - run: .venv/bin/molecule test -s "${{ matrix.scenario }}"
  sarif:
    runs-on: ubuntu-24.04
    timeout-minutes: 5
    strategy:
      matrix:
        scenario: [default, no-such-scenario]
    steps:
      - uses: github/codeql-action/upload-sarif@8aad20d150bbac5944a9f9d289da16a4b0d87c1e
        with: {sarif_file: x.sarif}
      - run: PATH="$PWD/.venv/bin:$PATH" .venv/bin/molecule test -s "${{ matrix.scenario }}"
"""


@pytest.mark.parametrize("expected", [
    "pull_request_target runs with",
    "push paths: testhosts/no_such_file.yml does not exist",
    "no top-level permissions block",
    "no concurrency group",
    "job scan: no timeout-minutes",
    "job scan: has security-events: write but uploads no SARIF",
    "job sarif: uploads SARIF without security-events: write",
    "job-level env TOKEN carries a secret",
    "actions/checkout@v4 is not pinned",
    "upload-sarif@8aad20d150bbac5944a9f9d289da16a4b0d87c1e has no `# vX.Y.Z` comment",
    "${{ inputs.* / github.event.* }} inside run:",
    "`make no-such-target`: no such target",
    "ansible-playbook playbooks/no_such.yml: no such playbook",
    "`python -m ext4audit no-such-command`: no such subcommand",
    "pytest tests/no_such_dir: no such test path",
    "matrix.scenario is not in the job's matrix",
    "molecule -s no-such-scenario: no molecule/no-such-scenario/molecule.yml",
])
def test_a_bad_workflow_fails_each_check(expected):
    problems, checked = workflow_problems("bad.yml", BAD_WORKFLOW)
    assert any(expected in p for p in problems), "not reported: %r\nreported:\n%s" % (expected, "\n".join(problems))
    # What exists is not reported: `make setup`, `pytest tests/unit`, scenario default.
    assert {"make setup", "pytest tests/unit", "molecule default"} <= checked
    assert not any(s in p for p in problems for s in ("`make setup`", "tests/unit:", "-s default:"))


def actionlint_or_skip():
    if not os.access(ACTIONLINT, os.X_OK):
        if shutil.which("go") or os.access("/usr/local/go/bin/go", os.X_OK):
            pytest.fail("%s is missing though Go is here: `make test-deps` builds it" % ACTIONLINT)
        pytest.skip("no actionlint and no Go toolchain to build it (`make lint-deps` says why)")
    shellcheck = shutil.which("shellcheck")
    assert shellcheck, "shellcheck is missing (`make test-deps` installs it); actionlint would skip run: scripts"
    return [ACTIONLINT, "-no-color", "-shellcheck", shellcheck, "-config-file", ".github/actionlint.yaml"]


def test_actionlint_passes_on_every_workflow():
    # The files named, so no git checkout is needed to find them.
    rc, output = run_tool(actionlint_or_skip() + ["-verbose"] + [os.path.relpath(p, ROOT) for p in WORKFLOWS])
    assert rc == 0, "actionlint found problems:\n" + output
    assert "Linting %d files" % len(WORKFLOWS) in output, output
    assert 'Rule "shellcheck" was disabled' not in output, output


def test_actionlint_fails_a_bad_workflow(tmp_path):
    # The same settings (our runner labels) on a copy: an injection, an unknown runner label and an
    # unquoted variable (shellcheck SC2086) must each be reported; our own label must not.
    os.makedirs(tmp_path / ".github" / "workflows")
    shutil.copy(os.path.join(ROOT, ".github", "actionlint.yaml"), tmp_path / ".github" / "actionlint.yaml")
    (tmp_path / ".github" / "workflows" / "bad.yml").write_text("""
on: issues
permissions: {}
jobs:
  ours:
    runs-on: [self-hosted, linux, x64, ext4-root]
    steps:
      - run: echo "${{ github.event.issue.title }}"
  unknown:
    runs-on: [self-hosted, no-such-label]
    steps:
      - run: cat $FILE
""")
    rc, output = run_tool(actionlint_or_skip() + [".github/workflows/bad.yml"], cwd=str(tmp_path))
    assert rc == 1, output
    for expected in ('"github.event.issue.title" is potentially untrusted', 'label "no-such-label" is unknown',
                     "SC2086"):
        assert expected in output, "actionlint did not report %r:\n%s" % (expected, output)
    assert '"ext4-root" is unknown' not in output, output


def test_yamllint_passes_on_the_repository():
    rc, output = run_tool([YAMLLINT, "--strict", "-f", "parsable", "."])
    assert rc == 0, "yamllint found problems:\n" + output
    rc, listed = run_tool([YAMLLINT, "--list-files", "."])
    files = set(listed.split())
    # It reads the workflows, playbooks and rules, and skips what is generated or third-party.
    for expected in ["./.github/workflows/" + os.path.basename(p) for p in WORKFLOWS] + [
            "./.github/actionlint.yaml", "./playbooks/audit.yml", "./rules/catalog.yml"]:
        assert expected in files, "yamllint does not read %s" % expected
    skipped = [f for f in files if f.startswith(("./.venv/", "./.cache/", "./reports/", "./.git/"))]
    assert not skipped, "yamllint reads generated files: %s" % skipped[:5]


def test_yamllint_fails_bad_yaml(tmp_path):
    bad = tmp_path / "bad.yml"
    bad.write_text("---\nkey: 1\nkey: 2\nenabled: yes \nmode: 0644\n")
    rc, output = run_tool([YAMLLINT, "-c", os.path.join(ROOT, ".yamllint"), "-f", "parsable", str(bad)])
    assert rc == 1, output
    for rule in ("key-duplicates", "truthy", "trailing-spaces", "octal-values"):
        assert "(%s)" % rule in output, "yamllint did not report %s:\n%s" % (rule, output)
