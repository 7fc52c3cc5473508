"""A run directory's side files as the commands that continue a run read them: the fitted
preprocessing (``preprocess-<fp>.npz``) and the labels (``labels.npz``, or a grown
run's ``labels-<fp>.npz``), each checked against the fingerprint the manifest records.

``resume`` and ``extend`` read the fit through :func:`stored_preprocess`; the labels
reach ``kernels.h5`` and an extended run through the store's reader, which
:func:`stored_labels` also checks against the fingerprint. ``verify`` asks
:func:`side_file_problems`, so a run that verifies is one those commands can continue:
a side file that is damaged, truncated, missing, another fit's or not a regular file
fails ``verify`` as it would fail them.
"""

from __future__ import annotations

from ..errors import KernelcliError, RunDirError
from ..store import preprocess_name
from ._inputs import check_preprocess_file, labels_fingerprint


def stored_preprocess(store):
    """The fitted preprocessing a run directory holds (``None`` when the run has none)."""
    fp = store.manifest.get("data_fingerprints", {}).get("preprocess")
    if fp is None:
        return None
    return check_preprocess_file(store.side_path(preprocess_name(fp)), fp)


def stored_labels(store) -> dict:
    """``{"labels": ..., "test_labels": ...}`` as the run's labels file holds them (``{}``
    for a run without labels), checked against the manifest's fingerprint."""
    want = (store.manifest.get("data_fingerprints") or {}).get("labels")
    if want is None:
        return {}
    got = store.read_labels()
    if labels_fingerprint(got.get("labels"), got.get("test_labels")) != want:
        raise RunDirError(f"{store.labels_path} does not hold this run's labels (their "
                          f"fingerprint differs from the one manifest.json records); start "
                          f"the run afresh with `kernelcli compute CONFIG --overwrite`")
    return got


def side_file_problems(store) -> list:
    """One line for each side file the run needs that cannot be used, naming the file
    and what to do; ``[]`` when every one reads back as the manifest records it."""
    out = []
    for read in (stored_preprocess, stored_labels):
        try:
            read(store)
        except KernelcliError as exc:
            out.append(str(exc))
    return out
