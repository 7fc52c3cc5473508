"""The run directory: manifest, one durable tile per completed block (packed by the
hundred once published), the assembled result.

h5py, numpy and the standard library only (no jax, no click); h5py is imported by no
package but this one and :mod:`kernelcli.data`. A run's files are read through
:class:`RunStore` (``run_manifest``: the checked :class:`Manifest`; ``result()``: the
:class:`ResultFile` of ``kernels.h5``).

Layout::

    <run_dir>/manifest.json        written once, atomically, when the run starts
    <run_dir>/tiles/<key>.h5       one per completed block (key = 'r00003c00001'), until
                                   it is packed
    <run_dir>/tiles/pack-<first>-<last>.pack
                                   completed tiles packed together, sealed, with an index
                                   (:mod:`._packs`); <first>/<last>: its first/last key
    <run_dir>/kernels.h5           the assembled result; its existence = finished
    <run_dir>/shards/<I>of<N>.json written by process I of a job array of N when it
                                   starts (who ran; status counts per shard from it)
    <run_dir>/shards/ray.json      what the last Ray driver saw of its cluster, written
                                   only when there was something to say (actors
                                   awaited, nodes lost, blocks requeued); status shows it
    <run_dir>/labels.npz           with a configuration that names labels: the training
                                   (and test) labels, written before the manifest
                                   (``labels-<fp>.npz``, named by the manifest, for a
                                   run grown by ``kernelcli extend``)
    <run_dir>/preprocess-<fp>.npz  with data.preprocess: the fitted preprocessing, named
                                   by its fingerprint, written before the manifest
    <run_dir>/test_diag.h5         with kernel.test_diagonal: K(t, t) of every test row,
                                   written before the first tile is computed
    <run_dir>/quarantine/          files that failed verification, moved aside (never
                                   read again; a resume recomputes what they held)
    <run_dir>/tiles_removed.json   the tiles were deleted once kernels.h5 verified
                                   (:mod:`._cleanup`; ``kernelcli clean``)
    <run_dir>/tiles/carry-<key>.h5 a test tile that ``kernelcli extend`` moves to block
                                   ``key`` of the grown run (:mod:`._grow`)
    <run_dir>/.kernelcli.lock      the writers' lock (flock; :mod:`._lock`), empty unless
                                   held

Why this design (and not a journal plus one big HDF5 file):

* HDF5 is not crash-safe: a process killed while a large file is open for writing
  can leave the whole file unreadable, and with it every block already computed. A
  small file per block confines the damage of a kill to the block in flight.
* Each tile is written under a temporary name ``.<name>.<pid>.tmp`` in the same
  folder, fsynced, then ``os.replace``d and the folder fsynced (:mod:`._atomic`).
  So a tile under its final name is complete and durable, and the set of final
  names *is* the progress record. A separate journal could disagree with the tiles
  (written before a tile that never landed, or lost after one that did); there is
  nothing to disagree with here. ``resume`` recomputes exactly the missing keys.
* A kill mid-write leaves only a temporary file; it is ignored by every reader and
  removed the next time the run is opened (unless its writer is still alive).
* Keys are pure functions of block coordinates (like zarr chunk keys), so the
  manifest, which records the plan, fixes which files a run consists of.
* One file per tile is the unit of crash safety, not of storage: a run of 60,000
  examples has ~450,000 tiles, more small files than a cluster's parallel file
  system serves well. So the writer *packs* what it has published (:mod:`._packs`):
  once 512 of its tiles are loose, their sealed bytes are copied into one pack
  (written under a temporary name, fsynced, read back and compared, renamed), and
  only then are the tiles deleted. The set of completed tiles is the union of the
  loose tiles and the packs' indexes; between a pack's rename and the deletions a
  tile is in both, with the same bytes, and the next writer deletes the loose copy.
  So a kill still loses at most the blocks in flight, and a run directory holds
  about one file per 512 tiles plus fewer than 512 loose ones per process.
  :class:`~._packs.TileSet` is the one reader of both (``done_keys``, ``read_tile``,
  assembly, ``verify``, ``status``, ``clean``, ``extend``); a run directory of one
  file per tile (earlier versions) is read, resumed and packed the same way.
* Existence says a tile was published whole; it does not say the bytes are still
  the ones published, or that they belong to this run. So every file is verifiable:
  the manifest carries its own checksum, which is the run's identity; tiles and the
  test diagonal are sealed files (:mod:`._sealed`: a checksum over every byte,
  checked before h5py parses them) that carry that identity and their block; a pack
  holds those same sealed bytes behind an index with its own checksum and one per
  tile; and ``kernels.h5`` carries a checksum per dataset and the identity. Assembly
  verifies every tile it reads and moves one that fails to ``quarantine/`` (a pack
  holding one goes whole, its other tiles unpacked first), so a resume recomputes
  it; the result is read back and checked before it is renamed into place.
* The result is assembled from the tiles into a temporary file and renamed, so
  ``kernels.h5`` either does not exist or is whole.
* Several processes may write one run directory at once (a job array on a shared
  file system, ``--shard I/N``) with no coordination beyond these files: the
  manifest is created exclusively (:meth:`RunStore.create_or_join`: exactly one
  process writes it, the others read it back and must agree), tiles and the result
  are renamed into place whole, so a block computed twice or a result assembled
  twice is harmless; each process packs only the tiles of its own share, so no two
  write the same pack.

All writes stay inside ``run_dir``; a run directory owns only what kernelcli wrote
there (:mod:`._ownership`: a new run only in an empty folder, ``overwrite`` removes
only this run's own files, never through a link, never a run's input), and one
command writes it at a time (:mod:`._lock`, ``<run_dir>/.kernelcli.lock``). OS errors become kernelcli errors that
name the path.
"""

