"""``manifest.json``: what a run directory holds, written once when the run starts.

The manifest is an opaque JSON object to the store (the CLI decides its content:
configuration, data fingerprints, plan). It is serialised with sorted keys so the
same run always gives the same bytes.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..errors import RunDirError
from ._atomic import create_exclusive, write_bytes_atomic

MANIFEST = "manifest.json"


def encode_manifest(manifest: dict) -> bytes:
    """The bytes of ``manifest``; raises ``TypeError`` before any file is touched."""
    if not isinstance(manifest, dict):
        raise TypeError(f"manifest must be a dict, got {type(manifest).__name__}")
    return (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode("utf-8")


def write_manifest(run_dir: Path, data: bytes) -> None:
    write_bytes_atomic(Path(run_dir) / MANIFEST, data)


def create_manifest(run_dir: Path, data: bytes) -> bool:
    """Write the manifest unless one exists (race-free); whether this call wrote it."""
    return create_exclusive(Path(run_dir) / MANIFEST, data)


def read_manifest(run_dir: Path) -> dict:
    """The manifest of ``run_dir``; :class:`RunDirError` if there is none or it is unreadable."""
    run_dir = Path(run_dir)
    path = run_dir / MANIFEST
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a kernelcli run directory (no such directory)")
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise RunDirError(
            f"{run_dir} is not a kernelcli run directory (no manifest.json)"
        ) from None
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        manifest = json.loads(text)
    except ValueError as exc:
        raise RunDirError(f"{path} is not valid JSON ({exc}); was it edited by hand?") from None
    if not isinstance(manifest, dict):
        raise RunDirError(f"{path} does not hold a JSON object")
    return manifest
