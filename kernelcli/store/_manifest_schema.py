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

Keys (``plan`` holds the block planner's: the geometry's fields, :data:`GEOMETRY_KEYS`,
plus ``test_diagonal``, ``dtype`` and, from runs that record it, ``chunk``, the cpu
engine's pairs per chunk, which the planner sizes pair batches by; ``engine`` the
execution engine, :func:`engine_fields`: its ``name`` and, for the native engine,
``native_revision`` and ``native_library``, its library's identity, and on every engine
``cpu_level``, the CPU level its tiles were computed at)::

    format, kernelcli_version, name, config_text, config_dir, config_dir_from_run,
    config_fingerprint, data_fingerprints, plan, engine,
    extend, lineage, labels_file          (runs grown by ``kernelcli extend`` only)

Format 2 (runs from before the ``engine`` section) recorded the engine in ``plan``:
``plan.engine`` (absent: ``cpu``), ``plan.native``, the native engine's revision (absent:
1), and ``plan.native_library``. They are read into the same :class:`Engine`
(:attr:`Manifest.engine`), so those run directories resume, extend and report as before;
a run grown from one (``kernelcli extend``) writes a new manifest, of this format.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
from pathlib import Path
from typing import Any, Optional

from .. import __version__
from ..config import DTYPES, ENGINE_NAMES, KINDS, Engine, is_kernel_name
from ..errors import DamagedFileError, KernelcliError
from ..plan import Geometry, make_geometry
from ._run_files import LABELS

# 2: manifest checksum, sealed tiles with run identity, checksummed result; 3: the
# engine in a section of its own (a kernelcli that reads only 2 refuses such a run,
# which it would otherwise continue with the cpu engine, mixing two engines' bits)
FORMAT = 3
_FORMATS = (2, FORMAT)  # what is read
_ENGINE_IN_PLAN = ("engine", "native", "native_library")  # format 2's keys of plan
_MAX_LEVEL = 120  # characters of engine.cpu_level (a name, or an ISA and a core)
LINEAGE = "lineage"
_MAX_N = 1 << 40
_MAX_REVISION = 1 << 20
# The plan fields that record the geometry (beside them: test_diagonal, dtype, chunk).
GEOMETRY_KEYS = ("n1", "n2", "n_test", "symmetric", "block", "pair_batch", "kinds",
                 "pairs_total", "blocks_total")


@dataclasses.dataclass(frozen=True)
class StoredCompute:
    """What a tile's bits depend on besides its rows, as a run records it: the block
    edge, the pair batch, the cpu engine's pairs per chunk (``None``: runs from before
    it was recorded, whose chunk came from ``KERNELCLI_CHUNK_BYTES`` or the default) and
    the engine. A resume keeps it, and so does a run grown by ``kernelcli extend``."""

    block: int
    pair_batch: int
    chunk: Optional[int]
    engine: Engine


def new_manifest(*, name: str, config_text: str, config_dir: str, config_dir_from_run: str,
                 config_fingerprint: str, data_fingerprints: dict, geometry: Geometry,
                 test_diagonal: bool, dtype: str, engine: Engine, chunk: Optional[int] = None,
                 extend=None, lineage=None,
                 labels_file: Optional[str] = None) -> dict:
    """The JSON object of a new run's manifest. ``extend`` (with ``lineage`` and
    ``labels_file``): keys of runs grown by ``kernelcli extend`` only, so the manifests
    of other runs keep their bytes."""
    out: dict[str, Any] = {
        "format": FORMAT,
        "kernelcli_version": __version__,
        "name": name,
        "config_text": config_text,
        "config_dir": config_dir,
        # A config, its data and its run moved together are found again from here.
        "config_dir_from_run": config_dir_from_run,
        "config_fingerprint": config_fingerprint,
        "data_fingerprints": data_fingerprints,
        "plan": {**geometry_fields(geometry), "test_diagonal": test_diagonal, "dtype": dtype},
        # each engine rounds differently: a resume keeps it
        "engine": engine_fields(engine),
    }
    if chunk is not None:  # the cpu engine's pairs per chunk change the last bits: kept too
        out["plan"]["chunk"] = chunk
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


def engine_fields(engine: Engine) -> dict:
    """The manifest's ``engine`` section: ``{"name": "cpu"}``, or for the native engine
    ``{"name": "native", "native_revision": 3, "native_library": "<16 hex digits>"}``."""
    out: dict = {"name": engine.name}
    if engine.native:
        out["native_revision"] = engine.native_revision
        if engine.native_library is not None:  # _native_recipe.identity
            out["native_library"] = engine.native_library
    if engine.cpu_level is not None:  # kernels._cpu_level.in_force
        out["cpu_level"] = engine.cpu_level
    return out


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
    def check(cls, data: dict, run_dir) -> Manifest:
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
    def engine(self) -> Engine:
        """The execution engine the run computes with (of either format)."""
        return engine_of(self.data, self.run_dir)

    @property
    def compute(self) -> StoredCompute:
        """What a resume or an extend computes the run's tiles with."""
        p = self.plan
        return StoredCompute(p["block"], p["pair_batch"], p.get("chunk"), self.engine)

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
        shapes: dict[str, tuple[int, ...]] = {k: (g.n1, g.n2) for k in kinds}
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


