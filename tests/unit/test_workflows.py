"""The GitHub Actions workflows (.github/workflows/): actionlint (with shellcheck), yamllint and
zizmor pass; least privilege; no untrusted input spliced into run: scripts; third-party actions
pinned to a commit and container images to a digest; secrets only in jobs behind an environment,
on runners no pull-request job uses; and every make target, playbook, `python -m ext4audit`
subcommand, pytest path and Molecule scenario they run exists in this repository, so what runs in
GitHub is what this suite runs. Each check is also shown failing on a deliberately bad workflow.
"""

import functools
import glob
import json
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
ZIZMOR = os.path.join(VENV_BIN, "zizmor")
SHA_PIN = re.compile(r"^[\w.-]+/[\w./-]+@[0-9a-f]{40}$")
DIGEST_PIN = re.compile(r"@sha256:[0-9a-f]{64}$")
# A secret other than the job's own GITHUB_TOKEN.
SECRET_REF = re.compile(r"\bsecrets\.(?!GITHUB_TOKEN\b)([\w-]+)")
# Labels every runner of ours has; the others say which machines a job may land on.
COMMON_RUNNER_LABELS = {"self-hosted", "linux", "x64"}
# Self-hosted runners that hold a key of their own, whatever the workflow passes them.
RUNNERS_WITH_KEYS = {"ext4-fleet"}  # the fleet's SSH key (nightly-scan.yml)
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


def expand_matrix(script, step, job):
    """One script per value of each matrix.X it uses (values from the job's strategy), directly as
    ${{ matrix.X }} or through the step's env (NAME: ${{ matrix.X }}, used as $NAME)."""
    for variable, value in (step.get("env") or {}).items():
        if MATRIX_REF.fullmatch(str(value)):
            script = re.sub(r"\$(\{%s\}|%s\b)" % (variable, variable), lambda _: value, script)
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
    elif program == "ext4audit" and args[:1] == ["run"]:  # ansible-playbook with the gate's exit codes
        checked.add("ext4audit run")
        check_command(["ansible-playbook"] + [a for a in args[1:] if a != "--"], where, problems, checked)
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
        if match and match.group(1).startswith("docker://"):
            if not DIGEST_PIN.search(match.group(1)):
                problems.append("%s: %s is not pinned by digest (@sha256:...)" % (name, match.group(1)))
        elif match and not match.group(1).startswith("./"):
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
        for image in container_images(job):
            if not DIGEST_PIN.search(image):
                problems.append("%s: container image %s is not pinned by digest (@sha256:...)" % (where, image))
        secrets = secrets_read(job)
        if secrets and "environment" not in job:
            problems.append("%s: reads secrets.%s with no environment: (its protection rules guard them)"
                            % (where, ", secrets.".join(secrets)))
        for number, step in enumerate(steps, 1):
            script = step.get("run")
            if script is None:
                continue
            step_where = "%s step %d (%s)" % (where, number, step.get("name") or script.splitlines()[0])
            if UNTRUSTED_IN_RUN.search(script):
                problems.append("%s: ${{ inputs.* / github.event.* }} inside run: (pass it through env:)"
                                % step_where)
            try:
                scripts = expand_matrix(script, step, job)
            except KeyError as missing:
                problems.append("%s: matrix.%s is not in the job's matrix" % (step_where, missing.args[0]))
                continue
            for expanded in scripts:
                for words in commands(expanded):
                    check_command(words, step_where, problems, checked)
    return problems, checked


def secrets_read(job):
    """The names of the secrets a job reads, other than its own GITHUB_TOKEN."""
    return sorted(set(SECRET_REF.findall(json.dumps(job, default=str))))


def container_images(job):
    """The images a job runs in: its container and its services (a string or {image: ...})."""
    images = [job.get("container")] + list((job.get("services") or {}).values())
    return [str(c.get("image") if isinstance(c, dict) else c) for c in images if c]


