"""Host data never reaches a shell: no shell=True, no string commands, no shell-running helpers in
the project's Python (read with ast, so comments and strings that merely mention them do not
count), and no `shell`/`raw` tasks, templated string `command`s or `pipe` lookups in its Ansible
YAML (read with line numbers). A failure lists every location.

The checkers are tested on small samples first, so a checker that finds nothing cannot pass."""

import ast
import os

import yaml

from conftest import ROOT

SKIP_DIRS = ("reports",)  # output; dot-directories (.venv, .git, .cache) are skipped too
SUBPROCESS_CALLS = {"run", "call", "check_call", "check_output", "Popen"}
ALWAYS_SHELL = {("os", "system"), ("os", "popen"), ("subprocess", "getoutput"), ("subprocess", "getstatusoutput"),
                ("asyncio", "create_subprocess_shell")}
EXEC_FAMILY = ("execl", "execle", "execlp", "execlpe", "execv", "execve", "execvp", "execvpe",
               "spawnl", "spawnle", "spawnlp", "spawnlpe", "spawnv", "spawnve", "spawnvp", "spawnvpe")
SHELL_MODULES = {"shell", "ansible.builtin.shell", "ansible.legacy.shell", "raw", "ansible.builtin.raw",
                 "ansible.legacy.raw", "script", "ansible.builtin.script", "ansible.legacy.script"}
COMMAND_MODULES = {"command", "ansible.builtin.command", "ansible.legacy.command", "expect", "ansible.builtin.expect"}


def project_files(suffixes):
    for folder, dirs, files in os.walk(ROOT):
        dirs[:] = sorted(d for d in dirs if not d.startswith(".") and
                         not (folder == ROOT and d in SKIP_DIRS))
        for name in sorted(files):
            if name.endswith(suffixes):
                yield os.path.join(folder, name)


# ------------------------------------------------------------------ Python
def _dotted(node):
    """'subprocess.run' for subprocess.run, 'run' for a bare name, None otherwise."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        inner = _dotted(node.value)
        return "%s.%s" % (inner, node.attr) if inner else node.attr
    return None


def _is_string_expr(node):
    """A command given as a string: a literal, an f-string, '%' or '+' formatting, .format()/.join()."""
    if isinstance(node, ast.Constant) and isinstance(node.value, (str, bytes)):
        return True
    if isinstance(node, ast.JoinedStr):
        return True
    if isinstance(node, ast.BinOp) and isinstance(node.op, (ast.Mod, ast.Add)):
        return _is_string_expr(node.left) or _is_string_expr(node.right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in ("format", "join"):
        return _is_string_expr(node.func.value)
    return False


def python_offences(source, path="<sample>"):
    offences = []
    for node in ast.walk(ast.parse(source, path)):
        if not isinstance(node, ast.Call):
            continue
        name = _dotted(node.func) or ""
        parts = tuple(name.split("."))
        where = "%s:%d" % (os.path.relpath(path, ROOT) if path != "<sample>" else path, node.lineno)
        keywords = dict((k.arg, k.value) for k in node.keywords if k.arg)
        command = node.args[0] if node.args else keywords.get("args") or keywords.get("cmd")
        if parts[-2:] in ALWAYS_SHELL:
            offences.append("%s: %s() always runs a shell" % (where, name))
        elif parts[-1] in EXEC_FAMILY and parts[0] == "os":
            if node.args and isinstance(node.args[0], ast.Constant) and node.args[0].value in ("/bin/sh", "sh", "bash"):
                offences.append("%s: %s() of a shell" % (where, name))
        elif parts[-1] in SUBPROCESS_CALLS and (parts[0] == "subprocess" or len(parts) == 1):
            shell = keywords.get("shell")
            if shell is not None and not (isinstance(shell, ast.Constant) and shell.value in (False, None)):
                offences.append("%s: %s(shell=...) " % (where, name))
            if command is not None and _is_string_expr(command):
                offences.append("%s: %s() with a string command (give an argument list)" % (where, name))
        elif parts[-1] == "run_command":  # AnsibleModule.run_command
            unsafe = keywords.get("use_unsafe_shell")
            if unsafe is not None and not (isinstance(unsafe, ast.Constant) and unsafe.value in (False, None)):
                offences.append("%s: run_command(use_unsafe_shell=...)" % where)
            if command is not None and _is_string_expr(command):
                offences.append("%s: run_command() with a string command (give an argument list)" % where)
    return offences


# ------------------------------------------------------------------ Ansible YAML
class _Loader(yaml.SafeLoader):
    """Compose only (no constructors), so Ansible's tags (!vault, !unsafe) do not matter."""


