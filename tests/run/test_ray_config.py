"""The Ray executor's settings, no Ray needed: ``compute.executor`` and
``compute.address`` are read or refused with one ConfigError line, the library's
``address=`` without the Ray executor is a usage error, and without Ray installed the
Ray executor says how to install it. The runs on a real local Ray cluster are in
test_ray.py (whose ``write_case`` these tests use).
"""

from __future__ import annotations

import sys

import pytest
from test_ray import write_case

from kernelcli.config import load_config
from kernelcli.errors import ConfigError, UsageError

# -- configuration (no Ray needed) ---------------------------------------------------

def test_executor_and_address_default_to_local_and_none(tmp_path):
    cfg = load_config(write_case(tmp_path))
    assert (cfg.compute.executor, cfg.compute.address) == ("local", None)


def test_executor_ray_with_an_address_is_read(tmp_path):
    cfg = load_config(write_case(tmp_path, compute={"executor": "Ray",
                                                    "address": "head:6379"}))
    assert (cfg.compute.executor, cfg.compute.address) == ("ray", "head:6379")


@pytest.mark.parametrize("compute, message", [
    ({"executor": "spark"},
     "compute.executor: 'spark' is not an executor; expected one of local, ray"),
    ({"address": "head:6379"},
     "compute.address: 'head:6379' is given but compute.executor is local; expected "
     "executor: ray as well, or no address"),
    ({"executor": "ray", "address": 6379}, "compute.address: 6379 is not a string"),
])
def test_bad_executor_settings_are_config_errors(tmp_path, compute, message):
    with pytest.raises(ConfigError) as info:
        load_config(write_case(tmp_path, compute=compute))
    assert str(info.value).startswith(f"r.yaml: {message}")


def test_without_ray_the_ray_executor_says_how_to_install_it(tmp_path, monkeypatch):
    from kernelcli.run import compute

    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` raises ImportError
    cfg = write_case(tmp_path)
    with pytest.raises(ConfigError) as info:
        compute(cfg, executor="ray")
    assert "pip install 'kernelcli[ray]'" in str(info.value)
    assert not (tmp_path / "run").exists()


def test_address_without_the_ray_executor_is_a_usage_error(tmp_path):
    from kernelcli.run import compute

    with pytest.raises(UsageError, match="address=: 'x:1' is given but the executor is local"):
        compute(write_case(tmp_path), address="x:1")
