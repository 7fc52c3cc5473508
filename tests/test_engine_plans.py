"""The two execution plans of the kernels (``compute.engine``): the key, its resolution,
and the accelerator plan against the CPU plan on the reference fixtures."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from kernelcli.errors import ConfigError
from kernelcli.kernels import resolve_engine
from kernelcli.run._job import config_fingerprint
from kernelcli.spec import load_config


def write_cfg(folder, compute=None):
    np.save(folder / "x.npy", np.random.default_rng(0).standard_normal((6, 4, 4, 2)))
    doc = {"name": "e", "data": {"x1": "x.npy"},
           "architecture": {"layers": [{"conv": {"filter": [3, 3]}}, "relu",
                                       "global_avg_pool"]},
           "compute": dict(compute or {}), "output": {"run_dir": "run"}}
    path = folder / "e.yaml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path


# -- the key and its resolution ---------------------------------------------------------

def test_engine_defaults_to_auto_and_is_read_case_insensitively(tmp_path):
    assert load_config(write_cfg(tmp_path)).compute.engine == "auto"
    cfg = load_config(write_cfg(tmp_path, {"engine": "Accelerator"}))
    assert cfg.compute.engine == "accelerator"


@pytest.mark.parametrize("value, shown", [("gpu", "'gpu'"), (3, "3")])
def test_a_bad_engine_is_a_config_error(tmp_path, value, shown):
    with pytest.raises(ConfigError) as info:
        load_config(write_cfg(tmp_path, {"engine": value}))
    assert info.value.exit_code == 2
    assert str(info.value).startswith(
        f"e.yaml: compute.engine: {shown} is not an engine; expected one of auto, cpu, "
        f"accelerator")


def test_the_engine_does_not_change_the_configuration_fingerprint(tmp_path):
    prints = {config_fingerprint(load_config(write_cfg(tmp_path, {"engine": e})))
              for e in ("auto", "cpu", "accelerator")}
    assert len(prints) == 1


@pytest.mark.parametrize("name, platform, plan", [
    ("auto", "cpu", "cpu"), ("auto", "gpu", "accelerator"), ("auto", "cuda", "accelerator"),
    ("auto", "tpu", "accelerator"), ("cpu", "gpu", "cpu"), ("accelerator", "cpu", "accelerator"),
])
def test_resolve_engine(name, platform, plan):
    assert resolve_engine(name, platform) == plan
