"""The CLI's persistent compilation cache (kernelcli/cli/_setup.py): real ``kernelcli
compute`` subprocesses; what is checked is the cache folder's entries, never timings."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers_cli import cli_env, images, run_cli, write_config
from kernelcli._env import cache_dir  # its order of variables, given environments


def _entries(folder: Path) -> set:
    return {p.name for p in folder.rglob("*") if p.is_file()} if folder.exists() else set()


def _env(**extra) -> dict:
    env = cli_env(**extra)
    # a JAX_* setting left by another test (or the user's shell) must not steer these
    for k in ("JAX_COMPILATION_CACHE_DIR", "JAX_ENABLE_COMPILATION_CACHE",
              "JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"):
        env.pop(k, None)
    return env


def _config(tmp_path: Path, name: str) -> Path:
    np.save(tmp_path / "x.npy", images(5))
    # one device: which of several gets a batch first (and so compiles its copy of a
    # program) depends on the machine's load; one device compiles the same set each run.
    # The cpu engine: what is cached here is XLA's programs; the native engine would build
    # its library into each fresh folder first (10-45 s, tests/kernels/test_native_build.py)
    return write_config(tmp_path, name, run_dir=f"run_{name}",
                        compute={"devices": 1, "engine": "cpu"})


def test_second_run_compiles_nothing_new(tmp_path):
    cache = tmp_path / "cache"
    env = _env(KERNELCLI_CACHE_DIR=cache)
    r = run_cli("compute", _config(tmp_path, "a"), "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    first = _entries(cache)
    assert first, "the first run wrote no cache entries"
    # same network and shapes, another run directory: every program comes from the cache
    r = run_cli("compute", _config(tmp_path, "b"), "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    assert _entries(cache) == first


def test_off_switch_writes_nothing(tmp_path):
    xdg = tmp_path / "xdg"
    env = _env(KERNELCLI_CACHE_DIR="off", XDG_CACHE_HOME=xdg)
    r = run_cli("compute", _config(tmp_path, "a"), "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    assert not _entries(xdg)


def test_default_folder_under_xdg_cache_home(tmp_path):
    xdg = tmp_path / "xdg"
    env = _env(XDG_CACHE_HOME=xdg)
    env.pop("KERNELCLI_CACHE_DIR", None)
    r = run_cli("compute", _config(tmp_path, "a"), "--quiet", env=env)
    assert r.returncode == 0, r.stderr
    assert _entries(xdg / "kernelcli" / "jax")


def test_cache_dir_order():
    assert cache_dir({"KERNELCLI_CACHE_DIR": "/c", "JAX_COMPILATION_CACHE_DIR": "/j"}) == Path("/c")
    assert cache_dir({"KERNELCLI_CACHE_DIR": "OFF"}) is None
    assert cache_dir({"JAX_COMPILATION_CACHE_DIR": "/j"}) == Path("/j")
    assert cache_dir({"XDG_CACHE_HOME": "/x"}) == Path("/x/kernelcli/jax")


def test_a_folder_others_may_write_is_not_used(tmp_path):
    """JAX loads the executables it finds there as they are: a folder another user may
    write is no cache (as the native library's folder is no library)."""
    cache = tmp_path / "cache"
    cache.mkdir()
    cache.chmod(0o777)
    r = run_cli("compute", _config(tmp_path, "a"), "--quiet",
                env=_env(KERNELCLI_CACHE_DIR=cache))
    assert r.returncode == 0, r.stderr
    assert not _entries(cache)


SCRIPT = """
import sys
import numpy as np
import kernelcli
kernelcli.enable_compile_cache()
from kernelcli import stax
_, _, kernel_fn = stax.serial(stax.Dense(64), stax.Relu(), stax.Dense(1))
print(float(kernel_fn(np.arange(12.0).reshape(3, 4), None, "ntk")[0, 1]))
"""


def test_a_scripts_second_process_compiles_nothing_new(tmp_path):
    """The library leaves JAX's cache alone unless asked: a script that calls
    ``kernelcli.enable_compile_cache()`` keeps its programs for its next process."""
    import subprocess
    import sys

    cache = tmp_path / "cache"
    env = _env(KERNELCLI_CACHE_DIR=cache)
    runs = [subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                           text=True, timeout=300) for _ in range(2)]
    assert runs[0].returncode == 0, runs[0].stderr
    first = _entries(cache)
    assert first, "the first process wrote no cache entries"
    assert runs[1].returncode == 0, runs[1].stderr
    assert runs[1].stdout == runs[0].stdout
    runs.append(subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True,
                               text=True, timeout=300))
    assert _entries(cache) == first
    # without the call, the library writes nothing
    other = tmp_path / "other"
    plain = SCRIPT.replace("kernelcli.enable_compile_cache()\n", "")
    r = subprocess.run([sys.executable, "-c", plain], env=_env(KERNELCLI_CACHE_DIR=other),
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert not _entries(other)
