"""The CLI's warning when an NVIDIA GPU is present but JAX computes on the CPU
(kernelcli/cli/_setup.py): the detection on a fake driver tree, the line, its switch,
and no warning on this GPU-less machine."""

from __future__ import annotations

import numpy as np
import pytest

from helpers_cli import images, run_cli, write_config
from kernelcli.cli import _setup as _gpu_check  # given driver files made here
from kernelcli.errors import ConfigError

LINE = ("Warning: an NVIDIA GPU is present but JAX computes on the CPU (no CUDA jaxlib is "
        "installed, or it failed to load: -vv shows JAX's reason); install it with `pip "
        "install -e '.[cuda12]'` (or `pip install 'jax[cuda12]'`), or set "
        "KERNELCLI_NO_GPU_WARNING=1 to silence this")


@pytest.fixture
def driver(tmp_path):
    """A fake NVIDIA driver tree: (folder of GPUs, device file), neither there yet."""
    return tmp_path / "proc" / "driver" / "nvidia" / "gpus", tmp_path / "dev" / "nvidia0"


def test_no_driver_files_no_gpu(driver):
    assert not _gpu_check.nvidia_present(driver)
    driver[0].mkdir(parents=True)  # the driver loaded, no GPU
    assert not _gpu_check.nvidia_present(driver)


def test_a_gpu_folder_or_a_device_file_is_a_gpu(driver):
    gpus, dev = driver
    (gpus / "0000:01:00.0").mkdir(parents=True)
    assert _gpu_check.nvidia_present(driver)
    assert _gpu_check.nvidia_present([dev.parent / "nothing", gpus])
    dev.parent.mkdir()
    dev.write_text("")
    assert _gpu_check.nvidia_present([dev])


def test_the_warning_only_for_a_gpu_and_the_cpu_backend(driver):
    gpus, _dev = driver
    assert _gpu_check.warning("cpu", driver, environ={}) is None  # no GPU
    (gpus / "0000:01:00.0").mkdir(parents=True)
    assert _gpu_check.warning("cpu", driver, environ={}) == LINE
    assert _gpu_check.warning("gpu", driver, environ={}) is None
    assert _gpu_check.warning("cuda", driver, environ={}) is None
    for off in ({"KERNELCLI_NO_GPU_WARNING": "0"}, {"KERNELCLI_NO_GPU_WARNING": ""}):
        assert _gpu_check.warning("cpu", driver, environ=off) == LINE
    assert _gpu_check.warning("cpu", driver, environ={"KERNELCLI_NO_GPU_WARNING": "1"}) is None


def test_a_bad_switch_value_is_a_config_error(driver):
    with pytest.raises(ConfigError) as info:
        _gpu_check.warning("cpu", driver, environ={"KERNELCLI_NO_GPU_WARNING": "yes"})
    assert str(info.value) == ("KERNELCLI_NO_GPU_WARNING: 'yes' is not accepted; expected 1 "
                               "(no warning) or 0, or unset it")


def test_warn_once_prints_one_line_once(driver, monkeypatch, capsys):
    monkeypatch.delenv("KERNELCLI_NO_GPU_WARNING", raising=False)
    monkeypatch.setattr(_gpu_check, "_warned", False)
    (driver[0] / "0000:01:00.0").mkdir(parents=True)
    assert _gpu_check.warn_once(driver) == LINE  # this machine's JAX computes on the CPU
    assert _gpu_check.warn_once(driver) is None
    assert capsys.readouterr().err == LINE + "\n"


def test_the_cli_does_not_warn_on_this_machine(tmp_path):
    if _gpu_check.nvidia_present():
        pytest.skip("this machine has an NVIDIA GPU")
    np.save(tmp_path / "x.npy", images(8))
    out = run_cli("estimate", write_config(tmp_path), timeout=120)
    assert out.returncode == 0, out.stderr
    assert "NVIDIA" not in out.stderr + out.stdout
