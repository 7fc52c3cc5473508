"""Environment variables: read and checked in one module (``kernelcli/_env.py``), a bad
value an exit-2 line naming the variable; float64 kernels leave JAX's process-wide
64-bit switch alone."""

from __future__ import annotations

import ast
import re
from pathlib import Path

import numpy as np
import pytest

import kernelcli
from helpers_cli import GAP_NET, error_line, images, invoke, write_config
from kernelcli import _env  # the environment variables' parsing is what is tested
from kernelcli.errors import ConfigError

ROOT = Path(kernelcli.__file__).parent
DOCS = ROOT.parent / "docs" / "environment.md"

pytestmark = pytest.mark.usefixtures("keep_process_state")


@pytest.mark.parametrize("value, want", [(None, None), ("", None), ("4096", 4096),
                                         (" 64 ", 64)])
def test_chunk_bytes_accepts_positive_integers(value, want):
    env = {} if value is None else {_env.CHUNK_BYTES: value}
    assert _env.chunk_bytes(env) == want


@pytest.mark.parametrize("value", ["0", "-3", "4k", "1.5", "lots"])
def test_a_bad_chunk_size_is_an_error_naming_the_variable(value):
    with pytest.raises(ConfigError) as exc:
        _env.chunk_bytes({_env.CHUNK_BYTES: value})
    assert str(exc.value) == (f"KERNELCLI_CHUNK_BYTES: {value!r} is not a byte count; "
                              f"expected a positive integer (bytes), or unset it for the "
                              f"default")


@pytest.mark.parametrize("value, want", [(None, None), ("0", False), ("1", True)])
def test_fusion_emitters_are_0_or_1(value, want):
    env = {} if value is None else {_env.FUSION_EMITTERS: value}
    assert _env.fusion_emitters(env) is want


def test_a_bad_fusion_emitter_setting_is_refused_not_ignored():
    with pytest.raises(ConfigError, match=r"^KERNELCLI_XLA_FUSION_EMITTERS: 'yes' is not "
                                          r"accepted; expected 0"):
        _env.fusion_emitters({_env.FUSION_EMITTERS: "yes"})


def test_the_cli_reports_a_bad_variable_in_one_line_and_writes_nothing(tmp_path, monkeypatch):
    np.save(tmp_path / "x.npy", images(4, seed=1))
    cfg = write_config(tmp_path, "c", layers=GAP_NET)
    monkeypatch.setenv(_env.CHUNK_BYTES, "big")
    result = invoke("compute", cfg, "--quiet")
    assert result.exit_code == 2
    assert error_line(result) == ("Error: KERNELCLI_CHUNK_BYTES: 'big' is not a byte count; "
                                  "expected a positive integer (bytes), or unset it for the "
                                  "default")
    assert not (tmp_path / "run").exists()


def test_no_module_but_env_reads_the_environment():
    """``os.environ`` / ``os.getenv`` appear only in _env.py, and where the CLI sets a
    variable for jax and the processes it starts (the device count, the cache, XLA's
    C++ log level: set and put back; the CPU level's XLA flag and OpenBLAS core before jax and numpy load;
    the compilation cache's settings before jax loads)."""
    writers = {"pipeline/_devices.py": 1, "cli/_setup.py": 2, "kernels/_cpu_level.py": 2,
               "kernels/_compile_cache.py": 1}  # module -> writes
    for path in sorted(ROOT.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        if rel == "_env.py":
            continue
        uses = [node.lineno for node in ast.walk(ast.parse(path.read_text()))
                if isinstance(node, ast.Attribute) and node.attr in ("environ", "getenv")
                and isinstance(node.value, ast.Name) and node.value.id == "os"]
        assert len(uses) <= writers.get(rel, 0), (
            f"kernelcli/{rel}:{uses} reads the environment; read it through kernelcli/_env.py")


def test_every_variable_is_documented_and_every_documented_one_is_read():
    documented = set()
    for row in DOCS.read_text().splitlines():
        if row.startswith("| `"):
            documented |= set(re.findall(r"`([A-Z][A-Z0-9_]+)`", row.split("|")[1]))
    assert documented == set(_env.VARIABLES), (
        f"undocumented {sorted(set(_env.VARIABLES) - documented)}, "
        f"documented but not read {sorted(documented - set(_env.VARIABLES))}")


def test_float64_kernels_leave_the_process_in_32_bit_mode():
    import jax
    import jax.numpy as jnp
    from test_kernels_properties import arch_of

    from kernelcli.kernels import build_kernel_fn
    from kernelcli.run import kernel_matrix

    before = jax.config.jax_enable_x64
    arch = arch_of("conv: {filter: [3, 3], padding: SAME}", "relu", "global_avg_pool",
                   "dense: {W_std: 1.0}")
    kfn = build_kernel_fn(arch, (6, 6, 2), dtype="float64")
    out = kernel_matrix(kfn, images(3, seed=2, dtype=np.float64), devices=jax.local_devices())
    assert out["ntk"].dtype == np.float64
    assert jax.config.jax_enable_x64 == before
    if not before:
        assert jnp.asarray(1.5).dtype == jnp.float32  # a notebook's arrays keep their dtype


@pytest.mark.parametrize("value", ["0", "-1", "two"])
def test_an_xla_host_device_count_below_one_is_refused_naming_the_variable(value):
    from helpers_cli import cli_env, run_cli

    r = run_cli("status", "nowhere",
                env=cli_env(XLA_FLAGS=f"--xla_force_host_platform_device_count={value}"))
    assert r.returncode == 2, r.stderr
    assert r.stderr.strip() == (f"Error: XLA_FLAGS: --xla_force_host_platform_device_count="
                                f"{value} is not a device count; accepted: an integer >= 1, "
                                f"or leave it out (one device per core)")
