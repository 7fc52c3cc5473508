"""What a run's ``manifest.json`` holds: the one place its schema lives.

The file itself (bytes with a checksum that is the run's identity) is
:mod:`._manifest_file`'s; this module says what the JSON object in it must be. A run's
manifest is built by :func:`new_manifest` (same keys, same values as every earlier
version wrote, so old run directories resume) and read back as a :class:`Manifest`,
which checks itself: every plan field there, of its type and range, the geometry it
records consistent with its totals. A file of a run directory is untrusted input
like any other: whatever it holds, the answer is a one-line
:class:`~kernelcli.errors.DamagedFileError`, never a ``KeyError`` or a computation
on made-up values.

Keys (``plan`` holds the geometry's fields, :data:`GEOMETRY_KEYS`, plus
``test_diagonal``, ``dtype``, ``engine`` and, from runs that record them, ``chunk`` and
``native``, the native plan's revision, and ``native_library``, its library's identity)::

    format, kernelcli_version, name, config_text, config_dir, config_dir_from_run,
    config_fingerprint, data_fingerprints, plan,
    extend, lineage, labels_file          (runs grown by ``kernelcli extend`` only)
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Optional

from .. import __version__
from ..errors import DamagedFileError, KernelcliError
from ..plan import Geometry, make_geometry
from ..config import DTYPES, ENGINES, KINDS, is_kernel_name
from ._run_files import LABELS

FORMAT = 2  # 2: manifest checksum, sealed tiles with run identity, checksummed result
LINEAGE = "lineage"
_ENGINES = tuple(e for e in ENGINES if e != "auto")  # plan.engine: resolve_engine's answers
_MAX_N = 1 << 40
# The plan fields that record the geometry (beside them: test_diagonal, dtype, engine).
GEOMETRY_KEYS = ("n1", "n2", "n_test", "symmetric", "block", "pair_batch", "kinds",
                 "pairs_total", "blocks_total")
# The plan fields a tile's bits depend on besides its rows: the block edge, the pair
# batch, the execution plan, the CPU plan's chunk and the native plan's revision and
# library. A grown run (``kernelcli extend``) keeps them, as a resume does.
COMPUTE_KEYS = ("block", "pair_batch", "chunk", "engine", "native", "native_library")


def new_manifest(*, name: str, config_text: str, config_dir: str, config_dir_from_run: str,
                 config_fingerprint: str, data_fingerprints: dict, geometry: Geometry,
                 test_diagonal: bool, dtype: str, engine: str, chunk: Optional[int] = None,
                 native: Optional[int] = None, native_library: Optional[str] = None,
                 extend=None, lineage=None,
                 labels_file: Optional[str] = None) -> dict:
    """The JSON object of a new run's manifest. ``extend`` (with ``lineage`` and
    ``labels_file``): keys of runs grown by ``kernelcli extend`` only, so the manifests
    of other runs keep their bytes."""
    out = {
        "format": FORMAT,
        "kernelcli_version": __version__,
        "name": name,
        "config_text": config_text,
        "config_dir": config_dir,
        # A config, its data and its run moved together are found again from here.
        "config_dir_from_run": config_dir_from_run,
        "config_fingerprint": config_fingerprint,
        "data_fingerprints": data_fingerprints,
        "plan": {**geometry_fields(geometry), "test_diagonal": test_diagonal, "dtype": dtype,
                 # the execution plan rounds differently: a resume keeps it
                 "engine": engine},
    }
    if chunk is not None:  # the CPU plan's pairs per chunk change the last bits: kept too
        out["plan"]["chunk"] = chunk
    if native is not None and native > 1:  # the native plan's revision, likewise (absent: 1)
        out["plan"]["native"] = native
    if native_library is not None:  # the native library's identity (_native_recipe.identity)
        out["plan"]["native_library"] = native_library
    if extend is not None:
        out.update(extend=extend, lineage=list(lineage or ()))
        if labels_file is not None:
            out["labels_file"] = labels_file
    return out


def geometry_fields(g: Geometry) -> dict:
    """The plan fields that record ``g`` (:data:`GEOMETRY_KEYS`), JSON types only."""
    return {"n1": g.n1, "n2": g.n2, "n_test": g.n_test, "symmetric": g.symmetric,
            "block": g.block, "pair_batch": g.pair_batch, "kinds": list(g.kinds),
            "pairs_total": g.pairs_total, "blocks_total": g.blocks_total}


def labels_file_of(manifest: dict) -> str:
    """The side file that holds the run's labels: ``labels.npz``, or the one a grown
    run's manifest names (``labels-<fp>.npz``)."""
    name = manifest.get("labels_file", LABELS)
    return name if isinstance(name, str) else LABELS


