"""No module of kernelcli imports a private module (or a private name) of another package.

A name starting with ``_`` belongs to the package that holds it: a private module
(``kernelcli.store._atomic``) may be imported only from inside its package, a private
name of a module (``run._executor._pad_rows``) only from that module's own package. What another package needs is
exported from that package's ``__init__``. ``kernelcli``'s own private modules
(``kernelcli._interrupt``, ``kernelcli._system``) are shared by every package inside it.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import kernelcli

ROOT = Path(kernelcli.__file__).parent



def _modules():
    for path in sorted(ROOT.rglob("*.py")):
        parts = path.relative_to(ROOT.parent).with_suffix("").parts
        is_package = parts[-1] == "__init__"
        name = ".".join(parts[:-1] if is_package else parts)
        package = name if is_package else name.rpartition(".")[0]
        yield name, package, ast.parse(path.read_text(), str(path))


def _targets(package: str, tree):
    """Every dotted name an import of ``tree`` reaches: modules and imported names."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield alias.name
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                module = ".".join(base + ([node.module] if node.module else []))
            else:
                module = node.module or ""
            for alias in node.names:
                yield f"{module}.{alias.name}"


def _is_module(dotted: list) -> bool:
    return ROOT.parent.joinpath(*dotted).with_suffix(".py").is_file()


def _allowed(package: str, target: str) -> bool:
    """Whether modules of ``package`` may import ``target``: a private module only from
    inside the package that holds it (or a package within it), a private name of a
    module only from that module's own package."""
    parts = target.split(".")
    for i, part in enumerate(parts):
        if not part.startswith("_") or part.startswith("__"):
            continue
        parent = parts[:i]
        if _is_module(parent):
            if package != ".".join(parent[:-1]):
                return False
        elif not (package == ".".join(parent) or package.startswith(".".join(parent) + ".")):
            return False
    return True


def private_imports():
    """``(module, target)`` for every import of a private name from outside its package."""
    for name, package, tree in _modules():
        for target in _targets(package, tree):
            if target.startswith("kernelcli") and not _allowed(package, target):
                yield name, target


def test_no_module_imports_a_private_name_of_another_package():
    new = sorted(set(private_imports()))
    assert not new, "private imports across packages:\n" + "\n".join(
        f"  {module}: {target}" for module, target in new)


def test_the_check_sees_a_private_import():
    tree = ast.parse("from ..store._atomic import x\nfrom .._progress import _duration\n"
                     "from ._compute import _pad_rows\nfrom .. import _interrupt\n")
    targets = list(_targets("kernelcli.run", tree))
    assert targets == ["kernelcli.store._atomic.x", "kernelcli._progress._duration",
                       "kernelcli.run._compute._pad_rows", "kernelcli._interrupt"]
    assert [_allowed("kernelcli.run", t) for t in targets] == [False, False, True, True]
    assert _allowed("kernelcli", "kernelcli._progress.format_duration")
    assert not _allowed("kernelcli.run", "kernelcli.solvers._cholesky.forward_substitution")


def h5py_importers():
    """Modules outside ``kernelcli.store`` and ``kernelcli.data`` that import h5py
    (at the top or lazily inside a function: every import in the AST counts)."""
    for name, package, tree in _modules():
        if name.split(".")[1:2] in (["store"], ["data"]):
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Import) and any(
                    a.name.split(".")[0] == "h5py" for a in node.names):
                yield name
            elif (isinstance(node, ast.ImportFrom) and not node.level
                  and (node.module or "").split(".")[0] == "h5py"):
                yield name


def test_only_the_store_and_data_import_h5py():
    found = sorted(set(h5py_importers()))
    assert not found, "h5py imported outside kernelcli.store and kernelcli.data:\n" + \
        "\n".join(f"  {m}" for m in found)


def test_every_module_basename_is_unique_and_says_what_it_holds():
    """One name per module: a basename used twice (``_group.py`` for the click group and
    the flip group) makes every mention of it ambiguous."""
    seen: dict = {}
    for path in sorted(ROOT.rglob("*.py")):
        if path.name != "__init__.py":
            seen.setdefault(path.name, []).append(str(path.relative_to(ROOT)))
    twice = {name: paths for name, paths in seen.items() if len(paths) > 1}
    assert not twice, twice


def import_cycles(graph) -> list:
    """The strongly connected sets of two or more modules of ``graph`` (grimp's import
    graph: every import, at module level, in a function or under TYPE_CHECKING)."""
    adjacent = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in graph.modules}
    index: dict = {}
    low: dict = {}
    stack: list = []
    on_stack: set = set()
    cycles = []
    for root in sorted(adjacent):  # Tarjan's algorithm, iteratively
        if root in index:
            continue
        work = [(root, iter(adjacent[root]))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(adjacent[child])))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                members = []
                while True:
                    m = stack.pop()
                    on_stack.discard(m)
                    members.append(m)
                    if m == node:
                        break
                if len(members) > 1:
                    cycles.append(sorted(members))
    return cycles


def test_no_module_imports_another_in_a_cycle():
    """Lazy (function-level) and type-only imports counted: a cycle is a pair of
    modules that cannot be understood, tested or moved apart. (The packages' floors
    are import-linter's contract in pyproject.toml, which .ci/run checks.)"""
    grimp = pytest.importorskip("grimp")
    assert import_cycles(grimp.build_graph("kernelcli")) == []


def test_the_cycle_check_sees_a_function_level_cycle():
    class Graph:
        modules = {"a", "b", "c"}

        @staticmethod
        def find_modules_directly_imported_by(m):
            return {"a": {"b"}, "b": {"a"}, "c": set()}[m]

    assert import_cycles(Graph()) == [["a", "b"]]