def self_hosted_labels(job):
    """The labels that choose among our self-hosted runners; empty for a GitHub-hosted runner."""
    runs_on = job.get("runs-on")
    if isinstance(runs_on, dict):
        runs_on = runs_on.get("labels") or []
    labels = set([runs_on] if isinstance(runs_on, str) else runs_on or [])
    return labels - COMMON_RUNNER_LABELS if "self-hosted" in labels else set()


def runner_problems(docs):
    """A job that holds a secret (or runs on a runner with a key of its own) must not share a
    self-hosted runner label with a pull-request job: a same-repository pull request runs its own
    code there, as root, and could read or leave behind whatever the next job on that machine uses.
    docs: {workflow file name: parsed workflow}."""
    pull_request_labels = {}
    for name, doc in docs.items():
        if "pull_request" in triggers(doc):
            for job_id, job in (doc.get("jobs") or {}).items():
                for label in self_hosted_labels(job):
                    pull_request_labels.setdefault(label, "%s: job %s" % (name, job_id))
    problems = []
    for name, doc in docs.items():
        for job_id, job in (doc.get("jobs") or {}).items():
            labels = self_hosted_labels(job)
            if not (secrets_read(job) or "environment" in job or labels & RUNNERS_WITH_KEYS):
                continue
            for label in sorted(labels & set(pull_request_labels)):
                problems.append("%s: job %s holds a secret on runner label %s, which pull-request code "
                                "also runs on (%s)" % (name, job_id, label, pull_request_labels[label]))
    return problems


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


def test_secrets_stay_off_the_runners_pull_requests_use():
    docs = {os.path.basename(p): yaml.safe_load(read(p)) for p in WORKFLOWS}
    problems = runner_problems(docs)
    assert not problems, "\n".join(problems)
    # Not vacuous: pull requests do run on ext4-root, and the SSH key's job is found, behind its
    # environment, on a runner of its own.
    assert self_hosted_labels(docs["ci.yml"]["jobs"]["integration"]) == {"ext4-root"}
    precheck = docs["ami-precheck.yml"]["jobs"]["precheck"]
    assert secrets_read(precheck) == ["AMI_PRECHECK_SSH_KEY"]
    assert precheck.get("environment") and self_hosted_labels(precheck) == {"ext4-root-trusted"}


def test_a_secret_on_a_pull_request_runner_is_reported():
    # As the workflows were: the key's job on ext4-root, where ci.yml runs pull requests; also a
    # pull-request job on the fleet runner. A secret on a GitHub-hosted runner (a new VM for each
    # job) and a pull-request job on GitHub-hosted runners are not reported.
    docs = {
        "ci.yml": yaml.safe_load("""
on: [push, pull_request]
jobs:
  integration: {runs-on: [self-hosted, linux, x64, ext4-root]}
  fleet: {runs-on: [self-hosted, ext4-fleet]}
  lint: {runs-on: ubuntu-24.04}
"""),
        "precheck.yml": yaml.safe_load("""
on: workflow_dispatch
jobs:
  precheck:
    runs-on: [self-hosted, linux, x64, ext4-root]
    steps: [{run: make setup, env: {KEY: "${{ secrets.AMI_PRECHECK_SSH_KEY }}"}}]
  hosted:
    runs-on: ubuntu-24.04
    steps: [{run: make setup, env: {KEY: "${{ secrets.OTHER_KEY }}"}}]
"""),
    }
    assert sorted(runner_problems(docs)) == [
        "ci.yml: job fleet holds a secret on runner label ext4-fleet, which pull-request code also runs on"
        " (ci.yml: job fleet)",
        "precheck.yml: job precheck holds a secret on runner label ext4-root, which pull-request code also"
        " runs on (ci.yml: job integration)",
    ]


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
      - uses: docker://alpine:3.20
      - run: echo "${{ github.event.pull_request.title }}"
      - run: make setup no-such-target && .venv/bin/ansible-playbook -i inventories/local playbooks/no_such.yml
      - run: |
          .venv/bin/python -m ext4audit no-such-command reports/latest
          .venv/bin/python -m pytest tests/unit tests/no_such_dir
      - run: .venv/bin/molecule test -s "${{ matrix.scenario }}"
  sarif:
    runs-on: ubuntu-24.04
    container: debian:12
    services:
      sshd: {image: "debian:12@sha256:6ebd97fa83deb272194a2cf015b3d26a4d538e9ad3a7a79d544c8af5b0a01443"}
    timeout-minutes: 5
    strategy:
      matrix:
        scenario: [default, no-such-scenario]
    steps:
      - uses: github/codeql-action/upload-sarif@8aad20d150bbac5944a9f9d289da16a4b0d87c1e
        with: {sarif_file: x.sarif}
      - env: {SCENARIO: "${{ matrix.scenario }}"}
        run: PATH="$PWD/.venv/bin:$PATH" .venv/bin/molecule test -s "$SCENARIO"
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
    "job scan: reads secrets.DEPLOY_TOKEN with no environment:",
    "job sarif: container image debian:12 is not pinned by digest",
    "docker://alpine:3.20 is not pinned by digest",
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
    assert not any(s in p for p in problems for s in ("`make setup`", "tests/unit:", "-s default:", "sha256:6ebd"))


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


