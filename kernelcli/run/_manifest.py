"""What a run's ``manifest.json`` must hold, and what is derived from it alone.

The store checks that a manifest is the bytes it wrote (its checksum); this module
checks that its content is a kernelcli run's (every plan field there, of its type and
range) and that the configuration it records still has the fingerprint it was
recorded with. A file of a run directory is untrusted input like any other: whatever
it holds, the answer is a one-line :class:`~kernelcli.errors.DamagedFileError`, never
a ``KeyError`` or a computation on made-up values.
"""

from __future__ import annotations

import json
from pathlib import Path

from .. import __version__
from ..errors import DamagedFileError, KernelcliError
from ..plan import Geometry, TotalsMismatch, geometry_from_manifest
from ..spec import is_kernel_name

FORMAT = 2  # 2: manifest checksum, sealed tiles with run identity, checksummed result
_KINDS = ("nngp", "ntk")
_DTYPES = ("float32", "float64")
_ENGINES = ("cpu", "accelerator")  # plan.engine: kernelcli.kernels.resolve_engine's answers
_MAX_N = 1 << 40


def _int(m: dict, key: str, low: int, high: int, where: str) -> int:
    value = m.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DamagedFileError(f"{where}: plan.{key} is {_show(value)}; expected an integer "
                               f"{low}..{high}")
    return value


def _show(value) -> str:
    text = json.dumps(value) if value is not None else "missing"
    return text if len(text) <= 40 else text[:37] + "..."


def check_manifest(manifest: dict, run_dir) -> dict:
    """``manifest`` itself when it describes a kernelcli run; else DamagedFileError."""
    where = f"{Path(run_dir) / 'manifest.json'}"
    if "plan" not in manifest or "config_text" not in manifest:
        raise DamagedFileError(f"{where} was not written by kernelcli (no configuration "
                               f"recorded); it cannot be resumed")
    if manifest.get("format") != FORMAT:
        raise DamagedFileError(f"{where} is of format {_show(manifest.get('format'))}, not "
                               f"{FORMAT} (kernelcli {__version__}); start the run afresh "
                               f"with `kernelcli compute CONFIG --overwrite`")
    for key in ("config_text", "config_fingerprint", "name"):
        if not isinstance(manifest.get(key), str):
            raise DamagedFileError(f"{where}: {key} is {_show(manifest.get(key))}; expected "
                                   f"text")
    fps = manifest.get("data_fingerprints")
    if not isinstance(fps, dict) or not all(isinstance(v, str) for v in fps.values()):
        raise DamagedFileError(f"{where}: data_fingerprints is {_show(fps)}; expected a "
                               f"mapping of names to fingerprints")
    p = manifest["plan"]
    if not isinstance(p, dict):
        raise DamagedFileError(f"{where}: plan is {_show(p)}; expected a mapping")
    n1 = _int(p, "n1", 1, _MAX_N, where)
    n2 = _int(p, "n2", 1, _MAX_N, where)
    _int(p, "n_test", 0, _MAX_N, where)
    _int(p, "block", 1, 1 << 20, where)
    _int(p, "pair_batch", 1, 1 << 40, where)
    for key in ("symmetric", "test_diagonal"):
        if not isinstance(p.get(key), bool):
            raise DamagedFileError(f"{where}: plan.{key} is {_show(p.get(key))}; expected "
                                   f"true or false")
    if p["symmetric"] and n1 != n2:
        raise DamagedFileError(f"{where}: plan.symmetric is true but n1 = {n1} and n2 = {n2}")
    kinds = p.get("kinds")
    if (not isinstance(kinds, list) or not kinds or len(set(map(str, kinds))) != len(kinds)
            or any(not isinstance(k, str) or not is_kernel_name(k) for k in kinds)):
        raise DamagedFileError(f"{where}: plan.kinds is {_show(kinds)}; expected a list of "
                               f"{', '.join(_KINDS)} (or readouts' nngp_d<n>, ntk_d<n>)")
    if p.get("dtype") not in _DTYPES:
        raise DamagedFileError(f"{where}: plan.dtype is {_show(p.get('dtype'))}; expected "
                               f"one of {', '.join(_DTYPES)}")
    if p.get("engine", "cpu") not in _ENGINES:  # runs before the key ran the CPU plan
        raise DamagedFileError(f"{where}: plan.engine is {_show(p.get('engine'))}; expected "
                               f"one of {', '.join(_ENGINES)}")
    _plan(manifest, run_dir)
    return manifest


def plan_from_manifest(manifest: dict, run_dir) -> Geometry:
    """The geometry a (checked) manifest records: its blocks and batch; no jax, no data,
    and no memory figures (a run directory's readers need none)."""
    check_manifest(manifest, run_dir)
    return _plan(manifest, run_dir)


def _plan(manifest: dict, run_dir) -> Geometry:
    p = manifest["plan"]
    where = Path(run_dir) / "manifest.json"
    try:
        return geometry_from_manifest(p, itemsize=8 if p["dtype"] == "float64" else 4)
    except TotalsMismatch as exc:
        raise DamagedFileError(f"{where}: plan.{exc.key} is {_show(exc.recorded)} but its "
                               f"plan has {exc.actual}") from None
    except (KernelcliError, ValueError) as exc:
        raise DamagedFileError(f"{where}: its plan is not valid ({exc})") from None


def result_attrs(manifest: dict) -> dict:
    """The attributes of ``kernels.h5``, from the manifest alone, so that whichever
    process assembles (any shard, ``kernelcli assemble``) writes the same file.

    ``data_fingerprint`` is the sha256 over the data fingerprints (JSON text of them
    in ``data_fingerprints``); ``run`` (added by the store) is the run's identity.
    """
    import hashlib

    fps = json.dumps(manifest.get("data_fingerprints", {}), sort_keys=True)
    return {
        "config": manifest.get("config_text", ""),
        "name": manifest.get("name", ""),
        "kernelcli_version": __version__,
        "data_fingerprint": hashlib.sha256(fps.encode()).hexdigest(),
        "data_fingerprints": fps,
        "config_fingerprint": manifest.get("config_fingerprint", ""),
    }
