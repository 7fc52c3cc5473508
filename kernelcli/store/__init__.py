"""The run directory: manifest, one durable tile per completed block, the assembled result.

h5py, numpy and the standard library only (no jax, no click). The design is argued
in :mod:`kernelcli.store._store`.
"""

from ._store import LABELS as LABELS
from ._store import PREDICTIONS as PREDICTIONS
from ._store import RESULT as RESULT
from ._store import labels_name as labels_name
from ._store import preprocess_name as preprocess_name
from ._store import TILES as TILES
from ._store import RunStore as RunStore
from ._manifest import MANIFEST as MANIFEST
from ._assemble import row_bands as row_bands
from ._sealed import h5_written_whole as h5_written_whole
from ._lineage import lineage as lineage_of

__all__ = ["LABELS", "MANIFEST", "PREDICTIONS", "RESULT", "TILES", "RunStore",
           "h5_written_whole", "labels_name", "lineage_of", "preprocess_name", "row_bands"]
