"""Which run identities a tile of an extended run may carry.

``kernelcli extend`` grows a finished run into a new one (a new manifest, so a new
identity) that keeps the tiles it can prove unchanged instead of computing them again.
Those tiles still carry the identity of the run that computed them. The new manifest
lists those earlier runs under ``lineage``: each entry ``{"run": identity, "rows": M}``
says that a training block whose rows and columns all lie below row ``M`` may be read
from a tile of that run (its block coordinates are checked as for any tile). The
manifest is checksummed, so the list cannot be edited without the run being refused;
a tile of any other run, or of an earlier run beyond its rows, is refused as before.
"""

from __future__ import annotations

from pathlib import Path

from ._manifest_schema import parse_lineage as lineage
from ._result_file import ResultFile
from ._sealed import SealError, read_sealed


def accepted_runs(manifest: dict, run_id: str, block) -> tuple:
    """The identities the tile of ``block`` may carry: this run's, and those of the
    earlier runs whose inherited rows cover the block."""
    n1 = (manifest.get("plan") or {}).get("n1", 0)
    out = [run_id]
    if block.r0 < n1:  # training blocks only: test tiles are always this run's own
        out += [e["run"] for e in lineage(manifest) if block.r1 <= e["rows"]]
    return tuple(out)


def ancestors(manifest: dict) -> set:
    """Identities of the runs this one grew from."""
    return {e["run"] for e in lineage(manifest)}


def superseded(run_dir: Path, manifest: dict, names) -> list:
    """The files ``names`` (``kernels.h5``, ``test_diag.h5``) of ``run_dir`` that carry
    the identity of a run this one grew from: left over from before the extension,
    never this run's. Recognised by the identity they carry, so a damaged file is never
    taken for one (it is handled as any file that does not verify)."""
    old = ancestors(manifest)
    out = []
    for name in names if old else ():
        path = Path(run_dir) / name
        found = None
        try:
            if name.endswith("kernels.h5"):
                found = ResultFile(path).run_identity()
            else:
                found = read_sealed(path)[1].get("run")
        except (SealError, OSError, KeyError, ValueError, RuntimeError, TypeError):
            continue
        found = found.decode(errors="replace") if isinstance(found, bytes) else found
        if found in old:
            out.append(path)
    return out
