"""What ``estimate`` says a run costs on disk, and its time per pair's arithmetic.

The disk figure counts the fitted preprocessing's side file, which the configuration
alone sizes (a ZCA's (d, d) float64 matrix: 75 MB at 32 x 32 x 3, beside a Myrtle run's
kernels.h5 of a few hundred KB); the time per pair is the whole process's, so the pairs
times it is the pairs' wall time whatever the devices."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import yaml

from helpers_cli import GAP_NET, images, invoke, write_config
from kernelcli.data import fit_preprocess, preprocess_file_bytes


@pytest.mark.parametrize("kind, shape", [("standardize", (6, 6, 2)), ("standardize", (7,)),
                                         ("zca", (6, 6, 2)), ("zca", (5, 3))])
def test_the_side_file_is_sized_from_the_configuration_alone(kind, shape):
    spec = SimpleNamespace(kind=kind, zca_reg=0.1 if kind == "zca" else None)  # data.preprocess
    x = np.random.default_rng(0).standard_normal((9, *shape))
    written = len(fit_preprocess(x, kind, zca_reg=spec.zca_reg).to_bytes())
    assert abs(preprocess_file_bytes(spec, shape) - written) <= 512


def test_every_preprocessing_kind_has_its_side_file_sized():
    """A kind added to ``data.preprocess`` is counted on disk too (its entry beside the
    others in ``data/_preprocess_size.py``), or estimate would fail on it."""
    from kernelcli.config import _allowed
    from kernelcli.config._load_data import PATCH_DEFAULTS  # the loader fills them in

    for kind in _allowed.PREPROCESS_KINDS:
        settings = ({k: v for k, v in PATCH_DEFAULTS.items() if k != "split"}
                    if kind == "random_patches" else {})
        spec = _allowed.PreprocessSpec(kind, **settings)
        assert preprocess_file_bytes(spec, (4, 4, 3)) > 0


def test_a_zca_matrix_of_32x32x3_images_is_counted_at_its_75_mb():
    spec = SimpleNamespace(kind="zca", zca_reg=0.1)
    assert 0 < preprocess_file_bytes(spec, (32, 32, 3)) - 3072 * 3072 * 8 < 4096


def _zca_config(tmp_path, keep_tiles=None):
    np.save(tmp_path / "x.npy", images(12))
    cfg = write_config(tmp_path, "z", layers=GAP_NET, compute={"block": 8},
                       keep_tiles=keep_tiles)
    doc = yaml.safe_load(cfg.read_text())
    doc["data"]["preprocess"] = {"kind": "zca", "zca_reg": 0.1}
    cfg.write_text(yaml.safe_dump(doc))
    return cfg


def test_the_disk_figure_holds_the_result_and_the_fitted_preprocessing(tmp_path):
    cfg = _zca_config(tmp_path)
    result = invoke("estimate", cfg, "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    d = 6 * 6 * 2
    assert out["preprocess_bytes"] >= d * d * 8
    assert out["disk_bytes"] == out["output_bytes"] + out["preprocess_bytes"]
    text = invoke("estimate", cfg)
    assert text.exit_code == 0, text.stderr
    line = next(ln for ln in text.stdout.splitlines() if "run directory on disk" in ln)
    assert "kernels.h5" in line and "fitted preprocessing" in line
    # the side file compute writes is the one counted
    assert invoke("compute", cfg, "--quiet").exit_code == 0
    side = next((tmp_path / "run").glob("preprocess-*.npz"))
    assert abs(side.stat().st_size - out["preprocess_bytes"]) <= 512


def test_tiles_kept_are_on_the_disk_figure(tmp_path):
    out = json.loads(invoke("estimate", _zca_config(tmp_path, keep_tiles=True),
                            "--json").stdout)
    assert out["disk_bytes"] > out["output_bytes"] * 2 + out["preprocess_bytes"]


def test_pairs_times_the_time_per_pair_is_the_pairs_wall_time(tmp_path):
    np.save(tmp_path / "x.npy", images(40))
    cfg = write_config(tmp_path, "t", layers=GAP_NET, compute={"block": 8})
    result = invoke("estimate", cfg, "--time", "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["pairs_total"] * out["seconds_per_pair"] == pytest.approx(out["pairs_seconds"])
    assert out["seconds_per_pair_per_device"] > 0
    assert out["timed_devices"] >= 1 and 1 <= out["timed_cores"] <= out["timed_devices"]
    assert 0 < out["cores_share"] <= 1
    assert out["seconds_estimate_idle"] <= out["seconds_estimate"] + 1e-9
    text = invoke("estimate", cfg, "--time")
    assert text.exit_code == 0, text.stderr
    line = next(ln for ln in text.stdout.splitlines() if "time per pair" in ln)
    if out["timed_devices"] > 1:
        assert f"the {out['timed_devices']} devices at once (one device: " in line
    assert "cores while timing" in text.stdout
    # the machine the times hold for, named: its CPU, cores, level and native library
    from kernelcli.kernels import describe_cpu, native_library

    assert out["timed_on"].startswith(describe_cpu())
    if out["engine"] == "native":
        assert out["timed_on"].endswith(f", native library {native_library().variant}")
    timed_on = next(ln for ln in text.stdout.splitlines() if "timed on" in ln)
    assert timed_on.split("timed on", 1)[1].strip() == (
        f"{out['timed_on']} (these times hold for this machine: run `kernelcli estimate "
        f"--time` on yours)")