def zizmor(path, cwd=ROOT):
    """zizmor as `make lint` runs it (the auditor persona, offline, .github/zizmor.yml found from
    the path): its exit code, its findings (JSON) and its log."""
    result = subprocess.run([ZIZMOR, "--offline", "--persona=auditor", "--no-progress", "--format=json", path],
                            cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=300)
    return result.returncode, json.loads(result.stdout or b"[]"), result.stderr.decode(errors="replace")


def finding_lines(findings):
    """One line for each finding: rule, file:line, what it says."""
    lines = []
    for finding in findings:
        for location in finding["locations"]:
            if location["symbolic"]["kind"] == "Primary":
                lines.append("%s %s:%d %s" % (finding["ident"], location["symbolic"]["key"]["Local"]["verbatim_path"],
                                              location["concrete"]["location"]["start_point"]["row"] + 1,
                                              location["symbolic"]["annotation"]))
    return lines


def test_zizmor_passes_on_every_workflow():
    rc, findings, log = zizmor(".github/workflows")
    assert rc == 0 and not findings, "zizmor found problems:\n" + "\n".join(finding_lines(findings)) + log
    for path in WORKFLOWS:
        assert "completed %s" % os.path.relpath(path, ROOT) in log, log
        # What it was told to ignore, it was told why.
        for number, line in enumerate(read(path).splitlines(), 1):
            match = re.search(r"#\s*zizmor:\s*ignore\[[^\]]*\](.*)", line)
            assert not match or len(match.group(1).split()) >= 2, \
                "%s:%d: a zizmor ignore without its reason: %s" % (path, number, line.strip())


def test_zizmor_fails_a_bad_workflow(tmp_path):
    # With our settings (.github/zizmor.yml) on a copy: the findings of the issue and the other
    # rules the workflows are held to are each reported.
    os.makedirs(tmp_path / ".github" / "workflows")
    shutil.copy(os.path.join(ROOT, ".github", "zizmor.yml"), tmp_path / ".github" / "zizmor.yml")
    (tmp_path / ".github" / "workflows" / "bad.yml").write_text("""
on: pull_request
jobs:
  build:
    runs-on: [self-hosted, linux, x64, ext4-root]
    container: debian:12
    steps:
      - uses: actions/checkout@v4
      - run: echo "${{ github.event.pull_request.title }}"
      - env:
          KEY: ${{ secrets.AMI_PRECHECK_SSH_KEY }}
        run: make setup
""")
    rc, findings, log = zizmor(".github/workflows", cwd=str(tmp_path))
    assert rc != 0, log
    reported = {finding["ident"] for finding in findings}
    for expected in ("secrets-outside-env", "unpinned-images", "self-hosted-runner", "unpinned-uses",
                     "template-injection", "artipacked", "excessive-permissions", "concurrency-limits"):
        assert expected in reported, "zizmor did not report %s:\n%s" % (expected, "\n".join(finding_lines(findings)))


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
