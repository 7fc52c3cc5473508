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