def parse_lineage(manifest: dict) -> list:
    """The manifest's ``lineage`` entries that are well formed (others are ignored: they
    only ever widen what is accepted, so ignoring one refuses more, never less)."""
    out = []
    for entry in manifest.get(LINEAGE) or ():
        if (isinstance(entry, dict) and isinstance(entry.get("run"), str)
                and isinstance(entry.get("rows"), int) and not isinstance(entry["rows"], bool)
                and entry["rows"] > 0):
            out.append({"run": entry["run"], "rows": entry["rows"]})
    return out


@dataclasses.dataclass(frozen=True)
class Manifest:
    """A checked run manifest: ``data`` is the JSON object as stored (without its
    checksum), ``geometry`` the plan it records. It checks itself when it is made:
    :class:`DamagedFileError` naming what is wrong (``run_dir`` names the file)."""

    data: dict
    run_dir: Path
    geometry: Geometry = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "run_dir", Path(self.run_dir))
        _check(self.data, self.run_dir)
        object.__setattr__(self, "geometry", _geometry(self.data, self.run_dir))

    @classmethod
    def check(cls, data: dict, run_dir) -> "Manifest":
        """``data`` (a manifest's JSON object) checked as a kernelcli run's."""
        return cls(data, run_dir)

    @property
    def plan(self) -> dict:
        return self.data["plan"]

    @property
    def kinds(self) -> tuple:
        return tuple(self.plan["kinds"])

    @property
    def dtype(self) -> str:
        return self.plan["dtype"]

    @property
    def test_diagonal(self) -> bool:
        return self.plan["test_diagonal"]

    @property
    def engine(self) -> str:
        return self.plan.get("engine", "cpu")  # runs before the key ran the CPU plan

    @property
    def name(self) -> str:
        return self.data["name"]

    @property
    def config_fingerprint(self) -> str:
        return self.data["config_fingerprint"]

    @property
    def data_fingerprints(self) -> dict:
        return self.data["data_fingerprints"]

    @property
    def extend(self) -> Optional[dict]:
        return self.data.get("extend")

    @property
    def lineage(self) -> list:
        return parse_lineage(self.data)

    @property
    def labels_file(self) -> str:
        return labels_file_of(self.data)

    def result_shapes(self) -> dict:
        """dataset -> shape of every kernel dataset ``kernels.h5`` must hold."""
        g, kinds = self.geometry, self.kinds
        shapes = {k: (g.n1, g.n2) for k in kinds}
        if g.n_test:
            shapes.update({f"{k}_test": (g.n_test, g.n2) for k in kinds})
            if self.test_diagonal:
                shapes.update({f"{k}_test_diag": (g.n_test,) for k in kinds})
        return shapes

    def result_bytes(self) -> int:
        """The most bytes ``kernels.h5`` can be: every kernel dataset and the labels at 8
        bytes a value, and its attributes (taken from the manifest, so at most its text)."""
        g = self.geometry
        values = sum(math.prod(shape) for shape in self.result_shapes().values())
        attrs = len(json.dumps(self.data, sort_keys=True).encode())
        return bytes_bound(values + g.n1 + g.n_test, 1, 1) + 2 * attrs

    def result_attrs(self) -> dict:
        """The attributes of ``kernels.h5`` (:func:`result_attrs`)."""
        return result_attrs(self.data)