def _int(m: dict, key: str, low: int, high: int, where: str, section: str = "plan") -> int:
    value = m.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise DamagedFileError(f"{where}: {section}.{key} is {_show(value)}; expected an "
                               f"integer {low}..{high}")
    return value


def _show(value) -> str:
    text = json.dumps(value) if value is not None else "missing"
    return text if len(text) <= 40 else text[:37] + "..."


def _check(manifest: dict, run_dir) -> None:
    where = f"{Path(run_dir) / 'manifest.json'}"
    if "plan" not in manifest or "config_text" not in manifest:
        raise DamagedFileError(f"{where} was not written by kernelcli (no configuration "
                               f"recorded); it cannot be resumed")
    if manifest.get("format") not in _FORMATS:
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
    if "chunk" in p:  # runs before the key: the chunk of KERNELCLI_CHUNK_BYTES or the default
        _int(p, "chunk", 1, 1 << 31, where)
    engine_of(manifest, run_dir)


def engine_of(manifest: dict, run_dir) -> Engine:
    """The engine ``manifest`` records (one whose ``format`` and ``plan`` are known to be
    there: :meth:`Manifest.check`'s): its ``engine`` section, or format 2's keys of
    ``plan``; :class:`DamagedFileError` naming what is wrong."""
    where = f"{Path(run_dir) / 'manifest.json'}"
    p = manifest["plan"]
    if manifest["format"] == 2:
        if "engine" in manifest:
            raise DamagedFileError(f"{where}: engine is {_show(manifest['engine'])} in a "
                                   f"manifest of format 2, which records it in plan")
        e: dict = {"name": p.get("engine", "cpu"),  # runs before the key ran the cpu engine
                   "native_library": p.get("native_library")}
        if "native" in p:  # the native engine's revision, written from 2 on
            e["native_revision"] = _int(p, "native", 2, _MAX_REVISION, where)
        elif e["name"] == "native":
            e["native_revision"] = 1  # written only from 2 on
        keys = dict(zip(("name", "native_revision", "native_library"),
                        (f"plan.{k}" for k in _ENGINE_IN_PLAN), strict=True))
    else:
        section = manifest.get("engine")
        if not isinstance(section, dict):
            raise DamagedFileError(f"{where}: engine is {_show(section)}; expected a mapping "
                                   f"(name, native_revision, native_library, cpu_level)")
        e = section
        stale = [k for k in _ENGINE_IN_PLAN if k in p]
        if stale:
            raise DamagedFileError(f"{where}: plan.{stale[0]} is a key of format 2; format "
                                   f"{FORMAT} records the engine in engine")
        keys = {k: f"engine.{k}" for k in ("name", "native_revision", "native_library",
                                            "cpu_level")}
        extra = sorted(set(e) - set(keys))
        if extra:
            raise DamagedFileError(f"{where}: engine.{extra[0]} is not a key of engine; "
                                   f"expected {', '.join(keys)}")
        if "native_revision" in e:
            _int(e, "native_revision", 1, _MAX_REVISION, where, "engine")
    if e.get("name") not in ENGINE_NAMES:
        raise DamagedFileError(f"{where}: {keys['name']} is {_show(e.get('name'))}; "
                               f"expected one of {', '.join(ENGINE_NAMES)}")
    lib = e.get("native_library")
    if lib is not None and not (isinstance(lib, str) and len(lib) == 16
                                and all(c in "0123456789abcdef" for c in lib)):
        raise DamagedFileError(f"{where}: {keys['native_library']} is {_show(lib)}; "
                               f"expected 16 hexadecimal digits (the native library's "
                               f"identity)")
    level = e.get("cpu_level")
    if level is not None and not (isinstance(level, str) and 0 < len(level) <= _MAX_LEVEL
                                  and level.isprintable() and level.isascii()):
        raise DamagedFileError(f"{where}: {keys['cpu_level']} is {_show(level)}; expected "
                               f"a CPU level (such as x86-64-v3: up to {_MAX_LEVEL} "
                               f"printable characters)")
    try:
        return Engine(e["name"], e.get("native_revision"), lib, level)
    except ValueError as exc:
        raise DamagedFileError(f"{where}: {keys['name']} is {_show(e['name'])}, which "
                               f"does not go with what else it records ({exc})") from None


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
