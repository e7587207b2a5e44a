"""House rules that import-linter does not check (docs/architecture.md, "The contracts"):
no import cycle anywhere in the project — imports inside functions and ``TYPE_CHECKING`` blocks
count — no folder of more than 15 modules, and no module of more than 400 lines.

Import-linter's contracts see the arrows between layers and packages; a cycle inside one package
(``a → b → a`` with both in ``onnxwrapper.diff``) passes them. This test parses every module of the
distribution with :mod:`ast` and finds the strongly connected components of the import graph
(Tarjan's algorithm).
"""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
tomllib = pytest.importorskip("tomllib")

MAX_MODULES_PER_FOLDER = 15
MAX_LINES_PER_MODULE = 400
#: folders of Python files that are not packages of the distribution but follow the same rules
OTHER_FOLDERS = ("tests", "benchmarks", "examples")


def project_modules(repo: Path = REPO) -> dict[str, Path]:
    """``{dotted module name: file}`` for every module the distribution installs (pyproject's
    ``packages``; a package's folder is its dotted name)."""
    config = tomllib.loads((repo / "pyproject.toml").read_text())["tool"]["setuptools"]
    modules = {}
    for package in config["packages"]:
        folder = repo / package.replace(".", "/")
        for path in folder.glob("*.py"):
            name = package if path.stem == "__init__" else f"{package}.{path.stem}"
            modules[name] = path
    return modules


def imported_modules(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project modules ``name`` imports anywhere in its file (module level, functions, classes,
    ``TYPE_CHECKING`` blocks). ``from package import name`` counts as importing the submodule when
    ``package.name`` is one, else the package; the implicit import of a module's parent package is
    not counted (every submodule has it)."""
    is_package = path.stem == "__init__"
    found = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        targets = []
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = name.split(".") if is_package else name.split(".")[:-1]
                base = base[:len(base) - (node.level - 1)]
                package = ".".join(base + ([node.module] if node.module else []))
            else:
                package = node.module or ""
            targets = [f"{package}.{alias.name}" if f"{package}.{alias.name}" in modules else package
                       for alias in node.names]
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def import_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (each a cycle), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles = []

    def visit(start: str) -> None:  # iterative Tarjan: no recursion limit on deep graphs
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    cycles.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(cycles)


def import_graph(repo: Path = REPO) -> dict[str, set[str]]:
    modules = project_modules(repo)
    return {name: imported_modules(name, path, modules) for name, path in modules.items()}


def test_the_project_has_no_import_cycle():
    cycles = import_cycles(import_graph())
    assert not cycles, "import cycles (function-level imports count):\n" + "\n".join(" ↔ ".join(c) for c in cycles)


def test_a_cycle_through_a_function_level_import_is_found(tmp_path):
    """The checker itself: a cycle closed by an import inside a function, and one through
    ``from package import module``, are both reported; an acyclic pair is not."""
    (tmp_path / "pyproject.toml").write_text('[tool.setuptools]\npackages = ["pkg"]\n')
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from pkg import b\n")
    (pkg / "b.py").write_text("def f():\n    from pkg.a import x\n")
    (pkg / "c.py").write_text("from . import d\n")
    (pkg / "d.py").write_text("import typing\nif typing.TYPE_CHECKING:\n    from .c import y\n")
    (pkg / "e.py").write_text("from pkg import a\n")
    assert import_cycles(import_graph(tmp_path)) == [["pkg.a", "pkg.b"], ["pkg.c", "pkg.d"]]


def _python_folders() -> list[Path]:
    folders = {path.parent for path in project_modules().values()}
    for top in OTHER_FOLDERS:
        folders |= {path.parent for path in (REPO / top).rglob("*.py") if "__pycache__" not in path.parts}
    return sorted(folders)


def test_no_folder_holds_more_than_15_modules():
    crowded = {str(f.relative_to(REPO)): n for f in _python_folders()
               if (n := len(list(f.glob("*.py")))) > MAX_MODULES_PER_FOLDER}
    assert not crowded, f"folders over {MAX_MODULES_PER_FOLDER} modules (split them by concept): {crowded}"


def test_no_module_is_over_400_lines():
    files = set(project_modules().values())
    for top in OTHER_FOLDERS:
        files |= {p for p in (REPO / top).rglob("*.py") if "__pycache__" not in p.parts}
    long = {str(p.relative_to(REPO)): n for p in sorted(files)
            if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_LINES_PER_MODULE}
    assert not long, f"modules over {MAX_LINES_PER_MODULE} lines (one concept per module): {long}"


if __name__ == "__main__":  # python tests/test_house_rules.py: list the cycles
    for cycle in import_cycles(import_graph()):
        print(" ↔ ".join(cycle))
    sys.exit(0)
