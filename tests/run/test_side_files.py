"""A run's side files (its fitted preprocessing and its labels) are held to the rules the
manifest and the tiles are held to: a FIFO in their place is refused at once, never
waited on (and so a batch system's SIGTERM is never needed), and ``verify`` fails every
run that ``resume``, ``extend`` or ``predict`` would refuse for one. Real run
directories, real FIFOs, the CLI as a user drives it."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import yaml

from helpers_cli import images, run_cli

N = 12


@pytest.fixture(scope="module")
def finished(tmp_path_factory) -> Path:
    """A finished run with a fitted preprocessing and labels, and a test file beside it."""
    folder = tmp_path_factory.mktemp("side")
    np.save(folder / "x.npy", images(N))
    np.save(folder / "y.npy", np.arange(N) % 3)
    np.save(folder / "t.npy", images(3, seed=1))
    doc = {"name": "side", "data": {"x1": "x.npy", "labels": "y.npy",
                                   "preprocess": "standardize"},
           "architecture": {"layers": ["flatten", "dense", "relu", "dense"]},
           "kernel": {"kinds": ["nngp"]}, "compute": {"engine": "cpu"},
           "output": {"run_dir": "run"}}
    (folder / "c.yaml").write_text(yaml.safe_dump(doc))
    r = run_cli("compute", folder / "c.yaml", "--quiet")
    assert r.returncode == 0, r.stderr
    return folder


def _copy(finished: Path, tmp_path: Path) -> Path:
    run = tmp_path / "run"
    shutil.copytree(finished / "run", run)
    return run


def _fit(run: Path) -> Path:
    (path,) = run.glob("preprocess-*.npz")
    return path


def _fifo(path: Path) -> None:
    path.unlink()
    os.mkfifo(path)


@pytest.mark.parametrize("which", ["preprocess", "labels"])
def test_a_fifo_in_place_of_a_side_file_is_refused_at_once(finished, tmp_path, which):
    run = _copy(finished, tmp_path)
    path = _fit(run) if which == "preprocess" else run / "labels.npz"
    _fifo(path)
    # timeout= kills a command that waits on the FIFO: the refusal must come first
    if which == "preprocess":  # extend maps the test rows with the run's fit
        r = run_cli("extend", run, "--test", finished / "t.npy", timeout=120)
        assert r.returncode == 2, r.stderr
        assert r.stderr.strip().splitlines()[-1] == (f"Error: {path} is a FIFO, not a "
                                                     f"regular file")
    v = run_cli("verify", run, timeout=120)
    assert v.returncode == 1
    assert f"{path} is a FIFO, not a regular file" in v.stderr
    assert run_cli("status", run, timeout=120).returncode == 0


def _damage_byte(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))


def _truncate(path: Path) -> None:
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])


def _another_fit(path: Path) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["mean"] = arrays["mean"] + 1.0  # a fit of other data: a valid file, another fingerprint
    with open(path, "wb") as f:
        np.savez(f, **arrays)


@pytest.mark.parametrize("change", [_damage_byte, _truncate, Path.unlink, _another_fit])
def test_verify_fails_a_run_whose_fit_resume_would_refuse(finished, tmp_path, change):
    run = _copy(finished, tmp_path)
    path = _fit(run)
    change(path)
    v = run_cli("verify", run, timeout=120)
    assert v.returncode == 1, v.stdout + v.stderr
    assert str(path) in v.stderr
    assert "kernelcli compute CONFIG --overwrite" in v.stderr  # what to do
    e = run_cli("extend", run, "--test", finished / "t.npy", timeout=120)
    assert e.returncode == 2 and str(path) in e.stderr  # the command verify speaks for


@pytest.mark.parametrize("change", [_damage_byte, _truncate, Path.unlink])
def test_verify_fails_a_run_whose_labels_cannot_be_read(finished, tmp_path, change):
    run = _copy(finished, tmp_path)
    change(run / "labels.npz")
    v = run_cli("verify", run, timeout=120)
    assert v.returncode == 1, v.stdout + v.stderr
    assert f"{run / 'labels.npz'}" in v.stderr


def test_verify_fails_labels_of_another_run(finished, tmp_path):
    run = _copy(finished, tmp_path)
    with open(run / "labels.npz", "wb") as f:
        np.savez(f, labels=np.zeros(N, np.int64))  # readable, but not this run's labels
    v = run_cli("verify", run, timeout=120)
    assert v.returncode == 1
    assert (f"{run / 'labels.npz'} does not hold this run's labels (their fingerprint "
            f"differs from the one manifest.json records)") in v.stderr


def test_the_untouched_run_verifies(finished, tmp_path):
    v = run_cli("verify", _copy(finished, tmp_path), timeout=120)
    assert v.returncode == 0, v.stderr