from .._untrusted import check_untrusted as check_untrusted
from ._assembly import result_space_bytes as result_space_bytes
from ._lock import run_lock as run_lock
from ._manifest_file import MANIFEST as MANIFEST
from ._manifest_schema import FORMAT as MANIFEST_FORMAT
from ._manifest_schema import Manifest as Manifest
from ._manifest_schema import StoredCompute as StoredCompute
from ._manifest_schema import engine_of as engine_of
from ._manifest_schema import new_manifest as new_manifest
from ._manifest_schema import result_attrs as result_attrs
from ._ownership import check_new as check_new_run_dir
from ._ownership import check_path as check_run_dir_path
from ._ownership import input_clash as input_clash
from ._ownership import owned_files as owned_files
from ._ownership import stored_identity as stored_identity
from ._packer import planned_tile_files as planned_tile_files
from ._result_file import ResultFile as ResultFile
from ._result_file import row_bands as row_bands
from ._run_files import LABELS as LABELS
from ._run_files import PREDICTIONS as PREDICTIONS
from ._run_files import RESULT as RESULT
from ._run_files import TEST_DIAG as TEST_DIAG
from ._run_files import TILES as TILES
from ._run_files import labels_name as labels_name
from ._run_files import preprocess_name as preprocess_name
from ._sealed import h5_written_whole as h5_written_whole
from ._store import RunStore as RunStore
from ._tiles import tile_write_seconds as tile_write_seconds

__all__ = ["check_new_run_dir", "check_run_dir_path", "input_clash", "owned_files",
           "run_lock", "stored_identity", "LABELS", "MANIFEST", "MANIFEST_FORMAT",
           "Manifest", "StoredCompute",
           "PREDICTIONS", "RESULT", "ResultFile", "TEST_DIAG", "TILES", "RunStore",
           "check_untrusted", "engine_of", "h5_written_whole", "labels_name",
           "new_manifest", "planned_tile_files", "preprocess_name", "result_attrs", "result_space_bytes",
           "row_bands", "tile_write_seconds"]
