"""Packages whose names load on first use (PEP 562), so that importing one runs none of
its modules: ``import kernelcli`` imports neither jax nor h5py, and a library call loads
only what it computes with (importing every command cost a first call 0.14 s)."""

import importlib


def lazy_names(package: str, table: dict, namespace: dict):
    """``(__getattr__, __dir__)`` for ``package`` (its ``__name__``): each name of
    ``table`` is taken from its module (relative to the package; ``None``: the name is
    the package's submodule; ``(module, attribute)``: a name its module spells otherwise)
    on first use and kept in ``namespace`` (its globals)."""

    def getattr_(name):
        if name not in table:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, attribute = (table[name] if isinstance(table[name], tuple)
                             else (table[name], name))
        value = (importlib.import_module(f".{name}", package) if module is None
                 else getattr(importlib.import_module(module, package), attribute))
        namespace[name] = value
        return value

    def dir_():
        return sorted(set(namespace) | set(table))

    return getattr_, dir_
