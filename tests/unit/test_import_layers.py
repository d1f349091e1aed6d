"""The controller package's modules import each other one way: no module reaches back, even through
an import inside a function (a cycle such as cli -> run -> forkserver -> cli makes every layer
depend on every other), and each layer folder imports only the layers below it (docs/architecture.md).
The `ext4audit` command starts in one plain function a newcomer finds from the package metadata."""

import ast
import os
import tomllib

from conftest import ROOT

PACKAGE = "ext4audit"
# The layers, lowest first, as docs/architecture.md draws them: a module imports its own layer and
# those before it. "ext4audit" is the package's __init__ (the facts every layer shares).
LAYERS = ("ext4audit", "parsers", "model", "rules", "probe", "report", "store", "formats", "steps", "cli", "__main__")


def module_files():
    """{module name: path} of every module of the package (its subpackages too, links followed)."""
    found = {}
    top = os.path.join(ROOT, PACKAGE)
    for folder, _dirs, files in os.walk(top, followlinks=True):
        for name in files:
            if name.endswith(".py"):
                parts = os.path.relpath(os.path.join(folder, name), ROOT)[:-3].split(os.sep)
                found[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = os.path.join(folder, name)
    return found


def imports(module, path, modules):
    """The package's modules that `module` imports anywhere in its code (top level or in a function)."""
    with open(path, encoding="utf-8") as handle:
        tree = ast.parse(handle.read(), path)
    package = module if path.endswith("__init__.py") else module.rpartition(".")[0]
    found = set()
    for node in walk_runtime(tree):
        if isinstance(node, ast.Import):
            names = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                base = ".".join(package.split(".")[:len(package.split(".")) - node.level + 1] + ([base] if base else []))
            # `from . import x`: the submodule x when there is one, else a name of the package itself
            names = [base + "." + alias.name if base + "." + alias.name in modules else base for alias in node.names]
        else:
            continue
        for name in names:
            while name and name not in modules:  # a.b.c of which only a.b is a module
                name = name.rpartition(".")[0]
            if name and name != module:
                found.add(name)
    return found


def walk_runtime(tree):
    """ast.walk without the `if TYPE_CHECKING:` blocks: imports for annotations only run no code."""
    pending = [tree]
    while pending:
        node = pending.pop()
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            pending.extend(node.orelse)
            continue
        yield node
        pending.extend(ast.iter_child_nodes(node))


def layer_of(module):
    """A module's layer: its folder under the package, or the package's own modules."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else parts[0]


def import_graph():
    modules = module_files()
    return {module: imports(module, path, modules) for module, path in modules.items()}


def cycles(graph):
    """Each set of modules that import each other, directly or around (Tarjan's strongly connected
    components of more than one module)."""
    index, low, stack, on_stack, found = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_the_finder_sees_imports_inside_functions():
    graph = import_graph()
    assert "ext4audit.cli.commands" in graph["ext4audit.__main__"]  # imported inside main(), only when not forwarded
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]


def test_no_module_of_the_controller_imports_back():
    assert cycles(import_graph()) == []


def test_the_command_starts_in_a_plain_main():
    with open(os.path.join(ROOT, "pyproject.toml"), "rb") as handle:
        script = tomllib.load(handle)["project"]["scripts"]["ext4audit"]
    assert script == "ext4audit.__main__:main"



def upward_imports(graph):
    """Each "module -> target" where the target's layer is above the module's."""
    return ["%s -> %s" % (module, target) for module, targets in sorted(graph.items()) for target in sorted(targets)
            if LAYERS.index(layer_of(target)) > LAYERS.index(layer_of(module))]


def test_each_layer_imports_only_the_layers_below_it():
    graph = import_graph()
    assert set(layer_of(module) for module in graph) <= set(LAYERS)  # a new folder gets its place
    assert upward_imports(graph) == []


def test_the_layer_check_sees_an_upward_import():
    graph = {"ext4audit.model.contract": {"ext4audit.report.reports"}, "ext4audit.cli.run": {"ext4audit.model"}}
    assert upward_imports(graph) == ["ext4audit.model.contract -> ext4audit.report.reports"]
