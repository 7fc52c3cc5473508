"""Every shipped configuration in configs/ is valid, and the demo runs end to end.

Configurations are globbed, so ones added later are checked too. A configuration's
input shape is that of its data file when the file is there (the demo's digits),
else 32x32x3 for CIFAR-10 configurations (their data is not shipped); the network
reads it after ``data.preprocess`` (random patches make feature maps of it).
"""

from __future__ import annotations

import time
from pathlib import Path

import jax
import numpy as np
import pytest

from helpers_cli import CONFIGS_DIR, read_kernels, run_cli
from kernelcli.config import check_architecture, load_config
from kernelcli.data import open_array
from kernelcli.pipeline import patch_settings

CONFIGS = sorted(CONFIGS_DIR.glob("*.yaml")) + sorted(CONFIGS_DIR.glob("*.yml"))
CIFAR_SHAPE = (32, 32, 3)


def input_shape(cfg) -> tuple:
    """The shape of an example as the network reads it: after ``data.preprocess``."""
    settings = patch_settings(cfg)
    shape = example_shape(cfg)
    return shape if settings is None else settings.output_shape(shape)


def example_shape(cfg) -> tuple:
    d = cfg.data
    if d.x1.is_file():
        with open_array(d.x1, d.key, layout=d.layout, limit=d.limit) as src:
            return src.example_shape
    if "cifar" in str(d.x1).lower() or "cifar" in cfg.name.lower():
        return CIFAR_SHAPE  # example shapes are post-layout (NHWC)
    pytest.fail(f"{cfg.source}: no data file at {d.x1} and not a CIFAR-10 configuration; "
                f"teach tests/config/test_configs.py its input shape")


def test_there_are_shipped_configurations():
    assert CONFIGS, f"no configurations in {CONFIGS_DIR}"
    assert CONFIGS_DIR / "demo_digits.yaml" in CONFIGS


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configuration_loads_and_fits_its_input(path):
    cfg = load_config(path)
    assert cfg.name and cfg.architecture.layers
    shape = input_shape(cfg)
    out = check_architecture(cfg.architecture, shape)
    assert len(out) == 1, f"{path.name}: the network's output is not a vector: {out}"


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configuration_has_a_limit_and_cifar_ones_preprocess(path):
    """A first run is sized by ``data.limit`` (the line to change for the whole set),
    and real CIFAR-10 pixels are never read raw: the published accuracies need it."""
    cfg = load_config(path)
    assert cfg.data.limit is not None, f"{path.name}: no data.limit"
    assert "limit:" in path.read_text(encoding="utf-8")
    if "cifar" in str(cfg.data.x1).lower():
        assert cfg.data.preprocess is not None, f"{path.name}: CIFAR-10 read raw"


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_shipped_configuration_is_accepted_by_the_engine(path):
    """Tracing only (no compilation): the engine builds the kernel of every config."""
    from kernelcli.kernels import build_kernel_fn

    cfg = load_config(path)
    x64 = jax.config.jax_enable_x64
    kfn = build_kernel_fn(cfg.architecture, input_shape(cfg), cfg.kernel.kinds,
                          cfg.kernel.dtype, cfg.kernel.augment)
    assert kfn.kinds == cfg.kernel.kinds
    assert kfn.augment == cfg.kernel.augment  # its flips checked against the network
    assert jax.config.jax_enable_x64 == x64  # a float64 config scopes its 64-bit mode


def test_demo_data_is_shipped():
    cfg = load_config(CONFIGS_DIR / "demo_digits.yaml")
    assert cfg.data.x1.is_file(), f"{cfg.data.x1} is missing"
    with open_array(cfg.data.x1, cfg.data.key, limit=cfg.data.limit) as src:
        assert src.shape[0] == cfg.data.limit
        assert src.example_shape[:2] == (8, 8)


@pytest.mark.slow
def test_demo_config_computes(tmp_path):
    run = tmp_path / "demo"
    t0 = time.monotonic()
    r = run_cli("compute", CONFIGS_DIR / "demo_digits.yaml", "--run-dir", run, timeout=1800)
    seconds = time.monotonic() - t0
    print(f"demo_digits compute took {seconds:.1f} s")
    assert r.returncode == 0, r.stderr
    assert "Traceback" not in r.stderr
    assert f"wrote {run / 'kernels.h5'}" in r.stderr
    cfg = load_config(CONFIGS_DIR / "demo_digits.yaml")
    arrays, attrs = read_kernels(run / "kernels.h5")
    n = cfg.data.limit
    assert sorted(arrays) == ["nngp", "ntk"]
    for k, a in arrays.items():
        assert a.shape == (n, n) and a.dtype == np.float32
        assert np.array_equal(a, a.T)
        assert np.all(np.isfinite(a))
        assert np.all(np.diag(a) > 0)
    assert attrs["config"] == (CONFIGS_DIR / "demo_digits.yaml").read_text()


def test_the_cifar10_converter_reads_the_binary_record_layout(tmp_path):
    """configs/data/cifar10_to_npy.py on batch files laid out like the official ones:
    a label byte, then the red, green and blue planes of a 32x32 image."""
    import subprocess
    import sys

    rng = np.random.default_rng(0)
    src = tmp_path / "cifar-10-batches-bin"
    src.mkdir()
    want = {}
    for name in [f"data_batch_{k}" for k in range(1, 6)] + ["test_batch"]:
        img = rng.integers(0, 256, (3, 32, 32, 3), dtype=np.uint8)  # NHWC
        lab = rng.integers(0, 10, 3).astype(np.uint8)
        rec = np.concatenate([lab[:, None], img.transpose(0, 3, 1, 2).reshape(3, -1)], axis=1)
        rec.tofile(src / f"{name}.bin")
        want[name] = (img, lab)
    script = Path(__file__).resolve().parents[2] / "configs" / "data" / "cifar10_to_npy.py"
    r = subprocess.run([sys.executable, str(script), str(src), str(tmp_path)],
                       capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    train = np.load(tmp_path / "cifar10_train.npy")
    assert train.shape == (15, 32, 32, 3) and train.dtype == np.uint8
    assert np.array_equal(train[:3], want["data_batch_1"][0])
    assert np.array_equal(np.load(tmp_path / "cifar10_test_labels.npy"),
                          want["test_batch"][1].astype(np.int64))


def test_a_missing_cifar_file_names_the_converter(tmp_path):
    """A data folder that ships the converter (as configs/data/ does), without the
    converted file: in a folder of its own, whatever this checkout has converted."""
    import shutil

    from kernelcli.errors import DataError

    shutil.copy(CONFIGS_DIR / "data" / "cifar10_to_npy.py", tmp_path)
    path = tmp_path / "cifar10_train.npy"
    with pytest.raises(DataError) as err:
        open_array(path, None, layout="NHWC")
    assert str(err.value) == (
        f"data.x1: {path} does not exist; give the path to a .npy, .npz, .h5, .hdf5 file"
        f" (or make it with python {tmp_path / 'cifar10_to_npy.py'})")
