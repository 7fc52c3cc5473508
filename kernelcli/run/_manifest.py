"""The run package's view of a manifest: the schema itself is
:class:`kernelcli.store.Manifest`'s (the one place it lives); these are the two
questions the commands ask of a manifest they read."""

from __future__ import annotations

from ..plan import Geometry
from ..store import MANIFEST_FORMAT as FORMAT
from ..store import Manifest, result_attrs

__all__ = ["FORMAT", "check_manifest", "plan_from_manifest", "result_attrs"]


def check_manifest(manifest: dict, run_dir) -> dict:
    """``manifest`` itself when it describes a kernelcli run; else DamagedFileError."""
    return Manifest.check(manifest, run_dir).data


def plan_from_manifest(manifest: dict, run_dir) -> Geometry:
    """The geometry a (checked) manifest records: its blocks and batch; no jax, no data,
    and no memory figures (a run directory's readers need none)."""
    return Manifest.check(manifest, run_dir).geometry
