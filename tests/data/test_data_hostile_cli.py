"""Hostile inputs through the CLI: ``kernelcli compute`` refuses huge values, a virtual
dataset with a deleted source, bad labels, a dangling link and preprocessing that
blows a test set up with exit 2 and one ``Error:`` line, no traceback, and nothing
written (the run directory is not even created). The library's refusals are in
test_data_hostile.py (values) and test_data_hostile_files.py (file structures).
"""

from __future__ import annotations

import os
from pathlib import Path

import h5py
import numpy as np
import pytest
import yaml

from helpers_cli import FLATTEN_NET, error_line, invoke, snapshot


def write_run_config(folder: Path, data: dict, dtype="float32") -> Path:
    doc = {"name": "hostile", "data": data,
           "architecture": {"layers": FLATTEN_NET},
           "kernel": {"kinds": ["nngp", "ntk"], "dtype": dtype},
           "output": {"run_dir": str(folder / "runs" / "hostile")}}
    (cfg := folder / "hostile.yaml").write_text(yaml.safe_dump(doc, sort_keys=False))
    return cfg


def assert_refused_by_cli(folder: Path, cfg: Path, message: str) -> None:
    before = snapshot(folder)
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2, result.stderr
    line = error_line(result)
    assert line.startswith(f"Error: {message}"), line
    assert "Traceback" not in result.output
    assert not (folder / "runs").exists(), "a refused run must not create its run directory"
    assert snapshot(folder) == before


@pytest.mark.usefixtures("keep_process_state")
def test_cli_refuses_huge_float32_values(tmp_path):
    x = np.random.default_rng(0).standard_normal((6, 6, 6, 2)).astype(np.float32)
    x[4, 1, 1, 1] = 1e20
    np.save(p := tmp_path / "x.npy", x)
    cfg = write_run_config(tmp_path, {"x1": str(p)})
    assert_refused_by_cli(tmp_path, cfg, f"data.x1: row 4 of {p} holds a value of magnitude "
                                         "1e+20, too large for kernel.dtype float32")


@pytest.mark.usefixtures("keep_process_state")
def test_cli_refuses_a_virtual_dataset_with_a_deleted_source(tmp_path):
    with h5py.File(tmp_path / "part.h5", "w") as f:
        f["x"] = np.random.default_rng(0).standard_normal((6, 6, 6, 2)).astype("f4")
    layout = h5py.VirtualLayout((6, 6, 6, 2), "f4")
    layout[:] = h5py.VirtualSource("part.h5", "x", shape=(6, 6, 6, 2))
    with h5py.File(p := tmp_path / "all.h5", "w") as f:
        f.create_virtual_dataset("x", layout, fillvalue=0)
    os.remove(tmp_path / "part.h5")
    cfg = write_run_config(tmp_path, {"x1": str(p), "key": "x"})
    assert_refused_by_cli(tmp_path, cfg, f"data.key: the virtual dataset 'x' in {p} reads its "
                                         "source 'x' in 'part.h5', which does not exist")


@pytest.mark.usefixtures("keep_process_state")
def test_cli_refuses_bad_labels_and_dangling_links(tmp_path):
    x = np.random.default_rng(0).standard_normal((6, 6, 6, 2)).astype("f4")
    with h5py.File(p := tmp_path / "d.h5", "w") as f:
        f["x"] = x
        f["y"] = np.array([0, 1, 2, 0.5, 1, 0])
        f["gone"] = h5py.SoftLink("/missing")
    cfg = write_run_config(tmp_path, {"x1": str(p), "key": "x", "labels_key": "y"})
    assert_refused_by_cli(tmp_path, cfg, f"data.labels_key: row 3 of {p} ['y'] holds label 0.5; "
                                         "accepted: integer class labels in 0..2147483647")
    cfg = write_run_config(tmp_path, {"x1": str(p), "key": "gone"})
    assert_refused_by_cli(tmp_path, cfg, f"data.key: 'gone' in {p} is a soft link to "
                                         "'/missing', which does not resolve")


@pytest.mark.usefixtures("keep_process_state")
def test_cli_refuses_preprocessing_that_blows_a_test_set_up(tmp_path):
    rng = np.random.default_rng(0)
    np.savez(p := tmp_path / "d.npz", x_train=rng.standard_normal((12, 6, 6, 2)) * 1e-140,
             x_test=rng.standard_normal((5, 6, 6, 2)))
    cfg = write_run_config(tmp_path, {"x1": str(p), "key": "x_train", "test": str(p),
                                      "test_key": "x_test",
                                      "preprocess": {"kind": "zca", "zca_reg": 0.1,
                                                     "per_image": False}})
    assert_refused_by_cli(tmp_path, cfg, f"data.test: {p} ['x_test']: row 0 after zca "
                                         "preprocessing holds a value of magnitude ")
