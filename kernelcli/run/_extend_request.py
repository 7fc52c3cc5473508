"""What ``kernelcli extend`` was asked, checked before anything is read or written.

The request is what the manifest records (absolute paths, each file's key resolved
and its content fingerprinted), so the same command run again is recognised as the
same extend and a changed file never is. A file's key not given defaults to the run's
matching key where the file holds it, else to the only array in the file (labels
aside); messages name the options as the caller spells them (``<<test_key>>``:
``--test-key`` on the command line, ``test_key=`` in Python).
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Optional

from ..errors import DataError, UsageError, resume_command
from ..pipeline import APPEND_KEYS, TEST_KEYS, verified_result
from ..store import RunStore


def _abs(path) -> Optional[str]:
    return None if path is None else os.path.abspath(os.fspath(path))


def request_of(test, test_key, test_labels, test_labels_key, append, append_key,
               append_labels, append_labels_key) -> dict:
    """The call as the manifest records it (absolute paths, as the command line resolves
    them against the working folder); keys not given are ``None`` until
    :func:`resolve_files`."""
    for name, file, rest in (
            ("test", test, (("test_key", test_key), ("test_labels", test_labels),
                            ("test_labels_key", test_labels_key))),
            ("append", append, (("append_key", append_key), ("append_labels", append_labels),
                                ("append_labels_key", append_labels_key)))):
        given = [(flag, value) for flag, value in rest if value is not None]
        if file is None and given:
            flag, value = given[0]
            raise UsageError.naming(f"<<{flag}>> {value!r} is given without <<{name}>>; "
                                    f"expected <<{name}>> FILE as well")
    if test is None and append is None:
        raise UsageError.naming("give <<test>> FILE (a test set), <<append>> FILE (more "
                                "training rows), or both")
    t = None if test is None else dict(zip(TEST_KEYS, (_abs(test), test_key,
                                                       _abs(test_labels), test_labels_key),
                                           strict=True))
    a = None if append is None else dict(zip(APPEND_KEYS, (_abs(append), append_key,
                                                           _abs(append_labels),
                                                           append_labels_key), strict=True))
    return {"test": t, "append": a}


# per new file: its option, the request's fields (file, key, labels file, labels key),
# and the run's keys a key not given defaults to (examples, labels)
_FILES = {
    "append": ("x", "key", "labels", "labels_key", "append_key", "append_labels_key"),
    "test": ("test", "test_key", "test_labels", "test_labels_key", "test_key",
             "test_labels_key"),
}


def _run_keys(cfg, name: str) -> tuple:
    d = cfg.data
    if name == "append":
        return d.key, d.labels_key
    return d.test_key or d.key, d.test_labels_key or d.labels_key


def _default_keys(cfg, name: str, rec: dict) -> None:
    """Fill the keys of ``rec`` not given: each the run's matching key where the file
    holds it; the examples' key else the only array besides the labels."""
    from ..data import array_names

    field, key, labels, labels_key, flag, _labels_flag = _FILES[name]
    run_key, run_labels_key = _run_keys(cfg, name)
    names = array_names(Path(rec[field]))
    if rec[labels_key] is None and run_labels_key is not None:
        held = names if rec[labels] is None else array_names(Path(rec[labels]))
        if held and run_labels_key in held:
            rec[labels_key] = run_labels_key
    if names is None:  # a .npy file: one array, no key
        return
    if rec[key] is not None:
        return
    if run_key in names:
        rec[key] = run_key
        return
    rest = [n for n in names if rec[labels] is not None or n != rec[labels_key]]
    if len(rest) == 1:
        rec[key] = rest[0]
        return
    from ..data import listed

    raise DataError.naming(
        f"<<{flag}>>: not given, and {rec[field]} holds no array {run_key!r} (the run's "
        f"key) nor one array alone: it holds {listed(names)}; give <<{flag}>> NAME")


