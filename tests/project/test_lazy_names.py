"""A lazy package's names, as type checkers see them, are the names it loads.

``kernelcli.data``, ``kernelcli.pipeline`` and ``kernelcli.run`` load their names on
first use (``_LAZY``, PEP 562), which a type checker cannot follow: each also imports
them under ``if TYPE_CHECKING:``, so mypy checks the calls across packages. The two
lists are one fact written twice; this keeps them equal. (``kernelcli`` itself has no
such block: nothing inside the package imports its names.)
"""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

PACKAGES = ("kernelcli.data", "kernelcli.pipeline", "kernelcli.run")


def _type_checking_names(path: Path) -> dict:
    """name -> relative module of each ``from M import name as name`` under
    ``if TYPE_CHECKING:``."""
    tree = ast.parse(path.read_text(), str(path))
    found = {}
    for node in tree.body:
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for imp in node.body:
                assert isinstance(imp, ast.ImportFrom), ast.dump(imp)
                for alias in imp.names:
                    found[alias.asname or alias.name] = "." * imp.level + (imp.module or "")
    return found


@pytest.mark.parametrize("package", PACKAGES)
def test_type_checking_imports_are_the_lazy_names(package):
    module = importlib.import_module(package)
    assert _type_checking_names(Path(module.__file__)) == module._LAZY
