"""The names of a run directory's files, and the small files beside the tiles: the
labels, the test diagonal, and the quarantine of files that failed verification."""

from __future__ import annotations

import os
import re
import time
import zipfile
from pathlib import Path
from typing import Optional

import numpy as np

from .._untrusted import open_untrusted
from ..errors import DamagedFileError
from ._atomic import fsync_dir, storage_error
from ._sealed import SealError, read_sealed

RESULT = "kernels.h5"
TILES = "tiles"
SHARDS = "shards"
LABELS = "labels.npz"
TEST_DIAG = "test_diag.h5"
PREDICTIONS = "predictions.h5"
QUARANTINE = "quarantine"
_SIDE_FILE = re.compile(r"^(labels\.npz|labels-[0-9a-f]{16}\.npz|preprocess-[0-9a-f]{16}\.npz|"
                        r"test_diag\.h5|predictions\.h5|tiles_removed\.json)$")


def is_side_file(name: str) -> bool:
    """Whether ``name`` is one of the side files a run directory may hold."""
    return _SIDE_FILE.match(name) is not None


def labels_name(fingerprint: str) -> str:
    """The labels side file of an extended run, ``labels-<first 16 hex digits>.npz``:
    named by content, so the grown labels are written before the run switches to them
    and the labels of the run it grew from stay whole until then."""
    return f"labels-{fingerprint[:16]}.npz"


def preprocess_name(fingerprint: str) -> str:
    """The side file of a fitted preprocessing: ``preprocess-<first 16 hex digits>.npz``."""
    return f"preprocess-{fingerprint[:16]}.npz"


def move_to_quarantine(folder: Path, path: Path) -> Path:
    """Move ``path`` into ``folder`` under a time-stamped name; its new path. Never
    deletes: the file may be evidence of a failing disk."""
    try:
        folder.mkdir(exist_ok=True)
        stamp = time.strftime("%Y%m%dT%H%M%S")
        for n in range(1000):
            target = folder / f"{Path(path).name}.{stamp}{'' if n == 0 else f'.{n}'}"
            if not os.path.lexists(target):
                break
        os.replace(path, target)
        fsync_dir(folder)
        fsync_dir(Path(path).parent)
    except FileNotFoundError:  # another process moved it first
        return folder / Path(path).name
    except OSError as exc:
        raise storage_error(exc, folder) from None
    return target


def check_test_diagonal(path: Path, run_id: str, kinds, max_bytes: Optional[int]) -> tuple:
    """``(datasets, None)`` of a whole ``test_diag.h5`` of run ``run_id`` holding
    ``kinds``, else ``(None, what is wrong)``: one read serves the check and the values.
    A file over ``max_bytes`` (what the plan implies) is refused unread."""
    try:
        datasets, attrs = read_sealed(path, max_bytes=max_bytes)
    except FileNotFoundError:
        return None, f"{path} has not been computed"
    except (SealError, OSError) as exc:
        return None, f"{path} is damaged: {exc}"
    if attrs.get("run") != run_id:
        return None, f"{path} was computed by another run"
    if any(k not in datasets for k in kinds):
        return None, f"{path} lacks one of {', '.join(kinds)}"
    return datasets, None


def read_npz(path: Path, max_bytes: Optional[int] = None) -> dict:
    """The arrays of the ``.npz`` side file ``path``, read through the one descriptor the
    untrusted-file gate opened (a FIFO or device refused, never waited on; a file over
    ``max_bytes`` refused unread); DamagedFileError when unreadable or missing."""
    try:
        with os.fdopen(open_untrusted(path, max_bytes=max_bytes), "rb") as f, \
                np.load(f, allow_pickle=False) as z:
            return {k: z[k] for k in z.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DamagedFileError(f"{path} is damaged or unreadable ({exc}); start the run "
                               f"afresh with `kernelcli compute CONFIG --overwrite`") from None