# What a file of the run holds beside its values (HDF5's superblock, object headers and
# checksums, a tile's attributes, the seal's header): far beyond it, never near a value
_FILE_OVERHEAD = 1 << 20


def bytes_bound(rows: int, cols: int, datasets: int, itemsize: int = 8) -> int:
    """The most bytes a file of the run holding ``datasets`` arrays (one per kind and
    readout) of ``rows x cols`` values (a tile, a pack's block, the test diagonal) can
    be: read with this bound, a file larger than its plan implies is refused before a
    byte of it is read."""
    return datasets * rows * cols * itemsize + _FILE_OVERHEAD


def result_attrs(manifest: dict) -> dict:
    """The attributes of ``kernels.h5``, from the manifest alone, so that whichever
    process assembles (any shard, ``kernelcli assemble``) writes the same file.

    ``data_fingerprint`` is the sha256 over the data fingerprints (JSON text of them
    in ``data_fingerprints``); ``run`` (added by the store) is the run's identity.
    """
    fps = json.dumps(manifest.get("data_fingerprints", {}), sort_keys=True)
    return {
        "config": manifest.get("config_text", ""),
        "name": manifest.get("name", ""),
        "kernelcli_version": __version__,
        "data_fingerprint": hashlib.sha256(fps.encode()).hexdigest(),
        "data_fingerprints": fps,
        "config_fingerprint": manifest.get("config_fingerprint", ""),
    }


def _int(m: dict, key: str, low: int, high: int, where: str) -> int:
    value = m.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DamagedFileError(f"{where}: plan.{key} is {_show(value)}; expected an integer "
                               f"{low}..{high}")
    return value


def _show(value) -> str:
    text = json.dumps(value) if value is not None else "missing"
    return text if len(text) <= 40 else text[:37] + "..."


def _check(manifest: dict, run_dir) -> None:
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
                               f"{', '.join(KINDS)} (or readouts' nngp_d<n>, ntk_d<n>)")
    if p.get("dtype") not in DTYPES:
        raise DamagedFileError(f"{where}: plan.dtype is {_show(p.get('dtype'))}; expected "
                               f"one of {', '.join(DTYPES)}")
    if p.get("engine", "cpu") not in _ENGINES:  # runs before the key ran the CPU plan
        raise DamagedFileError(f"{where}: plan.engine is {_show(p.get('engine'))}; expected "
                               f"one of {', '.join(_ENGINES)}")
    if "chunk" in p:  # runs before the key: the chunk of KERNELCLI_CHUNK_BYTES or the default
        _int(p, "chunk", 1, 1 << 31, where)
    if "native" in p:  # the native plan's revision; runs before the key: 1
        _int(p, "native", 2, 1 << 20, where)
    lib = p.get("native_library")
    if lib is not None and not (isinstance(lib, str) and len(lib) == 16
                                and all(c in "0123456789abcdef" for c in lib)):
        raise DamagedFileError(f"{where}: plan.native_library is {_show(lib)}; expected 16 "
                               f"hexadecimal digits (the native library's identity)")


def _geometry(manifest: dict, run_dir) -> Geometry:
    """The geometry the (checked) plan fields record (the inverse of
    :func:`geometry_fields`), its recorded totals those of its blocks."""
    p = manifest["plan"]
    where = Path(run_dir) / "manifest.json"
    try:
        geometry = make_geometry(p["n1"], p["n2"], symmetric=p["symmetric"],
                                 block=p["block"], pair_batch=p["pair_batch"],
                                 kinds=p["kinds"], n_test=p["n_test"],
                                 itemsize=8 if p["dtype"] == "float64" else 4)
    except (KernelcliError, ValueError) as exc:
        raise DamagedFileError(f"{where}: its plan is not valid ({exc})") from None
    for key in ("pairs_total", "blocks_total"):
        if p.get(key) != getattr(geometry, key):
            raise DamagedFileError(f"{where}: plan.{key} is {_show(p.get(key))} but its "
                                   f"plan has {getattr(geometry, key)}")
    return geometry
