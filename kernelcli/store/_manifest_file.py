"""``manifest.json``: what a run directory holds, written once when the run starts.

The manifest is an opaque JSON object to the store (the run package decides its
content: configuration, data fingerprints, plan). It is serialised with sorted keys
so the same run always gives the same bytes, plus one key of the store's own,
``checksum``: the sha256 of those bytes. That checksum is the run's identity
(:func:`manifest_id`): every tile and the assembled ``kernels.h5`` carry it, and a
manifest whose content no longer matches it (edited by hand, damaged) is refused.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from .._untrusted import read_untrusted
from ..errors import DamagedFileError, RunDirError
from ._atomic import create_exclusive, write_bytes_atomic

MANIFEST = "manifest.json"
CHECKSUM = "checksum"
_MAX_BYTES = 64 << 20  # a configuration is at most 1 MiB; this is far beyond any manifest


def _canonical(manifest: dict) -> bytes:
    return (json.dumps(manifest, sort_keys=True, indent=2) + "\n").encode("utf-8")


def manifest_id(manifest: dict) -> str:
    """The run identity of ``manifest`` (without its ``checksum`` key): a sha256 hex digest."""
    return hashlib.sha256(_canonical(manifest)).hexdigest()


def encode_manifest(manifest: dict) -> bytes:
    """The bytes of ``manifest`` with its checksum; ``TypeError`` before any file is touched."""
    if not isinstance(manifest, dict):
        raise TypeError(f"manifest must be a dict, got {type(manifest).__name__}")
    if CHECKSUM in manifest:
        raise ValueError(f"{CHECKSUM!r} is the store's own manifest key")
    return _canonical(dict(manifest, **{CHECKSUM: manifest_id(manifest)}))


def write_manifest(run_dir: Path, data: bytes) -> None:
    write_bytes_atomic(Path(run_dir) / MANIFEST, data)


def create_manifest(run_dir: Path, data: bytes) -> bool:
    """Write the manifest unless one exists (race-free); whether this call wrote it."""
    return create_exclusive(Path(run_dir) / MANIFEST, data)


def read_manifest(run_dir: Path) -> dict:
    """The manifest of ``run_dir`` (without its checksum), verified against its checksum;
    :class:`RunDirError` if there is none, :class:`DamagedFileError` if it is unreadable,
    not UTF-8, not a JSON object, or edited since it was written."""
    run_dir = Path(run_dir)
    path = run_dir / MANIFEST
    if not run_dir.is_dir():
        raise RunDirError(f"{run_dir} is not a kernelcli run directory (no such directory)")
    try:
        text = read_untrusted(path, run_dir, _MAX_BYTES).decode("utf-8")
    except UnicodeDecodeError as exc:
        raise DamagedFileError(f"{path} is not UTF-8 text (byte {exc.start}): it is damaged "
                               f"or not a kernelcli manifest") from None
    except FileNotFoundError:
        raise RunDirError(
            f"{run_dir} is not a kernelcli run directory (no manifest.json)"
        ) from None
    except OSError as exc:
        raise RunDirError(f"cannot read {path}: {exc.strerror or exc}") from None
    try:
        manifest = json.loads(text)
    except (ValueError, RecursionError) as exc:
        reason = str(exc).splitlines()[0][:200] if str(exc) else type(exc).__name__
        raise DamagedFileError(f"{path} is not valid JSON ({reason}); was it edited by "
                               f"hand?") from None
    if not isinstance(manifest, dict):
        raise DamagedFileError(f"{path} does not hold a JSON object")
    stored = manifest.pop(CHECKSUM, None)
    if stored is None:
        raise DamagedFileError(f"{path} has no checksum: it was not written by this version "
                               f"of kernelcli; start the run afresh with `kernelcli compute "
                               f"CONFIG --overwrite`")
    if stored != manifest_id(manifest):
        raise DamagedFileError(f"{path} does not match its checksum: it was edited or damaged "
                               f"after the run started; restore it, or start afresh with "
                               f"`kernelcli compute CONFIG --overwrite`")
    return manifest


def decoded_manifest(data: bytes) -> dict:
    """The manifest that :func:`encode_manifest` made ``data`` of, without its checksum."""
    manifest = json.loads(data)
    manifest.pop(CHECKSUM, None)
    return manifest