def new_source(cfg, request: dict, name: str):
    """The file ``append`` or ``test`` names, opened with its (resolved) key; messages
    name the options as the caller spells them."""
    from ..data import open_array

    field, key, *_, flag, _ = _FILES[name]
    rec = request[name]
    try:
        return open_array(Path(rec[field]), rec[key], layout=cfg.data.layout, limit=None,
                          what=f"<<{name}>>", key_name=f"<<{flag}>>")
    except DataError as exc:
        raise DataError.naming(str(exc)) from None


def resolve_files(cfg, request: dict) -> None:
    """Each new file's keys resolved (:func:`_default_keys`) and its content fingerprint
    added: the same command on a file whose content changed is another extend, never
    taken for this one."""
    from ..data import fingerprint

    for name in ("append", "test"):
        if request[name] is not None:
            _default_keys(cfg, name, request[name])
            src = new_source(cfg, request, name)
            try:
                request[name]["fingerprint"] = fingerprint(src)
            finally:
                src.close()


def check_extensible(store: RunStore, cfg, request: dict) -> None:
    """Refuse, before anything is read or written, what extend cannot do right."""
    run_dir, m = store.run_dir, store.manifest
    if cfg.data.x2 is not None:
        raise UsageError(f"{run_dir} holds the rectangle K(x1, x2) of data.x2; extend grows "
                         f"a run of one training set (no data.x2): compute the new "
                         f"rectangle as a run of its own")
    if cfg.data.landmarks is not None:
        raise UsageError(f"{run_dir} is a landmark (Nystrom) run of data.landmarks; extend "
                         f"grows a full kernel: compute a new landmark run with the rows")
    if (m.get("extend") or {}).get("request") is not None and not store.finished:
        raise UsageError(f"{run_dir} is in the middle of another extend; finish it with "
                         f"`{resume_command(run_dir)}` (or the same extend command), then "
                         f"extend again")
    if verified_result(store) is None:
        raise UsageError(f"{run_dir} is not finished (its kernels.h5 does not exist or does "
                         f"not verify); extend grows a finished run: finish it with "
                         f"`{resume_command(run_dir)}`, then extend")
    if request["append"] is not None:
        if cfg.data.preprocess is not None:
            raise UsageError.naming(
                f"<<append>>: {run_dir} preprocesses its data (data.preprocess: "
                f"{cfg.data.preprocess.kind}) with statistics fitted on the training set; "
                f"more training rows would change them and so every kernel entry: compute "
                f"the grown data set afresh with `kernelcli compute`")
        a = request["append"]
        has = cfg.data.has_labels
        given = a["labels"] is not None or a["labels_key"] is not None
        if has and not given:
            raise UsageError.naming(
                f"<<append>>: {run_dir} has training labels (data.labels_key), so the "
                f"appended rows need theirs; expected <<append_labels_key>> NAME (in the "
                f"appended file) or <<append_labels>> FILE")
        if given and not has:
            raise UsageError.naming(
                f"<<append_labels>>: {run_dir} has no training labels (data.labels_key), so "
                f"the appended rows' labels would label nothing; expected no "
                f"<<append_labels>> / <<append_labels_key>>")
    _check_files(cfg, request)


def _check_files(cfg, request: dict) -> None:
    """The new files against the run's training data: one example shape (both), one
    dtype (appended rows: the grown training set is one array)."""
    from ..data import open_array

    d = cfg.data
    x1 = open_array(d.x1, d.key, layout=d.layout, limit=d.limit, what="data.x1")
    try:
        for name in ("append", "test"):
            rec = request[name]
            if rec is None:
                continue
            path = Path(rec[_FILES[name][0]])
            src = new_source(cfg, request, name)
            try:
                if src.example_shape != x1.example_shape:
                    raise UsageError.naming(
                        f"<<{name}>>: examples of {path} have shape {src.example_shape}, but "
                        f"the run's training examples have shape {x1.example_shape}; "
                        f"expected the same example shape")
                if name == "append" and src.dtype != x1.dtype:
                    raise UsageError.naming(
                        f"<<append>>: {path} holds {src.dtype}, but the run's training data "
                        f"(data.x1) is {x1.dtype}; expected {x1.dtype} (the grown training "
                        f"set is one array)")
            finally:
                src.close()
    finally:
        x1.close()
