"""configs/cifar10_li2019.yaml's recipe end to end through the CLI, on CIFAR-shaped
stand-in images: random patches fitted on the training rows, the CNN-GP read out by
``local_avg_pool``, the kernel averaged over horizontal flips, then ``predict``.

The shipped configuration is read and scaled down (a handful of patches, 10 training
and 4 test images); its layers, patch size, pooling and flips are kept as shipped."""

from __future__ import annotations

import json

import h5py
import numpy as np
import pytest
import yaml

from helpers_cli import CONFIGS_DIR, invoke, read_kernels

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("keep_process_state")]

N_TRAIN, N_TEST, COUNT = 10, 4, 4


def test_the_li2019_recipe_computes_and_predicts_on_cifar_shaped_images(tmp_path):
    doc = yaml.safe_load((CONFIGS_DIR / "cifar10_li2019.yaml").read_text(encoding="utf-8"))
    rng = np.random.default_rng(0)
    for name, n in (("train", N_TRAIN), ("test", N_TEST)):
        np.save(tmp_path / f"cifar10_{name}.npy",
                rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8))
        np.save(tmp_path / f"cifar10_{name}_labels.npy", np.arange(n) % 3)
    data = doc["data"]
    for key in ("x1", "labels", "test", "test_labels"):
        data[key] = data[key].replace("data/", "")  # the stand-ins beside the copy
    data.update(limit=N_TRAIN, test_limit=N_TEST)
    data["preprocess"]["count"] = COUNT
    doc["output"]["run_dir"] = "run"
    cfg = tmp_path / "li2019.yaml"
    cfg.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    assert doc["kernel"]["augment"] == "hflip"
    assert {"local_avg_pool": {"window": 5}} in doc["architecture"]["layers"]

    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 0, result.stderr
    run = tmp_path / "run"
    arrays, _ = read_kernels(run / "kernels.h5")
    assert len(list(run.glob("preprocess-*.npz"))) == 1  # the fit, kept with the run
    for kind in ("nngp", "ntk"):
        k, kt, diag = arrays[kind], arrays[f"{kind}_test"], arrays[f"{kind}_test_diag"]
        assert k.shape == (N_TRAIN, N_TRAIN) and kt.shape == (N_TEST, N_TRAIN)
        assert diag.shape == (N_TEST,)
        assert np.array_equal(k, k.T)
        assert all(np.all(np.isfinite(a)) for a in (k, kt, diag))
        assert np.all(np.diag(k) > 0) and np.all(diag > 0)

    result = invoke("predict", run, "--json")
    assert result.exit_code == 0, result.stderr
    out = json.loads(result.stdout)
    assert out["n_train"] == N_TRAIN
    with h5py.File(run / "predictions.h5", "r") as f:
        for kind in ("nngp", "ntk"):
            mean = f[kind]["mean"][()]
            assert mean.shape[1:] == (N_TEST, 3) and np.all(np.isfinite(mean))
            assert f[kind].attrs["selected_ridge"] > 0
