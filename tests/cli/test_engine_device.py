"""An engine asked for by name says which device it computes on: ``compute.engine:
accelerator`` where jax sees only the CPU computes there (correctly, slowly), and says so
in ``estimate`` and ``compute -v``, never silently."""

from __future__ import annotations

import numpy as np
import pytest

from helpers_cli import images, run_cli, write_config

WHERE = ("compute.engine: accelerator, computing on the CPU: jax sees no GPU or TPU "
         "here; on a CPU, auto takes the native or cpu engine, as fast or faster")


@pytest.fixture
def accelerator_config(tmp_path):
    import jax

    if jax.default_backend() != "cpu":
        pytest.skip("jax sees an accelerator here")
    np.save(tmp_path / "x.npy", images(6))
    return write_config(tmp_path, "acc", compute={"engine": "accelerator"})


def test_estimate_says_the_accelerator_engine_computes_on_the_cpu(accelerator_config):
    out = run_cli("estimate", accelerator_config)
    assert out.returncode == 0, out.stderr
    (row,) = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("engine ")]
    assert row.split(None, 1)[1] == f"accelerator ({WHERE})"


def test_compute_v_says_it_too(accelerator_config):
    out = run_cli("compute", accelerator_config, "-v")
    assert out.returncode == 0, out.stderr
    assert f"engine: accelerator ({WHERE})" in out.stderr