def _walk(node, path, offences):
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            name = key.value if isinstance(key, yaml.ScalarNode) else None
            where = "%s:%d" % (path, key.start_mark.line + 1)
            if name in SHELL_MODULES:
                offences.append("%s: %s task (runs a shell; use ansible.builtin.command with argv)" % (where, name))
            elif name in COMMAND_MODULES:
                text = value.value if isinstance(value, yaml.ScalarNode) else None
                if isinstance(value, yaml.MappingNode):
                    for sub_key, sub_value in value.value:
                        if sub_key.value in ("cmd", "_raw_params", "command") and isinstance(sub_value, yaml.ScalarNode):
                            text = sub_value.value
                if text is not None and "{{" in text:
                    offences.append("%s: %s with a templated string command (give argv, a list)" % (where, name))
            _walk(value, path, offences)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            _walk(item, path, offences)
    elif isinstance(node, yaml.ScalarNode) and isinstance(node.value, str):
        compact = node.value.replace(" ", "").replace('"', "'")
        if "lookup('pipe'" in compact or "query('pipe'" in compact or "q('pipe'" in compact:
            offences.append("%s:%d: a pipe lookup (runs a shell on the controller)" % (path, node.start_mark.line + 1))


def yaml_offences(text, path="<sample>"):
    offences = []
    for document in yaml.compose_all(text, Loader=_Loader):
        _walk(document, path, offences)
    return offences


ANSIBLE_DIRS = ("playbooks", "roles", "molecule", "testhosts", "inventories")


# ------------------------------------------------------------------ the checkers on samples
def test_python_checker_finds_each_form():
    sample = "\n".join([
        "import os, subprocess, asyncio",
        "subprocess.run('ls ' + path, shell=True)",              # 2: shell=True and a string
        "subprocess.check_output(f'dumpe2fs -h {dev}')",         # 3: f-string
        "subprocess.Popen('mount %s' % dev)",                    # 4: % formatting
        "os.system('umount ' + target)",                         # 5
        "os.popen('losetup -a')",                                # 6
        "module.run_command('dumpe2fs -h %s' % dev)",            # 7
        "module.run_command(['ls'], use_unsafe_shell=True)",     # 8
        "subprocess.run(['ls', path])",                          # fine
        "subprocess.run(argv, shell=False)",                     # fine
        "os.execv('/bin/sh', ['sh', '-c', cmd])",                # 11
        "subprocess.getoutput('id')",                            # 12
        "asyncio.create_subprocess_shell(cmd)",                  # 13
        "run(' '.join(argv))",                                   # 14: a bare run() helper with a joined string
        "subprocess.run(args='ls -l')",                          # 15
    ])
    lines = sorted(set(int(o.split(":")[1]) for o in python_offences(sample)))
    assert lines == [2, 3, 4, 5, 6, 7, 8, 11, 12, 13, 14, 15], python_offences(sample)


def test_yaml_checker_finds_each_form():
    sample = "\n".join([
        "- name: a",                                                  # 1
        "  ansible.builtin.shell: dumpe2fs -h {{ dev }}",              # 2
        "- name: b",                                                  # 3
        "  command: umount {{ item.mountpoint }}",                    # 4
        "- name: c",                                                  # 5
        "  ansible.builtin.command:",                                 # 6
        "    cmd: losetup -d {{ loop }}",                             # 7 (reported at the module key, 6)
        "- name: d",                                                  # 8
        "  ansible.builtin.command:",                                 # 9: fine, argv
        "    argv: [ls, '{{ path }}']",                               # 10
        "- name: e",                                                  # 11
        "  ansible.builtin.debug:",                                   # 12
        "    msg: \"{{ lookup('pipe', 'id ' ~ user) }}\"",            # 13
        "- name: f",                                                  # 14
        "  raw: echo hi",                                             # 15
        "- name: g",                                                  # 16
        "  command: /usr/bin/true",                                   # 17: fine, nothing templated
    ])
    lines = sorted(int(o.split(":")[1]) for o in yaml_offences(sample))
    assert lines == [2, 4, 6, 13, 15], yaml_offences(sample)


# ------------------------------------------------------------------ the project
def test_no_shell_or_string_command_in_python():
    offences, checked = [], 0
    for path in project_files((".py",)):
        with open(path, encoding="utf-8") as handle:
            offences += python_offences(handle.read(), path)
        checked += 1
    assert checked >= 30, "found only %d Python files: is ROOT right?" % checked
    assert offences == [], "host data could reach a shell:\n" + "\n".join(offences)


def test_no_shell_task_or_templated_string_command_in_ansible_yaml():
    offences, checked = [], 0
    for folder in ANSIBLE_DIRS:
        for path in project_files((".yml", ".yaml")):
            if not path.startswith(os.path.join(ROOT, folder) + os.sep):
                continue
            with open(path, encoding="utf-8") as handle:
                offences += yaml_offences(handle.read(), os.path.relpath(path, ROOT))
            checked += 1
    assert checked >= 20, "found only %d YAML files" % checked
    assert offences == [], "host data could reach a shell:\n" + "\n".join(offences)
